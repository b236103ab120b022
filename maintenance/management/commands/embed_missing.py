"""Fill missing embeddings and context vectors (batched, resumable, safe to run concurrently)."""

from maintenance.management.base import BucketJobCommand
from maintenance.services import enrichment


class Command(BucketJobCommand):
    help = (
        "Embed memories whose embedding or context vector is NULL (the model was down, or a backfill after "
        "a model change). Batched, resumable, safe to run concurrently."
    )
    job_name = "embed_missing"

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--batch-size", type=int, default=None, help="rows per transaction")

    def job(self, **options):
        return enrichment.missing_fill, {
            "kind": "embeddings",
            "bucket": self.bucket(options),
            "batch_size": options["batch_size"],
        }
