"""Enrichment failures: a derived column (or the graph, or a label) one memory keeps failing on.

Each stage after a write (:class:`~memories.models.EnrichmentStage`: embedding, lemmas, graph
extraction, classification) works on batches. When a batch fails, :func:`isolate` finds the rows
that fail on their own (by halving the batch), so the rest of the batch is enriched; each of
those rows gets a record in ``enrichment_failures`` — attempts, the last error, when it first
and last failed, and when to try again, with exponential backoff
(:data:`RETRY_BASE_SECONDS` × 2^(attempts − 1), at most :data:`RETRY_MAX_SECONDS`). The
sweeps skip a row of a stage while its retry time is in the future
(:func:`deferred`); the record goes when the stage succeeds for the row
(:func:`failures_clear`), or with the memory. An operator can bring the retry forward
(:func:`enrichment_failures_retry`, the console's health page).

A failure of the model itself (it cannot load, is turned off, or fails on every text, a probe
included) is not a row's failure: nothing is recorded, the rows stay pending, and the sweep's
job run says why.

The graph and maintenance apps record their stages' failures here (they sit above memories).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.db.models.functions import Now

from audit.services import Actor, audit_record
from memories import signals
from memories.models import EnrichmentFailure, EnrichmentStage
from memories.services.signalling import send_safely

logger = logging.getLogger(__name__)

# The first retry waits a minute, then 2, 4, 8 ... minutes, at most a day.
RETRY_BASE_SECONDS = 60
RETRY_MAX_SECONDS = 24 * 3600
# The exponent stops growing here (2^20 minutes is far past the cap): no float overflow.
_MAX_EXPONENT = 20
ERROR_MAX_CHARS = 1000

T = TypeVar("T")


def error_text(exc: BaseException) -> str:
    """What a failure record keeps of an exception: its type and message, truncated."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text[:ERROR_MAX_CHARS]


def retry_delay_seconds(attempts: int) -> int:
    """How long after its ``attempts``-th failure a row waits before its next try."""
    return min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2 ** min(max(attempts, 1) - 1, _MAX_EXPONENT))


# --- finding the rows that fail ------------------------------------------------------------------


@dataclass
class Isolated:
    """What :func:`isolate` found: the rows that failed on their own (key → error), or an outage."""

    errors: dict = field(default_factory=dict)
    outage: str | None = None  # the model (or lemmatizer) failed as a whole: nothing is recorded
    calls: int = 0


def isolate(
    items: Sequence[T],
    run: Callable[[Sequence[T]], dict],
    *,
    key: Callable[[T], object],
    probe: Callable[[], str | None] | None = None,
) -> Isolated:
    """Run ``run`` over ``items``; when the call fails as a whole, find the items it fails on.

    ``run(items)`` does the stage's work in place and returns ``{key: error}`` for the items it
    could not do one by one (an unusable vector), or raises when the whole call fails. On a
    raise, the batch is halved until each failing item stands alone (about 2·k·log2(n) calls
    for k bad items among n), so one bad row costs the others nothing but a few model calls.
    When every item failed, ``probe()`` (a known-good input) tells a broken model from bad
    rows: if it answers an error, that is an outage and no row is blamed.
    """
    result = Isolated()
    if not items:
        return result
    result.calls = 1
    try:
        errors = run(items)
        raised = None
    except Exception as exc:
        errors, raised = None, exc
    if errors is not None and len(errors) < len(items):
        result.errors = errors
        return result
    if probe is not None:
        result.calls += 1
        problem = probe()
        if problem:
            result.outage = problem
            return result
    if errors is not None:
        result.errors = errors
        return result
    if len(items) == 1:
        result.errors = {key(items[0]): error_text(raised)}
        return result
    middle = len(items) // 2
    for half in (items[:middle], items[middle:]):
        _bisect(half, run, key, result)
    return result


def _bisect(items: Sequence[T], run: Callable[[Sequence[T]], dict], key, result: Isolated) -> None:
    result.calls += 1
    try:
        result.errors.update(run(items))
        return
    except Exception as exc:
        if len(items) == 1:
            result.errors[key(items[0])] = error_text(exc)
            return
    middle = len(items) // 2
    _bisect(items[:middle], run, key, result)
    _bisect(items[middle:], run, key, result)


# --- the records ----------------------------------------------------------------------------------


def deferred(stage: str) -> Exists:
    """True for a memory whose ``stage`` failed and waits for its retry time: the sweeps
    exclude it (an anti-join on enrichment_failures_memory_stage, a small table)."""
    return Exists(EnrichmentFailure.objects.filter(memory_id=OuterRef("pk"), stage=stage, next_retry_at__gt=Now()))


def failures_record(*, stage: str, errors: dict[uuid.UUID, str]) -> int:
    """Record that ``stage`` failed for these memories (memory id → error): a new record, or
    one more attempt with the new error and a retry time twice as far (exponential backoff).
    In the caller's transaction; memories that no longer exist are skipped."""
    if stage not in EnrichmentStage.values:
        raise ValueError(f"unknown enrichment stage {stage!r}")
    if not errors:
        return 0
    ids = list(errors)
    messages = [str(errors[i])[:ERROR_MAX_CHARS] for i in ids]
    for memory_id, message in zip(ids, messages, strict=True):
        logger.warning("enrichment stage %s failed for memory %s: %s", stage, memory_id, message)
    with connection.cursor() as cur:
        # The delay after attempt n is base * 2^(n-1): the updated row's old attempts is n-1.
        # statement_timestamp(), as Django's Now() in the sweeps' "next_retry_at > now": a long
        # transaction's start time would make a fresh record look due already.
        cur.execute(
            """
            INSERT INTO enrichment_failures AS f
                (memory_id, tenant_id, bucket_id, stage, attempts, last_error,
                 first_failed_at, last_failed_at, next_retry_at)
            SELECT m.id, m.tenant_id, m.bucket_id, %(stage)s, 1, e.error, statement_timestamp(), statement_timestamp(),
                   statement_timestamp() + make_interval(secs => %(base)s)
            FROM unnest(%(ids)s::uuid[], %(errors)s::text[]) AS e(id, error)
            JOIN memories m ON m.id = e.id
            ON CONFLICT (memory_id, stage) DO UPDATE SET
                attempts = f.attempts + 1,
                last_error = EXCLUDED.last_error,
                last_failed_at = EXCLUDED.last_failed_at,
                next_retry_at = EXCLUDED.last_failed_at + make_interval(
                    secs => least(%(cap)s, %(base)s * power(2, least(f.attempts, %(exponent)s)))
                )
            """,
            {
                "stage": stage,
                "ids": ids,
                "errors": messages,
                "base": RETRY_BASE_SECONDS,
                "cap": RETRY_MAX_SECONDS,
                "exponent": _MAX_EXPONENT,
            },
        )
        return cur.rowcount


def failures_clear(*, stage: str, memory_ids: Iterable[uuid.UUID]) -> int:
    """Forget the failures of ``stage`` for these memories (it has now succeeded for them)."""
    ids = list(memory_ids)
    if not ids:
        return 0
    with connection.cursor() as cur:
        # enrichment_failures_memory_stage serves memory_id = ANY(...).
        cur.execute("DELETE FROM enrichment_failures WHERE memory_id = ANY(%s::uuid[]) AND stage = %s", [ids, stage])
        return cur.rowcount


def failures_forget(*, memory_ids: Iterable[uuid.UUID]) -> int:
    """Forget every stage's failures of these memories (their content changed)."""
    return EnrichmentFailure.objects.filter(memory_id__in=list(memory_ids)).delete()[0]


def enrichment_failures_retry(*, failures: Iterable[EnrichmentFailure], actor: Actor) -> int:
    """Retry these failures now: their retry time becomes now (the sweeps take them again), the
    work is queued after commit, and one ``enrichment.retry`` audit event per tenant names the
    memories. Attempts and the last error stay until the stage succeeds. Returns how many."""
    rows = list(failures)
    if not rows:
        return 0
    with transaction.atomic():
        EnrichmentFailure.objects.filter(pk__in=[f.pk for f in rows]).update(next_retry_at=Now())
        for tenant_id in dict.fromkeys(f.tenant_id for f in rows):
            mine = [f for f in rows if f.tenant_id == tenant_id]
            audit_record(
                actor=actor, action="enrichment.retry", tenant=mine[0].tenant, object_type="memory",
                object_ids=[f.memory_id for f in mine],
                details={"stages": sorted({f.stage for f in mine}), "failures": len(mine)},
            )  # fmt: skip
        by_stage: dict[str, list[uuid.UUID]] = {}
        for row in rows:
            by_stage.setdefault(row.stage, []).append(row.memory_id)
        for stage, memory_ids in by_stage.items():
            transaction.on_commit(
                lambda s=stage, ids=memory_ids: send_safely(signals.enrichment_retried, stage=s, memory_ids=ids)
            )
    return len(rows)
