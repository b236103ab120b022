"""The job runner: every background job of every app runs and is recorded here.

:func:`run_job` is what tasks and commands call: it keeps two runs of a job apart when asked
(an advisory lock, :mod:`engram_site.locks`), runs the job inside :func:`recorded_run` and
answers a :class:`JobOutcome`. :func:`recorded_run` is the recording alone, around a block: it
stores a :class:`~engram_site.models.JobRun` (running → succeeded | failed, counts, progress,
error, host/pid). Runs whose process died are closed as failed by the next job that starts, so
the admin never shows a crashed run as still busy.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import DatabaseError, connection
from django.utils import timezone

from engram_site import metrics
from engram_site.locks import LockHeld, advisory_lock
from engram_site.models import JobRun, JobStatus, JobTrigger
from engram_site.progress import ProgressBar

logger = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 2.0
# A running job that has not written progress for this long is presumed dead.
STALE_AFTER = timedelta(hours=2)
ERROR_LIMIT = 8000

HOST = socket.gethostname()


class JobFailed(RuntimeError):
    """A job finished but could not do its work (e.g. the embedding model is down)."""


class JobRecorder:
    """What a running job reports: a total, progress, counts, and a failure reason.

    Progress goes to the JobRun row (throttled) and, for commands, to a progress bar.
    """

    def __init__(self, run: JobRun | None, bar: ProgressBar | None = None):
        self.run = run
        self.bar = bar
        self.counts: dict = {}
        self.total: int | None = None
        self.done = 0
        self.failure: str | None = None
        self._worked = False
        self._last_beat = 0.0

    def set_total(self, total: int | None) -> None:
        self.total = total
        if self.bar:
            self.bar.set_total(total)
        self._beat(force=True)

    def advance(self, step: int = 1) -> None:
        self.done += step
        if self.bar:
            self.bar.update(self.done)
        self._beat()

    def add(self, **counts: int) -> None:
        """Add to counters; any non-zero one means the run did some work."""
        for name, value in counts.items():
            self.counts[name] = self.counts.get(name, 0) + value
            self._worked = self._worked or bool(value)

    def set(self, **values) -> None:
        """Record values (settings used, per-index results) without counting them as work."""
        self.counts.update(values)

    def fail(self, reason: str) -> None:
        """Mark the run failed without raising (the job did what it could)."""
        self.failure = reason

    @property
    def did_work(self) -> bool:
        return self.done > 0 or self._worked

    @property
    def progress(self) -> float | None:
        if not self.total:
            return None
        return min(self.done / self.total, 1.0)

    def _beat(self, *, force: bool = False) -> None:
        if self.run is None or connection.in_atomic_block:
            return
        now = time.monotonic()
        if not force and now - self._last_beat < HEARTBEAT_SECONDS:
            return
        self._last_beat = now
        try:
            JobRun.objects.filter(pk=self.run.pk).update(
                heartbeat_at=timezone.now(), progress=self.progress, counts=self.counts
            )
        except DatabaseError:
            logger.warning("could not record progress of %s", self.run.name, exc_info=True)


def reap_stale_runs() -> int:
    """Close runs whose process is gone (same host, pid dead) or whose heartbeat stopped."""
    import psutil

    now = timezone.now()
    reaped = 0
    for run in JobRun.objects.filter(status=JobStatus.RUNNING):
        last_sign = run.heartbeat_at or run.started_at
        dead_here = (
            run.host == HOST and run.pid is not None and run.pid != os.getpid() and not psutil.pid_exists(run.pid)
        )
        if dead_here or now - last_sign > STALE_AFTER:
            why = f"process {run.pid} on {run.host} is gone" if dead_here else f"no progress since {last_sign:%c}"
            reaped += JobRun.objects.filter(pk=run.pk, status=JobStatus.RUNNING).update(
                status=JobStatus.FAILED, finished_at=now, error=f"abandoned: {why} (killed or crashed)"
            )
    return reaped


@contextlib.contextmanager
def recorded_run(
    name: str, *, trigger: str = JobTrigger.TASK, keep_idle: bool = True, bar: ProgressBar | None = None
) -> Iterator[JobRecorder]:
    """Record one run of ``name`` around the block.

    An exception marks the run failed (with its traceback) and propagates;
    ``recorder.fail(reason)`` marks it failed without raising. With
    ``keep_idle=False`` a successful run that did nothing is not kept (the
    every-minute sweep would otherwise write 1,440 empty rows a day).
    """
    try:
        reap_stale_runs()
    except DatabaseError:
        logger.warning("could not reap stale job runs", exc_info=True)
    now = timezone.now()
    run = JobRun.objects.create(
        name=name, trigger=trigger, status=JobStatus.RUNNING, started_at=now, heartbeat_at=now, host=HOST,
        pid=os.getpid(),
    )  # fmt: skip
    recorder = JobRecorder(run, bar)
    try:
        yield recorder
    except BaseException as exc:
        run.status = JobStatus.FAILED
        run.error = "".join(traceback.format_exception(exc))[-ERROR_LIMIT:]
        metrics.JOB_RUNS.labels(job=name, status=run.status).inc()
        _close(run, recorder)
        if bar:
            bar.close(note="FAILED")
        raise
    if recorder.failure:
        run.status = JobStatus.FAILED
        run.error = recorder.failure[-ERROR_LIMIT:]
    else:
        run.status = JobStatus.SUCCEEDED
    if bar:
        bar.close(note="FAILED" if recorder.failure else "")
    metrics.JOB_RUNS.labels(job=name, status=run.status).inc()
    if not keep_idle and run.status == JobStatus.SUCCEEDED and not recorder.did_work:
        JobRun.objects.filter(pk=run.pk).delete()
        return
    _close(run, recorder)


def _close(run: JobRun, recorder: JobRecorder) -> None:
    run.finished_at = timezone.now()
    run.heartbeat_at = run.finished_at
    run.counts = recorder.counts
    run.progress = 1.0 if run.status == JobStatus.SUCCEEDED and recorder.total else recorder.progress
    try:
        run.save(update_fields=["status", "error", "finished_at", "heartbeat_at", "counts", "progress"])
    except DatabaseError:
        logger.exception("could not record the end of job run %s (%s)", run.pk, run.name)


def job_runs_prune(*, older_than: timedelta) -> int:
    """Delete finished job runs that started before ``now - older_than``."""
    deleted, _ = (
        JobRun.objects.filter(started_at__lt=timezone.now() - older_than).exclude(status=JobStatus.RUNNING).delete()
    )
    return deleted


@dataclass
class JobOutcome:
    name: str
    status: str  # succeeded | failed | skipped (another run holds the lock)
    run_id: int | None = None
    counts: dict = field(default_factory=dict)
    error: str = ""

    def as_dict(self) -> dict:
        return {
            "job": self.name,
            "status": self.status,
            "run_id": self.run_id,
            "counts": self.counts,
            "error": self.error,
        }


def run_job(
    name: str,
    fn,
    *,
    trigger: str = JobTrigger.TASK,
    lock: bool = False,
    keep_idle: bool = True,
    bar: ProgressBar | None = None,
    **kwargs,
) -> JobOutcome:
    """Run ``fn(recorder=..., **kwargs)`` as a recorded job named ``name``.

    ``lock=True`` keeps two runs of the job apart with an advisory lock: a run
    that finds the lock held is skipped (nothing recorded). An exception from
    ``fn`` is recorded and propagates; ``recorder.fail()`` is recorded and
    returned as a failed outcome.
    """
    guard = advisory_lock(name) if lock else contextlib.nullcontext()
    try:
        guard.__enter__()
    except LockHeld as exc:
        logger.info("%s", exc)
        metrics.JOB_RUNS.labels(job=name, status="skipped").inc()
        return JobOutcome(name=name, status="skipped", error=str(exc))
    try:
        with recorded_run(name, trigger=trigger, keep_idle=keep_idle, bar=bar) as recorder:
            fn(recorder=recorder, **kwargs)
    finally:
        guard.__exit__(None, None, None)
    run = recorder.run
    kept = JobRun.objects.filter(pk=run.pk).exists()
    return JobOutcome(
        name=name, status=run.status, run_id=run.pk if kept else None, counts=recorder.counts, error=run.error
    )
