"""REINDEX CONCURRENTLY the HNSW indexes (never two at once: advisory lock)."""

from engram_site.jobs.command import JobCommand
from maintenance.services import reindex


class Command(JobCommand):
    help = (
        "Rebuild the HNSW vector indexes with REINDEX INDEX CONCURRENTLY (reads and writes keep working). "
        "Records duration and index size before/after in a job run."
    )
    job_name = "reindex_hnsw"
    lock = True

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument(
            "--index",
            action="append",
            choices=reindex.HNSW_INDEXES,
            help="only this index (repeatable; default: all HNSW indexes)",
        )

    def job(self, **options):
        return reindex.hnsw_reindex, {"indexes": options["index"] or reindex.HNSW_INDEXES}
