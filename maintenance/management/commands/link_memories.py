"""Record refines / cites links between memories; run the graph's supersession pass."""

from maintenance.management.base import BucketJobCommand
from maintenance.services import links


class Command(BucketJobCommand):
    help = (
        "Record refines / cites links into linked_memory_ids (kinds in metadata.links) for memories added since "
        "the last pass (--full: all), then run the graph app's supersession pass on the buckets that changed."
    )
    job_name = "link_memories"
    lock = True

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--full", action="store_true", help="revisit every memory, not only new ones")

    def job(self, **options):
        return links.links_pass, {"bucket": self.bucket(options), "full": options["full"]}
