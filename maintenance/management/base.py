"""The shared shape of the maintenance commands: a progress bar on stderr, a
recorded JobRun, a one-line JSON summary on stdout, and a non-zero exit when the
job failed or another run of it holds the lock."""

from __future__ import annotations

import json
import uuid

from django.core.management.base import BaseCommand, CommandError

from engram_site.progress import ProgressBar
from maintenance.jobs import JobTrigger, run_job
from tenants.models import Bucket


class JobCommand(BaseCommand):
    job_name: str = ""
    lock = False
    bucket_option = True

    def add_arguments(self, parser):
        parser.add_argument("--no-progress", action="store_true", help="do not draw the progress bar on stderr")
        if self.bucket_option:
            parser.add_argument("--bucket", help="only this bucket (id)")

    def job(self, **options):
        """Return (service function, keyword arguments)."""
        raise NotImplementedError

    def bucket(self, options) -> Bucket | None:
        value = options.get("bucket")
        if not value:
            return None
        try:
            return Bucket.objects.select_related("tenant").get(pk=uuid.UUID(value))
        except (ValueError, Bucket.DoesNotExist):
            raise CommandError(f"no bucket with id {value!r}") from None

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
