"""Erasure — the right to be forgotten: every memory of a tenant that carries a person's identifier,
and everything kept about it, hard-deleted at once.

:func:`memories_erase` deletes the memories whose ``agent_id``, ``run_id``, ``attributed_to`` and
``source_actor_id`` equal the given values (every one given), live or deleted (``memories_deleted``),
in every bucket of the tenant or in one; with them their history (``memory_versions``), their
access times, their enrichment failure records and key documents, their ratings (and those the
erased agent or run gave), the sequence context other
memories quoted from them, and — through their participants (:mod:`memories.participants`:
``erasure_lock``, ``erase``) — what the apps above keep: graph mentions, edges and the entities
nothing else names, the documents and conversations they came from or that were submitted with
those values, review candidates. Audit events that quoted them keep their ids
but lose the text; so do the events of topic renames and merges that name a topic only they
carried (and, through the graph's participant, those of graph corrections naming an entity the
erasure forgets). One transaction; one ``memory.erase`` event with the counts and the names of
the fields, never their values.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from django.db import connection, transaction
from django.db.models import Q

from audit.services import Actor, audit_record, audit_scrub
from engram_site.exceptions import DomainError
from memories.models import DeletedMemory, EnrichmentFailure, Memory, MemoryAccess, MemoryKey, MemoryVersion
from memories.participants import Participant, collect, run
from memories.services.blocks import blocks_erase
from memories.services.feed_writer import events_erase
from memories.services.feedback import feedback_erase
from memories.services.ingest.context import CONTEXT_PREDECESSORS
from memories.services.stats_cache import forget_stats
from tenants.models import Bucket, Tenant

# What an erasure matches on: the columns that identify whose memory it is.
ERASURE_FIELDS = ("agent_id", "run_id", "attributed_to", "source_actor_id")


@dataclass
class ErasureReport:
    """What an erasure deleted (or, for a dry run, would delete), by kind."""

    dry_run: bool
    bucket_id: str | None  # None: every bucket of the tenant
    memories: int = 0
    deleted_memories: int = 0  # rows in memories_deleted (deleted, restorable until now)
    versions: int = 0
    access_times: int = 0
    enrichment_failures: int = 0  # failure records (their errors may quote the text)
    keys: int = 0  # key documents (memory_keys: what the memories said, spelled out)
    feedback: int = 0  # ratings of the memories, and those the erased agent or run gave (search_feedback)
    contexts_cleared: int = 0  # other memories whose sequence context quoted an erased one
    graph_mentions: int = 0
    graph_edges: int = 0
    graph_entities: int = 0
    sources: int = 0
    source_chunks: int = 0
    duplicate_candidates: int = 0
    conflict_candidates: int = 0
    blocks: int = 0  # the agent's memory blocks (an erasure by agent_id alone)
    block_versions: int = 0
    audit_events_scrubbed: int = 0

    def as_dict(self) -> dict:
        return asdict(self)

    def counts(self) -> dict:
        return {k: v for k, v in asdict(self).items() if isinstance(v, int) and not isinstance(v, bool)}


# The counts the participants answer with (Participant.erase).
_COUNTED = (
    "graph_mentions",
    "graph_edges",
    "graph_entities",
    "sources",
    "source_chunks",
    "duplicate_candidates",
    "conflict_candidates",
    "audit_events_scrubbed",  # graph: the names of forgotten entities in its corrections' events
)

# The audit events that name topics (memories.services.topics; maintenance's reclassification).
TOPIC_ACTIONS = ("topic.rename", "topic.merge", "topic.reclassify")


@dataclass(frozen=True)
class _Erased:
    id: object
    bucket_id: object
    sequence_id: object
    sequence_index: int | None
    content: str
    agent_id: str | None


class _RollBack(Exception):
    def __init__(self, report: ErasureReport):
        self.report = report


def erasure_fields(values: dict) -> dict[str, str]:
    """The given fields of :data:`ERASURE_FIELDS` (values as given). None given, an unknown field
    or an empty value is a DomainError: an erasure must never match by accident."""
    unknown = sorted(set(values) - set(ERASURE_FIELDS))
    if unknown:
        raise DomainError(f"Not an erasure field: {', '.join(unknown)}.", code="invalid")
    fields = {k: v for k, v in values.items() if v is not None}
    if not fields:
        raise DomainError(f"Give at least one of {', '.join(ERASURE_FIELDS)}.", code="invalid")
    if any(not isinstance(v, str) or not v for v in fields.values()):
        raise DomainError("Erasure values must be non-empty strings.", code="invalid")
    return fields


def memories_erase(
    *, tenant: Tenant, fields: dict, bucket: Bucket | None = None, dry_run: bool = False, actor: Actor
) -> ErasureReport:
    """Hard-delete the tenant's memories matching every one of ``fields`` (in ``bucket`` only, if
    given) with everything kept about them (see the module's docstring), in one transaction,
    audited as ``memory.erase``. ``dry_run`` does all of it and rolls it back: its counts are
    exactly what the erasure would delete, and nothing changes."""
    fields = erasure_fields(fields)
    if bucket is not None and bucket.tenant_id != tenant.pk:
        raise DomainError("The bucket belongs to another tenant.", code="cross_tenant")
    try:
        with transaction.atomic():
            report = _erase(tenant=tenant, fields=fields, bucket=bucket, actor=actor, dry_run=dry_run)
            if dry_run:
                raise _RollBack(report)
    except _RollBack as rolled_back:
        return rolled_back.report
    return report


def _erase(
    *, tenant: Tenant, fields: dict[str, str], bucket: Bucket | None, actor: Actor, dry_run: bool
) -> ErasureReport:
    bucket_id = bucket.pk if bucket is not None else None
    report = ErasureReport(dry_run=dry_run, bucket_id=str(bucket_id) if bucket_id else None)
    scope = Q(tenant_id=tenant.pk) & (Q(bucket_id=bucket_id) if bucket_id else Q())
    # idx_memories_agent / idx_memories_run serve an erasure by agent or run; the others scan the tenant.
    live = Memory.objects.filter(scope, **fields)
    # memories_deleted keeps the columns in ``row``; its rows are few (a retention window's deletes).
    gone = DeletedMemory.objects.filter(scope, **{f"row__{name}": value for name, value in fields.items()})
    holding = set(live.values_list("bucket_id", flat=True).distinct()) | set(
        gone.values_list("bucket_id", flat=True).distinct()
    )
    run(Participant.erasure_lock, tenant=tenant, bucket_id=bucket_id, bucket_ids=sorted(holding, key=str),
        fields=fields)  # fmt: skip
    erased = [
        _Erased(*row)
        for row in live.values_list(
            "id", "bucket_id", "sequence_id", "sequence_index", "content", "agent_id"
        ).iterator()
    ]
    live_ids = [e.id for e in erased]
    for row_id, row_bucket, row, content in gone.values_list("id", "bucket_id", "row", "content").iterator():
        erased.append(
            _Erased(row_id, row_bucket, row.get("sequence_id"), row.get("sequence_index"), content, row.get("agent_id"))
        )
    gone_ids = [e.id for e in erased[len(live_ids) :]]
    ids = live_ids + gone_ids
    counted = collect(
        Participant.erase, reported=_COUNTED, tenant=tenant, bucket_id=bucket_id, memory_ids=ids, fields=fields
    )
    for name, count in counted.items():
        setattr(report, name, count)
    report.contexts_cleared = _clear_contexts(tenant, erased, ids)
    report.access_times = MemoryAccess.objects.filter(memory_id__in=live_ids).delete()[0]
    # They would go with the rows (ON DELETE CASCADE); deleted here to be counted.
    report.enrichment_failures = EnrichmentFailure.objects.filter(tenant_id=tenant.pk, memory_id__in=live_ids).delete()[
        0
    ]
    report.keys = MemoryKey.objects.filter(memory_id__in=live_ids).delete()[0]
    # Their ratings would go with the rows too; those the agent or run gave to other memories
    # would not (nor the "rated" versions they left in those memories' histories).
    report.feedback, rated_versions = feedback_erase(
        tenant_id=tenant.pk, bucket_id=bucket_id, memory_ids=live_ids, fields=fields
    )
    # idx_versions_memory finds a memory's history; what the memories said before an edit is
    # scrubbed from the audit log too.
    history = MemoryVersion.objects.filter(tenant_id=tenant.pk, memory_id__in=ids)
    said = [e.content for e in erased]
    # The topics they were labelled with, now and before a rename: a topic no memory left
    # carries was theirs, and its names leave the audit of topic renames and merges.
    topics = set(live.values_list("classified_topic", flat=True)) | {
        row.get("classified_topic") for row in gone.values_list("row", flat=True)
    }
    for previous in history.values_list("previous", flat=True):
        if isinstance(previous, dict) and isinstance(previous.get("content"), str):
            said.append(previous["content"])
        if isinstance(previous, dict) and isinstance(previous.get("classified_topic"), str):
            topics.add(previous["classified_topic"])
    report.versions = history.delete()[0] + rated_versions
    with connection.cursor() as cur:
        cur.execute("DELETE FROM memories WHERE tenant_id = %s AND id = ANY(%s)", [tenant.pk, live_ids])
        report.memories = cur.rowcount
    report.deleted_memories = DeletedMemory.objects.filter(tenant_id=tenant.pk, pk__in=gone_ids).delete()[0]
    # The change feed: earlier events lose the content, and each memory gets its ``erased`` event,
    # both still held to the memory's agent (or to none when the agent is what is erased).
    events_erase(
        tenant_id=tenant.pk, erased=[(e.id, e.bucket_id, e.agent_id) for e in erased], agent_erased="agent_id" in fields
    )
    report.audit_events_scrubbed += audit_scrub(tenant=tenant, object_ids=ids, texts=said)
    if set(fields) == {"agent_id"}:
        # The agent's blocks are its own, like its memories; an erasure narrowed further (by run,
        # by attribution) is about some memories of it, not about the agent, and keeps them.
        blocks = blocks_erase(tenant=tenant, agent_id=fields["agent_id"], bucket=bucket)
        report.blocks, report.block_versions = blocks.blocks, blocks.versions
        report.audit_events_scrubbed += audit_scrub(tenant=tenant, object_ids=blocks.ids, texts=blocks.texts)
    report.audit_events_scrubbed += audit_scrub(tenant=tenant, actions=TOPIC_ACTIONS, texts=_forgotten(tenant, topics))
    audit_record(
        actor=actor, action="memory.erase", tenant=tenant, object_type="memory", object_ids=ids,
        # The names of the fields, not their values: an identifier of a person is what is being erased.
        details={"fields": sorted(fields), "bucket_id": report.bucket_id, "counts": report.counts()},
    )  # fmt: skip
    # BM25 statistics of the buckets (sizes, term frequencies) are counted again at the next search.
    touched = {e.bucket_id for e in erased}
    transaction.on_commit(lambda: forget_stats(touched))
    return report


def _forgotten(tenant: Tenant, topics: set) -> set[str]:
    """The ``topics`` that no memory of the tenant left (live or restorable) is labelled with,
    nor was before a rename."""
    topics = {t for t in topics if isinstance(t, str) and t}
    if not topics:
        return set()
    # No index serves classified_topic: an erasure reads the tenant's rows once (idx_memories_tenant).
    carried = set(
        Memory.objects.filter(tenant_id=tenant.pk, classified_topic__in=topics)
        .values_list("classified_topic", flat=True)
        .distinct()
    )
    wanted = sorted(topics - carried)
    # Restorable rows, and the history of the memories left (a topic renamed away from them).
    carried |= set(
        DeletedMemory.objects.filter(tenant_id=tenant.pk, row__classified_topic__in=wanted).values_list(
            "row__classified_topic", flat=True
        )
    ) | set(
        MemoryVersion.objects.filter(tenant_id=tenant.pk, previous__classified_topic__in=wanted).values_list(
            "previous__classified_topic", flat=True
        )
    )
    return topics - carried


def _clear_contexts(tenant: Tenant, erased: list[_Erased], ids: list) -> int:
    """Clear the sequence context of the memories left that quote an erased one: those after it in
    its sequence (the context is the text of one or two predecessors) or whose context holds its
    text. Their context vector and lexemes go with it; they are searched by their own text."""
    rows = [e for e in erased if e.sequence_id is not None]
    if not rows:
        return 0
    with connection.cursor() as cur:
        # idx_memories_sequence: WHERE tenant_id, bucket_id AND sequence_id (and its positions).
        cur.execute(
            """
            UPDATE memories m SET context_text = NULL, context_lemmatized = NULL, context_embedding = NULL
            FROM unnest(%s::uuid[], %s::uuid[], %s::int[], %s::text[]) AS e(bucket_id, sequence_id, position, content)
            WHERE m.tenant_id = %s AND m.bucket_id = e.bucket_id AND m.sequence_id = e.sequence_id
              AND m.context_text IS NOT NULL AND NOT (m.id = ANY(%s))
              AND (m.sequence_index - e.position BETWEEN 1 AND %s OR strpos(m.context_text, e.content) > 0)
            """,
            [
                [str(e.bucket_id) for e in rows],
                [str(e.sequence_id) for e in rows],
                [e.sequence_index for e in rows],
                [e.content for e in rows],
                tenant.pk,
                ids,
                CONTEXT_PREDECESSORS,
            ],
        )
        return cur.rowcount
