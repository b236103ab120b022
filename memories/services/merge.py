"""Merging memories: one row absorbs another (near-duplicate review, bucket merges),
and a bucket's rows move to another bucket.

A merge never leaves a reference to a row that is gone: the survivor takes the
absorbed row's tags, links and empty fields; links and supersession of other
memories are re-pointed; other apps move what they hang on the absorbed row
(their participants' ``memories_absorb``, :mod:`memories.participants`: graph mentions and
edges, review candidates, the chunks of documents that stated the absorbed row) —
all in the caller's transaction, so a failure anywhere leaves everything as it was.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from django.db import connection, transaction

from audit.services import Actor
from engram_site.exceptions import DomainError, NotFound
from memories.links import LINKS_KEY, RESERVED_PREFIX
from memories.models import Memory, VersionKind
from memories.participants import Participant, run
from memories.services.feed_writer import events_bucket_moved
from memories.services.feedback import feedback_move
from memories.services.history import Change, versions_record
from memories.services.keys import keys_mark_stale
from memories.services.lifecycle import DeleteReason, memories_trash
from memories.services.stats_cache import forget_stats
from tenants.models import Bucket

logger = logging.getLogger(__name__)

# Rows loaded per query (keeps parameter lists far below PostgreSQL's 65,535).
BATCH = 5000
# Columns the survivor takes from the absorbed row when its own is empty.
FILLED_IF_EMPTY = (
    "attributed_to", "agent_id", "run_id", "source_actor_id", "hint_root", "classified_scope", "classified_topic",
)  # fmt: skip
# Every column a merge may change on the survivor.
MERGED_FIELDS = ("hint_tags", "metadata", "linked_memory_ids", "last_accessed_at", *FILLED_IF_EMPTY)


@dataclass(frozen=True)
class AbsorbReport:
    absorbed: int = 0
    survivors: int = 0
    # Other memories whose links pointed at an absorbed row.
    relinked: int = 0


def _as_uuid(value) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _remap(value, mapping: dict[uuid.UUID, uuid.UUID]) -> str:
    try:
        return str(mapping.get(_as_uuid(value), value))
    except ValueError:  # not a uuid: leave it alone
        return str(value)


def _links(memory: Memory, mapping: dict[uuid.UUID, uuid.UUID]) -> tuple[list[str], list[dict]]:
    """``memory``'s link ids and link kinds with absorbed ids replaced by their survivors."""
    ids = [_remap(i, mapping) for i in (memory.linked_memory_ids or [])]
    entries = [
        {**e, "id": _remap(e.get("id"), mapping)}
        for e in ((memory.metadata or {}).get(LINKS_KEY) or [])
        if isinstance(e, dict)
    ]
    return ids, entries


def _set_links(memory: Memory, ids: list[str], entries: list[dict]) -> None:
    """Store links without duplicates and without a link from a memory to itself."""
    me = str(memory.pk)
    memory.linked_memory_ids = [i for i in dict.fromkeys(ids) if i != me]
    unique: list[dict] = []
    for entry in entries:
        if entry.get("id") != me and entry not in unique:
            unique.append(entry)
    metadata = dict(memory.metadata or {})
    if unique:
        metadata[LINKS_KEY] = unique
    else:
        metadata.pop(LINKS_KEY, None)
    memory.metadata = metadata


def _absorb_into(survivor: Memory, absorbed: Memory, mapping: dict[uuid.UUID, uuid.UUID]) -> None:
    tags = list(survivor.hint_tags or [])
    tags += [t for t in (absorbed.hint_tags or []) if t not in tags]
    if survivor.hint_tags is not None or absorbed.hint_tags is not None:
        survivor.hint_tags = tags
    # The client's metadata: the survivor's keys win, keys only the absorbed row had are kept.
    theirs = {k: v for k, v in (absorbed.metadata or {}).items() if not k.startswith(RESERVED_PREFIX)}
    survivor.metadata = {**theirs, **(survivor.metadata or {})}
    ids, entries = _links(survivor, mapping)
    more_ids, more_entries = _links(absorbed, mapping)
    _set_links(survivor, ids + more_ids, entries + more_entries)
    for name in FILLED_IF_EMPTY:
        if getattr(survivor, name) in (None, ""):
            setattr(survivor, name, getattr(absorbed, name))
    if absorbed.last_accessed_at and (
        survivor.last_accessed_at is None or absorbed.last_accessed_at > survivor.last_accessed_at
    ):
        survivor.last_accessed_at = absorbed.last_accessed_at


def _relink_others(mapping: dict[uuid.UUID, uuid.UUID], *, tenant_ids: set, exclude: set) -> int:
    """Point other memories' links at survivors. Served by the GIN index on
    linked_memory_ids (``?|``: any of the absorbed ids)."""
    others = [
        m
        for m in Memory.objects.filter(
            tenant_id__in=tenant_ids, linked_memory_ids__has_any_keys=[str(i) for i in mapping]
        )
        .select_for_update()
        .only("id", "linked_memory_ids", "metadata")
        .order_by("pk")
        if m.pk not in exclude
    ]
    for memory in others:
        _set_links(memory, *_links(memory, mapping))
    Memory.objects.bulk_update(others, ["linked_memory_ids", "metadata"], batch_size=500)
    return len(others)


def _repoint_supersession(mapping: dict[uuid.UUID, uuid.UUID], *, tenant_ids: set, bucket_ids: set) -> None:
    absorbed, survivors = list(mapping), [mapping[i] for i in mapping]
    with connection.cursor() as cur:
        # Supersession lives inside a bucket: (tenant_id, bucket_id) leads the scan.
        cur.execute(
            """
            UPDATE memories m SET superseded_by = v.survivor
            FROM unnest(%s::uuid[], %s::uuid[]) AS v(absorbed, survivor)
            WHERE m.tenant_id = ANY(%s) AND m.bucket_id = ANY(%s) AND m.superseded_by = v.absorbed
            """,
            [absorbed, survivors, list(tenant_ids), list(bucket_ids)],
        )
        # A survivor that was superseded by the row it absorbed supersedes nothing of itself.
        cur.execute(
            "UPDATE memories SET superseded_by = NULL, superseded_at = NULL WHERE id = ANY(%s) AND superseded_by = id",
            [survivors],
        )


def memories_absorb(*, mapping: dict, actor: Actor | None = None) -> AbsorbReport:
    """Merge each memory of ``mapping``'s keys into the memory it maps to, then delete it.

    The survivor keeps its content, embedding and time, and gains the absorbed row's
    tags (union), client metadata keys it did not have, links (``linked_memory_ids``
    and their kinds, re-pointed, without self-links) and any column it had empty.
    Other memories' links and ``superseded_by`` that named an absorbed row name its
    survivor; the participants (``memories_absorb``) move their rows. Both rows
    of a pair must belong to one tenant. Runs in one transaction (the caller's, if any).
    Each absorbed row is kept in ``memories_deleted`` (restorable) and both rows' histories
    record the merge, by ``actor``.
    """
    mapping = {_as_uuid(k): _as_uuid(v) for k, v in mapping.items()}
    if not mapping:
        return AbsorbReport()
    absorbed_ids, survivor_ids = set(mapping), set(mapping.values())
    if absorbed_ids & survivor_ids:
        raise DomainError("A memory cannot both absorb another and be absorbed in the same merge.")
    with transaction.atomic():
        rows: dict[uuid.UUID, Memory] = {}
        everyone = sorted(absorbed_ids | survivor_ids)
        for start in range(0, len(everyone), BATCH):
            rows.update(
                (m.pk, m)
                for m in Memory.objects.select_for_update()
                .filter(pk__in=everyone[start : start + BATCH])
                .defer("embedding", "context_embedding")
                .order_by("pk")  # one lock order for every merge: no deadlocks between two of them
            )
        missing = (absorbed_ids | survivor_ids) - set(rows)
        if missing:
            raise NotFound(f"Memory not found: {sorted(map(str, missing))[0]}.")
        for absorbed, survivor in mapping.items():
            if rows[absorbed].tenant_id != rows[survivor].tenant_id:
                raise DomainError("Memories of different tenants cannot be merged.")
        survivors, survivor_changes = [], []
        for survivor_id in sorted(survivor_ids):
            survivor = rows[survivor_id]
            before = {name: getattr(survivor, name) for name in MERGED_FIELDS}
            absorbed_here = sorted(i for i, s in mapping.items() if s == survivor_id)
            for absorbed_id in absorbed_here:
                _absorb_into(survivor, rows[absorbed_id], mapping)
            survivors.append(survivor)
            previous = {name: value for name, value in before.items() if getattr(survivor, name) != value}
            if previous:
                survivor_changes.append(
                    Change(survivor.pk, survivor.tenant_id, survivor.bucket_id, previous, {"absorbed": absorbed_here})
                )
        Memory.objects.bulk_update(survivors, list(MERGED_FIELDS), batch_size=500)
        tenant_ids = {m.tenant_id for m in rows.values()}
        bucket_ids = {m.bucket_id for m in rows.values()}
        relinked = _relink_others(mapping, tenant_ids=tenant_ids, exclude=absorbed_ids | survivor_ids)
        _repoint_supersession(mapping, tenant_ids=tenant_ids, bucket_ids=bucket_ids)
        # Graph mentions and edges, review candidates, source provenance: their apps move them (or raise).
        run(Participant.memories_absorb, mapping=mapping)
        # Ratings of an absorbed row rate what it said, which its survivor now says.
        feedback_move(mapping=mapping)
        # A survivor's key did not know what it took from the absorbed rows (the graph's mentions).
        keys_mark_stale(memory_ids=survivor_ids)
        # The history: each absorbed row went into its survivor (and stays restorable until the
        # purge job); each survivor took the fields that changed.
        versions_record(
            kind=VersionKind.MERGED,
            changes=[
                Change(i, rows[i].tenant_id, rows[i].bucket_id, {}, {"into": mapping[i]}) for i in sorted(absorbed_ids)
            ],
            actor=actor,
        )
        versions_record(kind=VersionKind.EDITED, changes=survivor_changes, actor=actor)
        memories_trash(ids=sorted(absorbed_ids), reason=DeleteReason.MERGED)
        # What still hangs on the absorbed rows (graph_processed) goes with them (ON DELETE CASCADE).
        with connection.cursor() as cur:
            cur.execute("DELETE FROM memories WHERE id = ANY(%s)", [list(absorbed_ids)])
        transaction.on_commit(lambda: forget_stats(bucket_ids))
    return AbsorbReport(absorbed=len(absorbed_ids), survivors=len(survivor_ids), relinked=relinked)


def memories_move_bucket(*, source: Bucket, target: Bucket) -> list[uuid.UUID]:
    """Move every memory of ``source`` to ``target`` (same tenant); returns their ids.

    Rows whose ``text_hash`` exists in ``target`` must have been absorbed first (the
    unique index would refuse them). Part of :func:`memories.services.buckets.bucket_merge`.
    """
    if source.tenant_id != target.tenant_id:
        raise DomainError("Buckets of different tenants cannot be merged.")
    with connection.cursor() as cur:
        # idx_memories_tenant_bucket finds the rows. A row's vectors stay only if they are of
        # the target's embedding model: another model's are dropped (the enrichment sweep
        # embeds the row again), and the source's staged vectors of a switch go.
        cur.execute(
            """
            UPDATE memories m SET bucket_id = t.id,
                embedding = CASE WHEN m.embedding_model = t.embedding_model THEN m.embedding END,
                context_embedding = CASE WHEN m.embedding_model = t.embedding_model THEN m.context_embedding END,
                embedding_model = t.embedding_model
            FROM buckets t WHERE t.id = %s AND m.tenant_id = %s AND m.bucket_id = %s RETURNING m.id
            """,
            [target.pk, source.tenant_id, source.pk],
        )
        ids = [row[0] for row in cur.fetchall()]
        events_bucket_moved(source_id=source.pk, target_id=target.pk, tenant_id=source.tenant_id, memory_ids=ids)
        cur.execute("DELETE FROM memory_embeddings_next WHERE bucket_id = %s", [source.pk])
        # Their histories, enrichment failures, keys, passages and the bucket's deleted memories go
        # along (a removed source bucket would take them with it; the console lists failures by
        # bucket). A key or passage by another model than the target's is built again
        # (memories.services.keys, memories.services.passages).
        for table in ("memory_versions", "memories_deleted", "enrichment_failures", "memory_keys", "memory_passages",
                      "search_feedback"):  # fmt: skip
            cur.execute(
                f"UPDATE {table} SET bucket_id = %s WHERE tenant_id = %s AND bucket_id = %s",
                [target.pk, source.tenant_id, source.pk],
            )
    bucket_ids = {source.pk, target.pk}  # now: the source may be deleted before the commit
    transaction.on_commit(lambda: forget_stats(bucket_ids))
    return ids
