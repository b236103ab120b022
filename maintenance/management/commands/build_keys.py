"""Build the key documents that are missing or out of date (batched, resumable)."""

from maintenance.management.base import BucketJobCommand
from maintenance.services import enrichment


class Command(BucketJobCommand):
    help = (
        "Build memories' key documents that are missing or out of date: the backfill of memories written "
        "before keys existed, or after the key recipe changed. Batched, resumable; memories the graph has not "
        "extracted yet are left to it (it builds their keys when it has) unless --no-wait."
    )
    job_name = "build_keys"
    lock = True

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument(
            "--no-wait", action="store_true", help="build keys also of memories the graph has not extracted yet"
        )

    def job(self, **options):
        return enrichment.keys_build, {"bucket": self.bucket(options), "wait": not options["no_wait"]}
