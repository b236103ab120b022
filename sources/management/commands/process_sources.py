"""Process unfinished sources now (documents and conversations waiting for distillation)."""

from django.core.management.base import CommandError

from engram_site.jobs.command import JobCommand
from sources.models import Source
from sources.services.process import source_process
from sources.services.sweep import sources_sweep
from tenants.selectors import parse_uuid


class Command(JobCommand):
    help = (
        "Distil pending, stalled and failed sources into memories, in this process (what the sources sweep does "
        "every minute, without its grace period and back-off). --source processes one source, whatever its state."
    )
    job_name = "process_sources"
    lock = True

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--source", help="only this source (id); also retries a source that failed too often")
        parser.add_argument("--budget", type=float, default=3600.0, help="seconds before pausing (default 3600)")

    def job(self, **options):
        if options.get("source"):
            source_id = parse_uuid(options["source"])
            if source_id is None or not Source.objects.filter(pk=source_id).exists():
                raise CommandError(f"no source with id {options['source']!r}")

            def one(*, recorder):
                report = source_process(source_id=source_id)
                recorder.add(chunks=report.chunks, created=report.created)
                if report.status == "failed":
                    recorder.fail(report.error)

            return one, {}
        return sources_sweep, {"budget_seconds": options["budget"], "grace": False}
