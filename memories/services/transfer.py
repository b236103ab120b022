"""A bucket's memories out and in, as JSON Lines (docs/API.md, "Export and import").

One line per memory: the fields a client writes, the memory's ``id`` in the exporting bucket,
and under ``"engram"`` what Engram derived and retrieval needs to answer the same after an
import — the sequence context and place, the classification and, on request, the vectors (with
the name of the model that made them). ``"versions"``, on request, holds the memory's history.
On request too, the bucket's memory blocks (``{"block": {...}}`` lines) and its ratings
(``{"feedback": {...}}`` lines, naming their memory by the ``id`` of its line) follow the memories.

The export reads the bucket in keyset order (``created_at``, ``id``) a batch at a time, inside
one read-only snapshot, so a bucket of any size streams in constant memory and comes out as it
stood when the export began. The import writes through :func:`memories_ingest` a batch at a
time, each batch in its own transaction: deduplicated like any write, ``created_at`` kept, and
rows without vectors left to the enrichment sweep instead of the model.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
from django.db import connection, transaction
from django.db.models import F, Q, Window
from django.db.models.functions import RowNumber

from audit.services import Actor
from engram_site.exceptions import DomainError
from memories.links import RESERVED_PREFIX
from memories.models import EMBEDDING_DIMENSIONS, Memory, MemoryBlock, MemoryVersion, SearchFeedback
from memories.services.blocks import Expected, PreconditionFailed, block_put
from memories.services.enrichment import pending_enrichment_count
from memories.services.feedback import feedback_import
from memories.services.ingest.context import run_sequence_id
from memories.services.ingest.insert import memories_ingest
from memories.services.ingest.rows import Carried, MemoryInput
from tenants.models import AgentRestriction, Bucket

MEDIA_TYPE = "application/x-ndjson"
# Rows per export query and per import transaction.
EXPORT_BATCH = 500
IMPORT_BATCH = 1_000
# Rejected lines an import reports one by one (the count covers them all).
REPORTED_REJECTIONS = 100

# The fields a client writes, in the order a line lists them.
CLIENT_FIELDS = (
    "content", "created_at", "attributed_to", "agent_id", "run_id", "source_actor_id", "hint_root", "hint_tags",
    "metadata", "importance", "expires_at",
)  # fmt: skip
VERSION_FIELDS = ("kind", "previous", "details", "actor_kind", "actor_id", "actor_label", "created_at")
# A rating's fields in its line, after its ``id`` and ``memory_id`` (both of the exporting bucket).
FEEDBACK_FIELDS = ("signal", "query", "agent_id", "run_id", "created_at")
# The newest versions of a memory a line carries: an export writes at most these, an import
# refuses a line with more (history rows count towards no quota), and a history answer shows
# as many (memories/apis/lifecycle.py).
MAX_LINE_VERSIONS = 1_000
# A vector in a line: its float32 values, little-endian, base64-encoded (exact, and about half
# the size of the same numbers in decimal).
VECTOR_BYTES = EMBEDDING_DIMENSIONS * 4


def encode_vector(vector) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def decode_vector(text: str) -> np.ndarray:
    """A vector written by :func:`encode_vector`; ValueError for anything else."""
    raw = base64.b64decode(text.encode("ascii"), validate=True)
    if len(raw) != VECTOR_BYTES:
        raise ValueError(f"a vector holds {EMBEDDING_DIMENSIONS} float32 values ({VECTOR_BYTES} bytes)")
    vector = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if not np.isfinite(vector).all():
        raise ValueError("a vector must hold finite numbers")
    return vector


def _time(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with microseconds, as the API writes times ("…Z")."""
    return None if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")


# --- export -----------------------------------------------------------------------------------


@contextmanager
def _snapshot():
    """One read-only REPEATABLE READ transaction: every batch sees the bucket as it was when
    the first one was read, so a row edited or added meanwhile is neither missed nor repeated.
    Inside a caller's transaction (a test, a command's) that transaction is the snapshot."""
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


def _keyset_pages(
    bucket: Bucket, columns: list[str], batch_size: int, agents: AgentRestriction | None = None
) -> Iterator[list[dict]]:
    """The bucket's rows in (created_at, id) order, a page at a time (idx_memories_bucket_created).
    A row without created_at (none is written so) comes last, in id order. ``agents``: only the
    rows a token held to agents may read."""
    rows = Memory.objects.for_bucket(bucket).visible_to(agents).values(*columns)
    after = None
    while True:
        page = rows.filter(created_at__isnull=False)
        if after is not None:
            # created_at >= x bounds the index scan; the OR only sorts out rows of the same time.
            page = page.filter(Q(created_at__gt=after[0]) | Q(id__gt=after[1]), created_at__gte=after[0])
        batch = list(page.order_by("created_at", "id")[:batch_size])
        if not batch:
            break
        yield batch
        after = (batch[-1]["created_at"], batch[-1]["id"])
    last_id = None
    while True:
        page = rows.filter(created_at__isnull=True)
        if last_id is not None:
            page = page.filter(id__gt=last_id)
        batch = list(page.order_by("id")[:batch_size])
        if not batch:
            break
        yield batch
        last_id = batch[-1]["id"]


def _export_line(bucket: Bucket, row: dict, *, embeddings: bool, history: list[dict] | None) -> dict:
    line = {"id": str(row["id"])}
    for name in CLIENT_FIELDS:
        line[name] = row[name]
    line["created_at"] = _time(row["created_at"])
    line["expires_at"] = _time(row["expires_at"])
    if isinstance(line["metadata"], dict):
        # Keys starting with _engram are Engram's (links by id, which an import gives new
        # ones): they are derived again in the importing bucket, never client input.
        line["metadata"] = {k: v for k, v in line["metadata"].items() if not k.startswith(RESERVED_PREFIX)}
    sequence_id = row["sequence_id"]
    derived = {
        "context": row["context_text"],
        "sequence_id": None if sequence_id is None else str(sequence_id),
        "sequence_index": row["sequence_index"],
        # The sequence is the memory's run (it continues in the importing bucket), not its batch.
        "run_sequence": sequence_id is not None
        and row["run_id"] is not None
        and sequence_id == run_sequence_id(bucket, row["run_id"]),
        "classified_scope": row["classified_scope"],
        "classified_topic": row["classified_topic"],
    }
    if embeddings:
        derived["model"] = row["embedding_model"]
        derived["embedding"] = None if row["embedding"] is None else encode_vector(row["embedding"])
        derived["context_embedding"] = (
            None if row["context_embedding"] is None else encode_vector(row["context_embedding"])
        )
    line["engram"] = derived
    if history is not None:
        line["versions"] = history
    return line


def _histories(bucket: Bucket, memory_ids: list) -> dict:
    """The newest :data:`MAX_LINE_VERSIONS` versions of each of these memories, oldest first
    (idx_versions_memory)."""
    found: dict = {memory_id: [] for memory_id in memory_ids}
    newest_first = Window(RowNumber(), partition_by=[F("memory_id")], order_by=F("id").desc())
    versions = (
        MemoryVersion.objects.filter(tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory_id__in=memory_ids)
        .annotate(newness=newest_first)
        .filter(newness__lte=MAX_LINE_VERSIONS)
        .order_by("memory_id", "id")
        .values("memory_id", *VERSION_FIELDS)
    )
    for version in versions:
        entry = {name: version[name] for name in VERSION_FIELDS}
        entry["created_at"] = _time(entry["created_at"])
        found[version.pop("memory_id")].append(entry)
    return found


def memories_export(
    *,
    bucket: Bucket,
    versions: bool = False,
    embeddings: bool = False,
    blocks: bool = False,
    feedback: bool = False,
    batch_size: int = EXPORT_BATCH,
    agents: AgentRestriction | None = None,
) -> Iterator[bytes]:
    """``bucket``'s memories as JSON Lines, one chunk of up to ``batch_size`` lines at a time.

    Expired memories are included (with their ``expires_at``). ``versions`` adds each
    memory's history, ``embeddings`` its vectors, ``blocks`` the bucket's memory blocks after
    the memories, one ``{"block": {...}}`` line each (their current text; a block's history
    stays where it is), ``feedback`` the bucket's ratings after those, one ``{"feedback": {...}}``
    line each (``memory_id``: the ``id`` of the rated memory's line). A generator: nothing is
    read until the first chunk is asked for, and no more than a batch is held at once.
    ``agents``: only the memories (blocks, ratings) a token held to agents may read.
    """
    columns = ["id", *CLIENT_FIELDS, "context_text", "sequence_id", "sequence_index", "classified_scope",
               "classified_topic"]  # fmt: skip
    if embeddings:
        columns += ["embedding", "context_embedding", "embedding_model"]
    with _snapshot():
        for batch in _keyset_pages(bucket, columns, batch_size, agents):
            history = _histories(bucket, [row["id"] for row in batch]) if versions else None
            lines = []
            for row in batch:
                line = _export_line(bucket, row, embeddings=embeddings, history=history and history[row["id"]])
                lines.append(json.dumps(line, ensure_ascii=False, separators=(",", ":"), default=str))
            yield ("\n".join(lines) + "\n").encode()
        if blocks:
            lines = [json.dumps({"block": _block_line(block)}, ensure_ascii=False, separators=(",", ":"))
                     for block in _blocks_of(bucket, agents)]  # fmt: skip
            if lines:
                yield ("\n".join(lines) + "\n").encode()
        if feedback:
            yield from _feedback_chunks(bucket, agents, batch_size)


def _feedback_chunks(bucket: Bucket, agents: AgentRestriction | None, batch_size: int) -> Iterator[bytes]:
    """The bucket's ratings a token may read, oldest first, one ``{"feedback": {...}}`` line each,
    a batch at a time by id (idx_search_feedback_bucket narrows to the bucket; the id orders).
    A token held to agents reads the ratings its agents gave (and those no agent gave, with
    ``include_shared``) of the memories it reads (those its export holds)."""
    ratings = SearchFeedback.objects.for_bucket(bucket).visible_to(agents)
    if agents is not None:
        ratings = ratings.filter(agents.q("memory__agent_id"))
    ratings = ratings.values("id", "memory_id", *FEEDBACK_FIELDS)
    after = 0
    while batch := list(ratings.filter(id__gt=after).order_by("id")[:batch_size]):
        lines = []
        for row in batch:
            line = {"id": row["id"], "memory_id": str(row["memory_id"])}
            line |= {name: row[name] for name in FEEDBACK_FIELDS} | {"created_at": _time(row["created_at"])}
            lines.append(json.dumps({"feedback": line}, ensure_ascii=False, separators=(",", ":")))
        yield ("\n".join(lines) + "\n").encode()
        after = batch[-1]["id"]


def _blocks_of(bucket: Bucket, agents: AgentRestriction | None) -> Iterable[MemoryBlock]:
    """The bucket's blocks a token may read: shared ones first, then by agent and label."""
    return (
        MemoryBlock.objects.for_bucket(bucket)
        .visible_to(agents)
        .order_by(F("agent_id").asc(nulls_first=True), "label")
        .iterator()
    )


def _block_line(block: MemoryBlock) -> dict:
    return {
        "label": block.label,
        "agent_id": block.agent_id,
        "content": block.content,
        "max_tokens": block.max_tokens,
        "version": block.version,
        "updated_at": _time(block.updated_at),
    }


# --- import -----------------------------------------------------------------------------------


@dataclass
class ImportLine:
    """A valid line: the memory as a write takes it, what Engram derived for it (the
    validated ``"engram"`` object, vectors decoded) and its history."""

    number: int
    item: MemoryInput
    derived: dict | None = None
    versions: list[dict] = field(default_factory=list)
    source_id: str | None = None  # the memory's id where it was exported: what ratings name it by


@dataclass
class FeedbackLine:
    """A valid ``{"feedback": {...}}`` line: a rating of the memory whose line had the ``id``
    ``memory_ref``; ``source_id``, the rating's id where it was exported (to find the ``rated``
    version an imported history holds of it)."""

    number: int
    memory_ref: str
    signal: str
    query: str
    agent_id: str | None = None
    run_id: str | None = None
    created_at: datetime | None = None
    source_id: int | None = None


@dataclass
class BlockLine:
    """A valid ``{"block": {...}}`` line: a memory block's text and limit, for its owner and label."""

    number: int
    label: str
    agent_id: str | None
    content: str
    max_tokens: int


@dataclass
class RejectedLine:
    number: int
    detail: str
    errors: dict | list | None = None

    def as_dict(self) -> dict:
        out: dict = {"line": self.number, "detail": self.detail}
        if self.errors is not None:
            out["errors"] = self.errors
        return out


@dataclass
class ImportReport:
    lines: int = 0  # lines read, blank ones not counted
    imported: int = 0
    deduplicated: int = 0
    embeddings_reused: int = 0
    rejected_count: int = 0
    rejected: list[RejectedLine] = field(default_factory=list)
    pending_enrichment: int = 0
    blocks_imported: int = 0
    blocks_unchanged: int = 0
    feedback_imported: int = 0
    feedback_unchanged: int = 0
    feedback_skipped: int = 0
    # The exported id of each memory line written or deduplicated -> the memory's id here, and
    # the memories whose line's history was written (their ``rated`` versions came with it).
    memory_ids: dict = field(default_factory=dict, repr=False)
    with_history: set = field(default_factory=set, repr=False)

    def reject(self, line: RejectedLine) -> None:
        self.rejected_count += 1
        if len(self.rejected) < REPORTED_REJECTIONS:
            self.rejected.append(line)

    def as_dict(self) -> dict:
        return {
            "lines": self.lines,
            "imported": self.imported,
            "deduplicated": self.deduplicated,
            "embeddings_reused": self.embeddings_reused,
            "rejected_count": self.rejected_count,
            "rejected": [r.as_dict() for r in self.rejected],
            "pending_enrichment": self.pending_enrichment,
            "blocks_imported": self.blocks_imported,
            "blocks_unchanged": self.blocks_unchanged,
            "feedback_imported": self.feedback_imported,
            "feedback_unchanged": self.feedback_unchanged,
            "feedback_skipped": self.feedback_skipped,
        }


class ImportRejected(DomainError):
    """Some lines are invalid and the import was to be all or nothing: nothing was written."""

    code = "invalid_lines"


def _carried(bucket: Bucket, line: ImportLine) -> Carried | None:
    derived = line.derived
    if derived is None:
        return None
    sequence_id = derived.get("sequence_id")
    if sequence_id is not None:
        # A run's sequence continues in the importing bucket under the run's id there; a
        # batch's gets an id of its own, the same for every line of the old one.
        run_id = line.item.run_id
        if derived.get("run_sequence") and run_id is not None:
            sequence_id = run_sequence_id(bucket, run_id)
        else:
            sequence_id = uuid.uuid5(bucket.pk, f"sequence:{sequence_id}")
    # The importing bucket's model as read now; memories_ingest drops carried vectors too if
    # the bucket switches models before the rows are written.
    same_model = derived.get("model") == bucket.embedding_model
    return Carried(
        context_text=derived.get("context"),
        sequence_id=sequence_id,
        sequence_index=derived.get("sequence_index") if sequence_id is not None else None,
        classified_scope=derived.get("classified_scope"),
        classified_topic=derived.get("classified_topic"),
        # Vectors of another model are not comparable with this one's: the sweep embeds the row.
        embedding=derived.get("embedding") if same_model else None,
        context_embedding=derived.get("context_embedding") if same_model else None,
    )


def _import_batch(bucket: Bucket, batch: list[ImportLine], report: ImportReport, actor: Actor | None) -> None:
    carried = [_carried(bucket, line) for line in batch]
    # Histories are written in the memories' transaction; without any, memories_ingest keeps
    # its own (and with it, its retry after a deadlock with a concurrent merge).
    with transaction.atomic() if any(line.versions for line in batch) else nullcontext():
        results = memories_ingest(
            bucket=bucket,
            items=[line.item for line in batch],
            carried=carried,
            sequence=False,
            embed=False,
            actor=actor,
        )
        history = []
        for line, extra, result in zip(batch, carried, results, strict=True):
            if line.source_id is not None:
                report.memory_ids[line.source_id] = result.id
            if result.deduplicated:
                report.deduplicated += 1
                continue
            report.imported += 1
            if line.versions:
                report.with_history.add(result.id)
            if extra is not None and extra.embedding is not None:
                report.embeddings_reused += 1
            history += [
                MemoryVersion(memory_id=result.id, tenant_id=bucket.tenant_id, bucket_id=bucket.pk, **version)
                for version in line.versions
            ]
        MemoryVersion.objects.bulk_create(history, batch_size=500)


def _block_refusal(line: BlockLine, agents: AgentRestriction | None) -> RejectedLine | None:
    """A token held to agents writes its agents' blocks only, as through the blocks endpoints."""
    if agents is not None and not agents.can_write(line.agent_id):
        whose = f"agent {line.agent_id!r}'s" if line.agent_id else "the bucket's shared"
        message = f"This token is held to agents and may not write {whose} block {line.label!r}."
        return RejectedLine(line.number, message, {"agent_id": [message]})
    return None


def _import_block(bucket: Bucket, line: BlockLine, report: ImportReport, actor: Actor | None) -> None:
    """Set the block to the line's text and limit: a new version recorded in its history (which
    keeps what it replaces) with the reason ``import``; a block already so is left alone."""
    current = MemoryBlock.objects.for_bucket(bucket).owned_by(line.agent_id).filter(label=line.label).first()
    if current is not None and (current.content, current.max_tokens) == (line.content, line.max_tokens):
        report.blocks_unchanged += 1
        return
    fields = {"bucket": bucket, "agent_id": line.agent_id, "label": line.label, "content": line.content,
              "max_tokens": line.max_tokens, "reason": "import", "actor": actor}  # fmt: skip
    try:
        block_put(**fields, expected=Expected(any=True) if current is not None else Expected())
    except PreconditionFailed:  # created (or deleted) by another writer since it was read
        block_put(**fields, expected=Expected(any=True))
    report.blocks_imported += 1


def _import_feedback(
    bucket: Bucket, lines: list[FeedbackLine], report: ImportReport, actor: Actor | None,
    agents: AgentRestriction | None,
) -> None:  # fmt: skip
    """Store each rating for the memory its line names (by the ``id`` of that memory's line in this
    file), unless the same rating is there already (an import sent twice). A line naming no memory
    line of the file is rejected; one whose memory line was deduplicated into a memory the token
    may not read (another agent's same text) is skipped: the token could not rate it."""
    memories = (
        Memory.objects.for_bucket(bucket).only("id", "tenant_id", "bucket_id", "agent_id")
        .in_bulk(list(set(report.memory_ids.values())))
    )  # fmt: skip
    for memory in memories.values():
        memory.bucket = bucket  # its model embeds the queries
    vectors: dict[str, list[float] | None] = {}
    for line in lines:
        memory = memories.get(report.memory_ids.get(line.memory_ref))
        if memory is None:
            report.reject(_unknown_memory(line))
            continue
        if agents is not None and not agents.can_read(memory.agent_id):
            report.feedback_skipped += 1
            continue
        created = feedback_import(
            memory=memory, signal=line.signal, query=line.query, agent_id=line.agent_id, run_id=line.run_id,
            created_at=line.created_at, source_id=line.source_id if memory.pk in report.with_history else None,
            vectors=vectors, actor=actor,
        )  # fmt: skip
        if created:
            report.feedback_imported += 1
        else:
            report.feedback_unchanged += 1


def _unknown_memory(line: FeedbackLine) -> RejectedLine:
    message = f"The rated memory {line.memory_ref!r} is not the id of a valid memory line of this file."
    return RejectedLine(line.number, message, {"memory_id": [message]})


def _refuse(report: ImportReport) -> None:
    if report.rejected_count:
        first = report.rejected[0]
        raise ImportRejected(
            f"line {first.number}: {first.detail} ({report.rejected_count} invalid line(s); nothing was imported)",
            extra={"rejected_count": report.rejected_count, "rejected": [r.as_dict() for r in report.rejected]},
        )


def memories_import(
    *,
    bucket: Bucket,
    read: Callable[[], Iterable[ImportLine | BlockLine | FeedbackLine | RejectedLine]],
    skip_invalid: bool = False,
    actor: Actor | None = None,
    batch_size: int = IMPORT_BATCH,
    agents: AgentRestriction | None = None,
) -> ImportReport:
    """Import the lines ``read()`` yields into ``bucket``; return the counts.

    Written a batch at a time, each batch in its own transaction through
    :func:`memories_ingest` (deduplicated, audited for ``actor``), so a large import shows
    its progress in the bucket and an interrupted one can be sent again (what it wrote is
    deduplicated). Rows arrive without vectors unless their line carries them for this model:
    the enrichment sweep fills them, and ``pending_enrichment`` says how many of the bucket's
    rows wait for it. Lines without an ``"engram"`` object are unrelated facts (no sequence).

    Invalid lines: by default ``read()`` is gone through once first, and any invalid line
    raises :class:`ImportRejected` (the first :data:`REPORTED_REJECTIONS`, and the count)
    before anything is written; it is then read again to import. With ``skip_invalid`` they
    are skipped and reported, and the rest is imported in one pass — unless no line at all is
    valid, which raises :class:`ImportRejected` too.
    """
    if not skip_invalid:
        check = ImportReport()
        memory_refs: set[str] = set()
        ratings: list[FeedbackLine] = []
        for parsed in read():
            if isinstance(parsed, BlockLine):
                parsed = _block_refusal(parsed, agents) or parsed
            if isinstance(parsed, RejectedLine):
                check.reject(parsed)
            elif isinstance(parsed, ImportLine) and parsed.source_id is not None:
                memory_refs.add(parsed.source_id)
            elif isinstance(parsed, FeedbackLine):
                ratings.append(parsed)
        for rating in ratings:
            if rating.memory_ref not in memory_refs:
                check.reject(_unknown_memory(rating))
        check.rejected.sort(key=lambda rejected: rejected.number)
        _refuse(check)
    report = ImportReport()
    batch: list[ImportLine] = []
    blocks: list[BlockLine] = []
    feedback: list[FeedbackLine] = []
    for parsed in read():
        report.lines += 1
        if isinstance(parsed, BlockLine):
            parsed = _block_refusal(parsed, agents) or parsed
        if isinstance(parsed, RejectedLine):
            report.reject(parsed)
            continue
        if isinstance(parsed, BlockLine):
            blocks.append(parsed)
            continue
        if isinstance(parsed, FeedbackLine):
            feedback.append(parsed)
            continue
        batch.append(parsed)
        if len(batch) >= batch_size:
            _import_batch(bucket, batch, report, actor)
            batch = []
    if batch:
        _import_batch(bucket, batch, report, actor)
    for line in blocks:
        _import_block(bucket, line, report, actor)
    # After every memory line: a rating names its memory by the id of that memory's line.
    _import_feedback(bucket, feedback, report, actor, agents)
    if report.rejected_count == report.lines:
        _refuse(report)  # not one valid line: not memories at all (and nothing was written)
    report.pending_enrichment = pending_enrichment_count(bucket=bucket, agents=agents)
    return report
