"""Links between memories: refines / cites (and the graph's supersedes, through its participant)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable

from django.db.models import Q

from engram_site import activity
from engram_site.jobs.runner import JobRecorder
from engram_site.providers import lemmatizer
from maintenance import nearest
from maintenance.services.scans import Row, incremental_scan
from memories.links import RESERVED_PREFIX
from memories.models import Memory
from memories.participants import Participant, collect
from memories.services.links import links_add
from memories.text import text_hash
from tenants.models import Bucket

# "refines": a newer memory says what an older one said, and more. Its embedding is
# close (cosine >= REFINE_MIN_SIMILARITY), it contains at least REFINE_MIN_COVERAGE of
# the older memory's content words, and adds at least REFINE_MIN_EXTRA_TERMS of its own.
REFINE_MIN_SIMILARITY = 0.6
REFINE_MIN_COVERAGE = 0.75
REFINE_MIN_EXTRA_TERMS = 2
REFINE_MIN_TERMS = 2
LINK_K = 8
# "cites": a memory names another by id, or quotes its whole text in quotation marks.
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)
_QUOTED = re.compile(r"[\"“”«»]([^\"“”«»]{8,2000})[\"“”«»]")
QUOTE_MIN_WORDS = 3


def _terms(texts: list[str]) -> list[set[str]]:
    try:
        lemmas = lemmatizer.lemmatize_many(texts)
    except lemmatizer.LemmatizerUnavailable:
        lemmas = [" ".join(re.findall(r"\w+", t.lower())) for t in texts]
    return [set(lemma.split()) for lemma in lemmas]


def _cited(memory: dict) -> set[uuid.UUID]:
    """Memories of the same bucket that ``memory`` names by id or quotes verbatim."""
    # Ids in the content or in the client's metadata (not in the links this pass wrote).
    metadata = {k: v for k, v in (memory["metadata"] or {}).items() if not k.startswith(RESERVED_PREFIX)}
    haystack = memory["content"] + " " + json.dumps(metadata, default=str)
    ids = {uuid.UUID(m) for m in _UUID.findall(haystack)} - {memory["id"]}
    hashes = {
        text_hash(q) for q in _QUOTED.findall(memory["content"]) if len(q.split()) >= QUOTE_MIN_WORDS
    }  # fmt: skip
    if not ids and not hashes:
        return set()
    same_bucket = Memory.objects.filter(tenant_id=memory["tenant_id"], bucket_id=memory["bucket_id"]).exclude(
        pk=memory["id"]
    )
    return set(
        same_bucket.filter(Q(pk__in=ids) | Q(text_hash__in=hashes)).values_list("id", flat=True)
    )  # fmt: skip


def _refined(memory: dict, *, exact: bool | None, turn: _Turn | None = None) -> set[uuid.UUID]:
    """Older memories of the same bucket that ``memory`` refines (``turn``: the rows and lemmas
    :func:`links_find_for` read for a turn of memories at once)."""
    near = nearest.nearest(
        tenant_id=memory["tenant_id"], bucket_id=memory["bucket_id"], memory_id=memory["id"], k=LINK_K,
        min_similarity=REFINE_MIN_SIMILARITY, exact=exact,
    )  # fmt: skip
    if not near:
        return set()
    if turn is None:
        older = list(
            Memory.objects.filter(pk__in=[n.id for n in near], created_at__lt=memory["created_at"]).values_list(
                "id", "content"
            )
        )
    else:
        older = turn.older(near, memory["created_at"])
    if not older:
        return set()
    texts = [memory["content"]] + [content for _, content in older]
    mine, *theirs = _terms(texts) if turn is None else turn.terms(texts)
    refined = set()
    for (other_id, _), terms in zip(older, theirs, strict=True):
        if len(terms) < REFINE_MIN_TERMS:
            continue
        coverage = len(terms & mine) / len(terms)
        if coverage >= REFINE_MIN_COVERAGE and len(mine - terms) >= REFINE_MIN_EXTRA_TERMS:
            refined.add(other_id)
    return refined


class _Turn:
    """What the refines check of a turn of memories reads, read once: the rows of every memory
    that is a neighbour of one of them (one statement, not one per memory), and the terms of
    every text, lemmatized in one call (the lemmatizer does each text on its own, so the terms
    are the same)."""

    def __init__(self, memories: list[dict], *, exact: bool | None) -> None:
        ids = set()
        for memory in memories:
            ids |= {
                n.id
                for n in nearest.nearest(
                    tenant_id=memory["tenant_id"], bucket_id=memory["bucket_id"], memory_id=memory["id"], k=LINK_K,
                    min_similarity=REFINE_MIN_SIMILARITY, exact=exact,
                )
            }  # fmt: skip
        self.rows = {
            i: (content, created)
            for i, content, created in Memory.objects.filter(pk__in=list(ids)).values_list(
                "id", "content", "created_at"
            )
        }
        texts = {m["content"] for m in memories} | {content for content, _c in self.rows.values()}
        self._terms = dict(zip(texts, _terms(list(texts)), strict=True)) if texts else {}

    def older(self, near: list[nearest.Similar], created_at) -> list[tuple[uuid.UUID, str]]:
        return [(n.id, self.rows[n.id][0]) for n in near if n.id in self.rows and self.rows[n.id][1] < created_at]

    def terms(self, texts: list[str]) -> list[set[str]]:
        return [self._terms[t] if t in self._terms else _terms([t])[0] for t in texts]


def _store_links(memory_id: uuid.UUID, links: list[tuple[uuid.UUID, str]]) -> int:
    """Add links to ``linked_memory_ids`` and their kinds (memories/links.py)."""
    return links_add(memory_id=memory_id, links=links)


def _link_one(memory: dict, *, exact: bool | None, turn: _Turn | None = None) -> dict[str, int]:
    cites = _cited(memory)
    refines = _refined(memory, exact=exact, turn=turn) - cites
    links = [(i, "cites") for i in sorted(cites)] + [(i, "refines") for i in sorted(refines)]
    _store_links(memory["id"], links)
    return {"cites": len(cites), "refines": len(refines)}


_LINK_FIELDS = ("id", "tenant_id", "bucket_id", "content", "metadata", "created_at")


def _supersession(*, tenant_id, bucket_id) -> int:
    """How many memories the participants (the graph's supersession pass) marked superseded in
    a bucket whose links were just recorded; 0 when none answers (the graph switched off)."""
    bucket = Bucket.objects.get(pk=bucket_id, tenant_id=tenant_id)
    return collect(Participant.links_recorded, reported=("superseded",), bucket=bucket).get("superseded", 0)


def links_pass(*, recorder: JobRecorder, bucket: Bucket | None = None, full: bool = False) -> dict:
    """Record refines / cites links for memories added since the last pass, then run
    the graph's supersession pass on the buckets that changed (``supersedes`` links
    are the graph app's: it decides from temporal facts which memory replaced which)."""
    totals = {"cites": 0, "refines": 0, "superseded": 0}

    def visit(row: Row, *, tenant_id, bucket_id, exact: bool) -> None:
        memory = Memory.objects.filter(pk=row.id).values(*_LINK_FIELDS).first()
        if memory is not None:
            for kind, n in _link_one(memory, exact=exact).items():
                totals[kind] += n

    def after_bucket(*, tenant_id, bucket_id) -> None:
        totals["superseded"] += _supersession(tenant_id=tenant_id, bucket_id=bucket_id)

    incremental_scan(job="links", bucket=bucket, full=full, recorder=recorder, visit=visit, after_bucket=after_bucket)
    recorder.add(**totals)
    return dict(recorder.counts)


def links_find_for(*, memory_ids: Iterable, exact: bool | None = None) -> dict:
    """The per-write hint: refines / cites links of these (new) memories (``exact``: as
    :func:`maintenance.nearest.nearest`'s), their neighbours' rows and terms read once for all."""
    totals = {"scanned": 0, "cites": 0, "refines": 0}
    memories = list(Memory.objects.filter(pk__in=list(memory_ids), embedding__isnull=False).values(*_LINK_FIELDS))
    turn = _Turn(memories, exact=exact) if memories else None
    for memory in memories:
        activity.pause()
        for kind, n in _link_one(memory, exact=exact, turn=turn).items():
            totals[kind] += n
        totals["scanned"] += 1
    return totals
