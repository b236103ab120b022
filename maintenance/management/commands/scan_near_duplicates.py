"""Store near-duplicate pairs (cosine above a threshold) as pending review candidates."""

from maintenance.management.base import BucketJobCommand
from maintenance.services import duplicates


class Command(BucketJobCommand):
    help = (
        "Find pairs of memories in a bucket whose embeddings are at least --threshold similar (default "
        "ENGRAM_NEAR_DUPLICATE_THRESHOLD) and store them as pending duplicate candidates. Incremental: only "
        "memories added since the last scan, unless --full."
    )
    job_name = "scan_near_duplicates"
    lock = True

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--threshold", type=float, default=None)
        parser.add_argument("--full", action="store_true", help="rescan every memory, not only new ones")

    def job(self, **options):
        return duplicates.near_duplicates_scan, {
            "bucket": self.bucket(options),
            "full": options["full"],
            "threshold": options["threshold"],
        }
