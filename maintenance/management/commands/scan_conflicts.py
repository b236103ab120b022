"""Store pairs of memories that likely contradict each other as open review candidates."""

from maintenance.management.base import BucketJobCommand
from maintenance.services import conflicts


class Command(BucketJobCommand):
    help = (
        "Compare memories of a bucket with their nearest neighbours and the memories its full-text probes find, "
        "using the local conflict detector (maintenance/conflict_detector/), and store the pairs it raises as open "
        "conflict candidates. Incremental: only memories added since the last scan, unless --full."
    )
    job_name = "scan_conflicts"
    lock = True

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--full", action="store_true", help="rescan every memory, not only new ones")

    def job(self, **options):
        return conflicts.conflicts_scan, {"bucket": self.bucket(options), "full": options["full"]}
