"""Build the passages of long memories that are missing or out of date (batched, resumable)."""

from maintenance.management.base import BucketJobCommand
from maintenance.services import enrichment


class Command(BucketJobCommand):
    help = (
        "Split memories longer than the embedding model's window into passages and embed them, where their "
        "passages are missing or out of date: the backfill of memories written before passages existed, or after "
        "the splitter or the bucket's model changed. Batched, each batch committed, resumable."
    )
    job_name = "build_passages"
    lock = True

    def job(self, **options):
        return enrichment.passages_build, {"bucket": self.bucket(options)}
