"""REINDEX CONCURRENTLY the HNSW indexes (never two at once: advisory lock)."""

from maintenance import services
from maintenance.management.base import JobCommand


class Command(JobCommand):
    help = (
        "Rebuild the HNSW vector indexes with REINDEX INDEX CONCURRENTLY (reads and writes keep working). "
        "Records duration and index size before/after in a job run."
    )
    job_name = "reindex_hnsw"
    lock = True
    bucket_option = False

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument(
            "--index",
            action="append",
            choices=services.HNSW_INDEXES,
            help="only this index (repeatable; default: all HNSW indexes)",
        )

    def job(self, **options):
        return services.hnsw_reindex, {"indexes": options["index"] or services.HNSW_INDEXES}
