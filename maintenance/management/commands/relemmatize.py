"""Make every stored lexical document again with the current lemmatizer (batched, resumable)."""

from maintenance.management.base import BucketJobCommand
from maintenance.services.relemmatize import relemmatize


class Command(BucketJobCommand):
    help = (
        "Lemmatise every memory again with the current lemmatizer and rewrite the lexical documents that changed "
        "(after an upgrade that changed the lemmatizer: docs/OPERATIONS.md). Batched, resumable, safe to run "
        "while Engram serves."
    )
    job_name = "relemmatize"
    lock = True

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--batch-size", type=int, default=None, help="rows per transaction (default 500)")

    def job(self, **options):
        return relemmatize, {"bucket": self.bucket(options), "batch_size": options["batch_size"]}
