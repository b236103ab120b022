"""Switch a bucket to another embedding model: re-embed its memories while searches go on
with the old vectors, then swap them in at once (memories.services.embedding_switch)."""

from __future__ import annotations

import json

from django.core.management.base import CommandError

from engram_site.exceptions import DomainError
from engram_site.jobs.runner import run_job
from engram_site.locks import LockHeld
from engram_site.models import JobTrigger
from engram_site.progress import ProgressBar
from engram_site.providers import embedding
from engram_site.scoping import scopes_disabled
from maintenance import tasks
from maintenance.management.base import BucketJobCommand
from maintenance.services.embedding_switch import embedding_switch
from memories.services.embedding_switch import embedding_switch_start, embedding_switch_status


class Command(BucketJobCommand):
    help = (
        "Switch a bucket to another embedding model (--model), or show (--status) or cancel (--cancel) the switch "
        "in progress. The memories are re-embedded in batches while searches answer from the old vectors; the "
        "swap to the new ones is one transaction. Resumable: run it again after an interruption. "
        f"Models: {', '.join(sorted(embedding.MODELS))}."
    )
    job_name = "switch_embedding_model"

    def add_arguments(self, parser):
        super().add_arguments(parser)
        action = parser.add_mutually_exclusive_group()
        action.add_argument("--model", help="the model to switch to (or the bucket's own model: cancel)")
        action.add_argument("--status", action="store_true", help="print the switch's progress and change nothing")
        action.add_argument("--cancel", action="store_true", help="cancel the switch in progress")
        action.add_argument("--resume", action="store_true", help="go on with the switch in progress")
        parser.add_argument(
            "--background", action="store_true", help="queue the job for a worker instead of running it here"
        )
        parser.add_argument("--stop-after", type=int, default=None, help="stop after re-embedding this many rows")

    @scopes_disabled()  # cross-tenant: an operator's command on the bucket they name, whoever's
    def handle(self, *args, **options):
        bucket = self.bucket(options)
        if bucket is None:
            raise CommandError("--bucket is required")
        try:
            if options["status"]:
                self.stdout.write(json.dumps(embedding_switch_status(bucket=bucket).as_dict()))
                return
            if options["cancel"]:
                status = embedding_switch_status(bucket=bucket)
                if not status.next_model:
                    raise CommandError("no switch is in progress")
                status = embedding_switch_start(bucket=bucket, model=status.model)
                self.stdout.write(json.dumps(status.as_dict()))
                return
            if options["model"]:
                embedding_switch_start(bucket=bucket, model=options["model"])
            elif not options["resume"]:
                raise CommandError("give --model, --resume, --status or --cancel")
        except DomainError as exc:
            raise CommandError(str(exc)) from None
        if options["background"]:
            tasks.switch_embedding_model.delay(str(bucket.pk))
            self.stdout.write(json.dumps({"queued": True, **embedding_switch_status(bucket=bucket).as_dict()}))
            return
        bar = None if options["no_progress"] else ProgressBar(self.job_name, stream=self.stderr._out)
        try:
            outcome = run_job(
                self.job_name, embedding_switch, trigger=JobTrigger.COMMAND, bar=bar, bucket=bucket,
                stop_after=options["stop_after"],
            )  # fmt: skip
        except LockHeld as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(json.dumps({**outcome.as_dict(), **embedding_switch_status(bucket=bucket).as_dict()}))
        if outcome.status == "failed":
            raise CommandError(f"{self.job_name} failed: {outcome.error}")
