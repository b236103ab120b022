"""Follow-up work coalesced per bucket and stage: however many writes a bucket gets, at most one
message per (stage, bucket) waits in the queue and at most one task runs it.

Before, every write queued a chain of tasks for its own rows (fill columns → passages → keys →
classify → …), each step queued when the one before had run. Under a steady ingest the queue held
~1,200 messages, each step of a write's chain waited behind every newer write's messages, and each
message paid the worker's wait for a pause in the requests (engram_site/activity.py): at 50
memories/s, 300 s after the writes nothing had been classified (bench/results/steady-ingest-*).

Now a write *requests* a stage for its bucket (:func:`request`): a mark in the shared cache says a
run is queued, and only the write that sets it publishes a message. The task (:func:`run`) takes
the bucket's stage lock (a PostgreSQL advisory lock, so one run per stage and bucket on every
machine), clears the mark, and does *whatever is pending* in the bucket — the rows still missing
that stage's derived data, a bounded batch at a time — until nothing is left or its time budget
is spent; then it queues itself again if work is left or a write asked meanwhile. A run that
finds the lock held leaves the mark: the holder sees it when it is done and queues the next run.

The mark expires (:data:`MARK_SECONDS`) so a lost message (broker down, worker killed) stops
holding back new ones; and the database stays the queue of record: the rows without their derived
data are found again by the periodic sweeps (maintenance.enrichment_sweep, graph.extract_pending,
maintenance.classify), whatever happened to the messages. Without the shared cache every request
publishes (still one run per stage and bucket at a time, thanks to the lock).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

from django.core.cache import caches

from engram_site.locks import LockHeld, advisory_lock

logger = logging.getLogger(__name__)

# A queued run's mark lives this long: a message lost with the broker holds back new ones no longer.
MARK_SECONDS = 300
# A run stops taking batches after this long and queues itself again: other stages and buckets
# get their turn on the worker's processes in between.
BUDGET_SECONDS = 20.0


def _key(stage: str, bucket_id) -> str:
    return f"engram:follow-up:{stage}:{bucket_id}"


def _cache():
    return caches["shared"]


def _mark(stage: str, bucket_id) -> bool:
    """Set the queued mark; False if it was set already. A cache that fails counts as unset."""
    try:
        return bool(_cache().add(_key(stage, bucket_id), 1, MARK_SECONDS))
    except Exception:
        logger.debug("the shared cache is unavailable: publishing %s for %s anyway", stage, bucket_id, exc_info=True)
        return True


def _marked(stage: str, bucket_id) -> bool:
    try:
        return _cache().get(_key(stage, bucket_id)) is not None
    except Exception:
        return False


def _unmark(stage: str, bucket_id) -> None:
    try:
        _cache().delete(_key(stage, bucket_id))
    except Exception:
        logger.debug("could not clear the mark of %s for %s", stage, bucket_id, exc_info=True)


def request(stage: str, bucket_id: uuid.UUID | str, publish: Callable[[], bool]) -> bool:
    """Ask for a run of ``stage`` on ``bucket_id``: ``publish()`` (which queues the task and says
    whether it could) is called only if no run is queued yet. Never raises. Returns whether a
    message was published."""
    try:
        if not _mark(stage, bucket_id):
            return False
        if publish():
            return True
        _unmark(stage, bucket_id)  # not queued (broker down): a later write tries again
    except Exception:
        logger.exception("requesting %s for bucket %s failed", stage, bucket_id)
    return False


def run(
    stage: str,
    bucket_id: uuid.UUID | str,
    *,
    step: Callable[[], tuple[dict, bool]],
    publish: Callable[[], bool],
    budget_seconds: float | None = None,
) -> dict:
    """Run ``stage`` on ``bucket_id``: ``step()`` does one bounded batch of the bucket's pending
    work and returns its counts and whether more may be pending; steps are taken until none is
    or ``budget_seconds`` have passed. Then, if work is left or a write asked for a run meanwhile,
    ``publish()`` queues the next run. Skipped (``{"skipped": ...}``) when another run of the
    stage holds the bucket's lock: that one queues the next run."""
    budget = BUDGET_SECONDS if budget_seconds is None else budget_seconds
    totals: dict = {}
    more = False
    try:
        with advisory_lock(f"follow-up:{stage}:{bucket_id}"):
            # From here on a write's request queues a new message (which this run's end sees).
            _unmark(stage, bucket_id)
            deadline = time.monotonic() + budget
            while True:
                counts, more = step()
                for name, value in counts.items():
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        totals[name] = totals.get(name, 0) + value
                    else:
                        totals[name] = value
                if not more or time.monotonic() >= deadline:
                    break
    except LockHeld:
        return {"stage": stage, "skipped": "another run of this stage holds the bucket"}
    if more or _marked(stage, bucket_id):
        _mark(stage, bucket_id)
        publish()
        totals["requeued"] = 1
    return {"stage": stage, **totals}
