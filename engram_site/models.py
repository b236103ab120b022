"""The platform's own table: job runs, written by the job runner (engram_site/jobs/runner.py)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class JobStatus(models.TextChoices):
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"


class JobTrigger(models.TextChoices):
    TASK = "task", "task (worker)"
    COMMAND = "command", "management command"


class JobRun(models.Model):
    """One run of a background job, from a worker task or a management command.

    A run is created ``running`` when it starts and closed ``succeeded`` or
    ``failed`` (with the error) when it ends. A run whose process died is closed
    as failed by the next job that starts (see ``engram_site.jobs.runner``), so a crash
    is visible rather than a run that looks busy forever.
    """

    name = models.CharField(max_length=100)
    trigger = models.CharField(max_length=20, choices=JobTrigger.choices, default=JobTrigger.TASK)
    status = models.CharField(max_length=20, choices=JobStatus.choices, default=JobStatus.RUNNING)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    # Written with progress; a running job whose heartbeat stops is presumed dead.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # Fraction done, 0..1, when the job knows its total up front.
    progress = models.FloatField(null=True, blank=True)
    counts = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True, default="")
    host = models.CharField(max_length=255, blank=True, default="")
    pid = models.IntegerField(null=True, blank=True)

    class Meta:
        db_table = "maintenance_job_runs"
        ordering = ["-started_at"]
        indexes = [
            # The admin list and "last runs of a job": ORDER BY started_at DESC, filtered by name.
            models.Index(fields=["name", "-started_at"], name="jobruns_name_started"),
            models.Index(fields=["-started_at"], name="jobruns_started"),
            # Reaping runs whose process died: WHERE status = 'running'.
            models.Index(fields=["started_at"], name="jobruns_running", condition=Q(status="running")),
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.started_at:%Y-%m-%d %H:%M:%S} {self.status}"

    @property
    def duration_seconds(self) -> float | None:
        if self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()
