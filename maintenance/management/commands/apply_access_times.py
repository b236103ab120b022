"""Copy pending access times into memories.last_accessed_at (what the five-minute schedule runs)."""

from engram_site.jobs.command import JobCommand
from memories.services.access import apply_pending


class Command(JobCommand):
    help = (
        "Copy the times searches returned memories (memory_access) into memories.last_accessed_at, "
        "batched, at most once per ENGRAM_ACCESS_RESOLUTION per memory. Resumable, safe to run concurrently."
    )
    job_name = "apply_access_times"

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--batch-size", type=int, default=1000, help="rows per transaction")

    def job(self, **options):
        return apply_pending, {"batch_size": options["batch_size"]}
