"""Fill missing lemmas (batched, resumable, safe to run concurrently)."""

from maintenance.management.base import BucketJobCommand
from maintenance.services import enrichment


class Command(BucketJobCommand):
    help = (
        "Lemmatize memories whose text_lemmatized or context lemmas are NULL (the lemmatizer was down, or a "
        "backfill after a lemmatizer change). Batched, resumable, safe to run concurrently."
    )
    job_name = "lemmatize_missing"

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--batch-size", type=int, default=None, help="rows per transaction")

    def job(self, **options):
        return enrichment.missing_fill, {
            "kind": "lemmas",
            "bucket": self.bucket(options),
            "batch_size": options["batch_size"],
        }
