"""Delete for good what is past its retention window (what the hourly schedule runs)."""

from engram_site.jobs.command import JobCommand
from memories.services.lifecycle import memories_purge


class Command(JobCommand):
    help = (
        "Delete for good the memories deleted, or expired, longer ago than their bucket's retention_days, "
        "with their history. Batched, resumable, safe to run concurrently."
    )
    job_name = "purge_memories"

    def job(self, **options):
        return memories_purge, {}
