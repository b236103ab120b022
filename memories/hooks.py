"""Background work after memories are committed: publishing hints, and what the apps above
register to be queued with them.

What is queued is a *hint*: the database is the queue of record (rows with NULL derived
columns, scan cursors), and the periodic sweeps redo anything a lost hint would have done. So
:func:`publish` never raises, and when the broker is down it stops trying for a while instead
of making every write wait for a connection timeout. Every app's hints go through it.

The memories app's own tasks are asked for beside it, in memories/tasks.py (``enqueue_enrichment``,
``enqueue_retry``), from memories/receivers.py after a write's signal: per bucket and stage, not per
write (engram_site/jobs/coalesce.py). This module imports no task, so every app's tasks module can
use it.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable

from celery import Signature
from django.db import connection

logger = logging.getLogger(__name__)

# After a failed publish, skip publishing for this long (per process): the sweeps
# catch up, and writes do not pay a broker timeout each.
BROKER_BACKOFF_SECONDS = 30.0
# One quick retry (a broker blip), then give up. Measured against a Redis that is
# down: ~0.07 s, where retry=False waits out the whole connect timeout (~2 s).
PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.1, "interval_max": 0.1}

_lock = threading.Lock()
_suspended_until = 0.0


def _ids(memory_ids: Iterable) -> list[str]:
    return [str(i) for i in memory_ids]


# Work that needs a memory's embedding (classification, near-duplicates, contradictions, links).
# The apps that do it register a function in their AppConfig.ready (maintenance/receivers.py):
# memories sits below them and does not import them. It is called with a bucket and the new
# memories of it that have their embedding, and asks for its stages' runs on the bucket
# (engram_site/jobs/coalesce.py): it must be quick and never raise.
_follow_ups: list[Callable[..., None]] = []


def register_follow_up(requester: Callable[..., None]) -> None:
    """Call ``requester(bucket_id=..., memory_ids=...)`` for new memories once they have their
    embedding (idempotent per function)."""
    if requester not in _follow_ups:
        _follow_ups.append(requester)


def follow_up(*, bucket_id, memory_ids: list) -> None:
    """Ask for the follow-up work of these memories of ``bucket_id`` (every registered app's).
    Never raises."""
    for requester in _follow_ups:
        try:
            requester(bucket_id=bucket_id, memory_ids=list(memory_ids))
        except Exception:
            logger.exception("asking for follow-up work of %d memories failed", len(memory_ids))


def publish(signature_factory, *, what: str, count: int) -> bool:
    global _suspended_until
    if time.monotonic() < _suspended_until:
        logger.debug("broker recently unavailable; not queuing %s for %d memories (the sweep will)", what, count)
        return False
    try:
        signature_factory().apply_async(retry=True, retry_policy=PUBLISH_RETRY_POLICY)
        return True
    except Exception as exc:
        with _lock:
            _suspended_until = time.monotonic() + BROKER_BACKOFF_SECONDS
        logger.warning(
            "could not queue %s for %d memories (%s: %s); the periodic sweep will pick them up. "
            "Not retrying the broker for %.0fs.",
            what, count, type(exc).__name__, exc, BROKER_BACKOFF_SECONDS,
        )  # fmt: skip
        return False


def after_enrichment(*, memory_ids: Iterable[uuid.UUID]) -> None:
    """Ask for the follow-up work of rows the enrichment has just embedded (the write stored
    them without, or its hint was lost), bucket by bucket. Never raises."""
    try:
        ids = _ids(memory_ids)
        if not ids:
            return
        with connection.cursor() as cur:
            # Cross-tenant (the sweep's rows): the ids were just read from the table.
            cur.execute(
                "SELECT bucket_id, array_agg(id) FROM memories WHERE id = ANY(%s::uuid[]) GROUP BY bucket_id", [ids]
            )
            groups = cur.fetchall()
        for bucket_id, bucket_ids in groups:
            follow_up(bucket_id=bucket_id, memory_ids=bucket_ids)
    except Exception:
        logger.exception("after_enrichment failed for some memories")


# Who redoes a stage for an operator's retry (memories/services/enrichment_failures.py):
# enrichment is the memories app's own task (memories.tasks.enqueue_retry); the graph and
# maintenance apps register theirs (graph extraction, classification) in their AppConfig.ready.
_retries: dict[str, Callable[[list[str]], list[Signature]]] = {}


def register_retry(stage: str, factory: Callable[[list[str]], list[Signature]]) -> None:
    """Queue ``factory(memory_ids)``'s signatures when an operator retries ``stage`` for them."""
    _retries[stage] = factory


def retry_work(stage: str, ids: list[str]) -> list[Signature]:
    """The signatures an app registered for an operator's retry of ``stage`` (none if no app did)."""
    return _retries[stage](ids) if stage in _retries else []


def reset_backoff() -> None:
    """Forget a broker failure (tests; a process that knows the broker is back)."""
    global _suspended_until
    _suspended_until = 0.0
