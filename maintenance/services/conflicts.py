"""Conflicts: the scan and the per-write hint that store pairs the detector raises."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable

from django.db import connection

from engram_site import activity
from engram_site.jobs.runner import JobRecorder
from engram_site.providers import lemmatizer
from maintenance import conflict_detector, nearest
from maintenance.models import ConflictStatus
from maintenance.services.scans import Row, incremental_scan
from memories.models import Memory
from tenants.models import Bucket

CONFLICT_K = conflict_detector.CANDIDATE_K
CONFLICT_MIN_SIMILARITY = conflict_detector.CANDIDATE_MIN_SIMILARITY
_FIELDS = ("id", "content", "created_at", "superseded_by")


def _probe_lemmas(words: frozenset[str]) -> list[str]:
    """The probe's words as the bucket's full-text index holds them (lemmas; ``[a-z]+`` only)."""
    return _probe_lemmas_many([words])[0]


def _probe_lemmas_many(groups: list[frozenset[str]]) -> list[list[str]]:
    """:func:`_probe_lemmas` of each group, in one lemmatizer call (it lemmatizes each text on
    its own: the same lemmas as a call per group)."""
    if not groups:
        return []
    try:
        lemmas = [text.split() for text in lemmatizer.lemmatize_many([" ".join(sorted(words)) for words in groups])]
    except lemmatizer.LemmatizerUnavailable:
        lemmas = [[] for _ in groups]
    return [
        sorted({w for w in [*words, *found] if re.fullmatch(r"[a-z]+", w)})
        for words, found in zip(groups, lemmas, strict=True)
    ]


# idx_memories_lemmatized_tsv serves the @@; ts_rank_cd's normalisation 2 divides by the length.
_PROBE_SQL = (
    "SELECT id FROM memories WHERE tenant_id = %s AND bucket_id = %s AND id <> {memory}"
    " AND lemmatized_tsv @@ to_tsquery('simple', {query})"
    " ORDER BY ts_rank_cd(lemmatized_tsv, to_tsquery('simple', {query}), 2) DESC, created_at DESC LIMIT %s"
)


def _lexical_partners(*, tenant_id, bucket_id, memory_id, content: str) -> list[uuid.UUID]:
    """Memories of the bucket that a full-text search finds for ``content``'s probes
    (conflict_detector.probes): for each group of words, the PROBE_LIMIT memories that hold
    most of them, shortest first (a plain statement of a fact is short), then newest."""
    return _lexical_partners_many(tenant_id=tenant_id, bucket_id=bucket_id, contents={memory_id: content})[memory_id]


def _lexical_partners_many(*, tenant_id, bucket_id, contents: dict) -> dict:
    """:func:`_lexical_partners` of several memories of one bucket (``{memory_id: content}``):
    every probe lemmatized in one call and searched in one statement (each probe its own
    LATERAL search, the same query as one statement per probe: the same rows)."""
    found: dict = {memory_id: [] for memory_id in contents}
    owners, groups = [], []
    for memory_id, content in contents.items():
        for group in conflict_detector.probes(content):
            owners.append(memory_id)
            groups.append(group)
    searches = [
        (owner, " | ".join(words)) for owner, words in zip(owners, _probe_lemmas_many(groups), strict=True) if words
    ]
    if not searches:
        return found
    search = _PROBE_SQL.format(memory="p.memory_id", query="p.query")
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT p.ord, hit.id FROM unnest(%s::uuid[], %s::text[]) WITH ORDINALITY AS p(memory_id, query, ord)"
            f" CROSS JOIN LATERAL ({search}) hit ORDER BY p.ord",
            [[str(owner) for owner, _q in searches], [q for _o, q in searches], tenant_id, bucket_id,
             conflict_detector.PROBE_LIMIT],
        )  # fmt: skip
        hits = cur.fetchall()
    # The partners' order is not the per-probe statements' for certain (ties, the join's output
    # order), and need not be: each is compared with the memory on its own, one pair each.
    for ordinal, other_id in hits:
        partners = found[searches[ordinal - 1][0]]
        if other_id not in partners:
            partners.append(other_id)
    return found


def _store_conflicts(
    *,
    tenant_id,
    bucket_id,
    memory_id,
    found: list[nearest.Similar],
    me: dict | None = None,
    partners: list[uuid.UUID] | None = None,
    known: dict | None = None,
) -> int:
    """Run the detector on ``memory_id`` and each neighbour, and each memory its probes find;
    store the pairs it raises. ``me``, ``partners`` and ``known`` (rows by id): what
    :func:`conflicts_find_for` read for a turn of memories at once; read here when not given."""
    if me is None:
        me = Memory.objects.filter(pk=memory_id).values(*_FIELDS).first()
    if me is None:
        return 0
    similarity: dict = {n.id: n.similarity for n in found}
    if partners is None:
        partners = _lexical_partners(
            tenant_id=tenant_id, bucket_id=bucket_id, memory_id=memory_id, content=me["content"]
        )
    for other_id in partners:
        similarity.setdefault(other_id, None)
    if not similarity:
        return 0
    if known is None:
        known = {r["id"]: r for r in Memory.objects.filter(pk__in=list(similarity)).values(*_FIELDS)}
    rows = known
    params: list = []
    for other_id in similarity:
        other = rows.get(other_id)
        if other is None or me["superseded_by"] == other_id or other["superseded_by"] == memory_id:
            continue  # gone, or one already replaced the other: nothing left to review
        older, newer = sorted([me, other], key=lambda r: (r["created_at"], str(r["id"])))
        finding = conflict_detector.detect(older["content"], newer["content"])
        if finding is None:
            continue
        a, b = sorted([memory_id, other_id])  # uuid order == PostgreSQL's uuid order
        params += [tenant_id, bucket_id, a, b, finding.code, finding.reason, finding.score,
                   similarity[other_id], conflict_detector.DETECTOR_VERSION, ConflictStatus.OPEN]  # fmt: skip
    if not params:
        return 0
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO conflict_candidates (tenant_id, bucket_id, memory_a_id, memory_b_id, code, reason, score, "
            "similarity, detector_version, status, resolved_by) VALUES "
            + ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, '')"] * (len(params) // 10))
            # One row per pair (conflict_pair_unique): a pair found again, or resolved, stays as it is.
            + " ON CONFLICT (memory_a_id, memory_b_id) DO NOTHING",
            params,
        )
        return cur.rowcount


def conflicts_scan(*, recorder: JobRecorder, bucket: Bucket | None = None, full: bool = False) -> dict:
    """Store pairs of memories of a bucket that likely contradict each other as open
    :class:`ConflictCandidate` rows for review (the hourly catch-up of the per-write hint).

    Each memory added since the bucket's cursor is compared with its nearest neighbours and
    the memories its probes find by full text, by the detector of ``maintenance/conflict_detector/``;
    pairs already stored (open or resolved) are left as they are. Reads only: no memory changes.
    """
    found = {"conflicts": 0}

    def visit(row: Row, *, tenant_id, bucket_id, exact: bool) -> None:
        near = nearest.nearest(
            tenant_id=tenant_id, bucket_id=bucket_id, memory_id=row.id, k=CONFLICT_K,
            min_similarity=CONFLICT_MIN_SIMILARITY, exact=exact,
        )  # fmt: skip
        found["conflicts"] += _store_conflicts(tenant_id=tenant_id, bucket_id=bucket_id, memory_id=row.id, found=near)

    incremental_scan(job="conflicts", bucket=bucket, full=full, recorder=recorder, visit=visit)
    recorder.add(conflicts=found["conflicts"])
    recorder.set(detector_version=conflict_detector.DETECTOR_VERSION)
    return dict(recorder.counts)


def conflicts_find_for(*, memory_ids: Iterable, exact: bool | None = None) -> dict:
    """The per-write hint: look for conflicts of these (new) memories (``exact``: as
    :func:`maintenance.nearest.nearest`'s). The memories' rows, their probes' full-text searches
    and the rows of every memory they are compared with are read once for all of them (a
    statement each per memory before); the detector and the stored pairs are the same."""
    counts = {"scanned": 0, "conflicts": 0}
    rows = list(
        Memory.objects.filter(pk__in=list(memory_ids), embedding__isnull=False).values(
            *_FIELDS, "tenant_id", "bucket_id"
        )
    )
    if not rows:
        return counts
    near = {
        row["id"]: nearest.nearest(
            tenant_id=row["tenant_id"], bucket_id=row["bucket_id"], memory_id=row["id"], k=CONFLICT_K,
            min_similarity=CONFLICT_MIN_SIMILARITY, exact=exact,
        )
        for row in rows
    }  # fmt: skip
    partners: dict = {}
    for tenant_id, bucket_id in {(row["tenant_id"], row["bucket_id"]) for row in rows}:
        contents = {
            row["id"]: row["content"] for row in rows if (row["tenant_id"], row["bucket_id"]) == (tenant_id, bucket_id)
        }
        partners |= _lexical_partners_many(tenant_id=tenant_id, bucket_id=bucket_id, contents=contents)
    others = {n.id for found in near.values() for n in found} | {i for found in partners.values() for i in found}
    known = {row["id"]: {f: row[f] for f in _FIELDS} for row in rows}
    missing = others - set(known)
    if missing:
        known |= {r["id"]: r for r in Memory.objects.filter(pk__in=list(missing)).values(*_FIELDS)}
    for row in rows:
        activity.pause()
        counts["conflicts"] += _store_conflicts(
            tenant_id=row["tenant_id"], bucket_id=row["bucket_id"], memory_id=row["id"], found=near[row["id"]],
            me=known[row["id"]], partners=partners[row["id"]], known=known,
        )  # fmt: skip
        counts["scanned"] += 1
    return counts
