"""The shared shape of a job's management command (every app's): a progress bar on stderr, a
recorded JobRun, a one-line JSON summary on stdout, and a non-zero exit when the
job failed or another run of it holds the lock."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from engram_site.jobs.runner import run_job
from engram_site.models import JobTrigger
from engram_site.progress import ProgressBar
from engram_site.scoping import scopes_disabled


class JobCommand(BaseCommand):
    job_name: str = ""
    lock = False

    def add_arguments(self, parser):
        parser.add_argument("--no-progress", action="store_true", help="do not draw the progress bar on stderr")

    def job(self, **options):
        """Return (service function, keyword arguments)."""
        raise NotImplementedError

    @scopes_disabled()  # cross-tenant: an operator's job over every bucket (or the one it names)
    def handle(self, *args, **options):
        fn, kwargs = self.job(**options)
        bar = None if options["no_progress"] else ProgressBar(self.job_name, stream=self.stderr._out)
        try:
            outcome = run_job(self.job_name, fn, trigger=JobTrigger.COMMAND, lock=self.lock, bar=bar, **kwargs)
        except Exception as exc:
            raise CommandError(f"{self.job_name} failed (recorded as a failed job run): {exc}") from exc
        if outcome.status == "skipped":
            raise CommandError(outcome.error)
        self.stdout.write(json.dumps(outcome.as_dict(), default=str))
        if outcome.status == "failed":
            raise CommandError(f"{self.job_name} failed: {outcome.error}")
