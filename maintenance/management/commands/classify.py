"""Classify scope (specific | general) and topic of memories that have none."""

from maintenance.classifier import get_classifier
from maintenance.management.base import BucketJobCommand
from maintenance.services import classification


class Command(BucketJobCommand):
    help = (
        "Set classified_scope and classified_topic where missing, with the local classifier (default) or the "
        "LLM one (ENGRAM_CLASSIFIER=llm or --classifier llm). Tenants with classification_enabled=false are skipped."
    )
    job_name = "classify"
    lock = True

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--classifier", choices=["local", "llm"], help="default: ENGRAM_CLASSIFIER")
        parser.add_argument("--force", action="store_true", help="also relabel memories a classifier labelled before")
        parser.add_argument("--batch-size", type=int, default=64)

    def job(self, **options):
        return classification.memories_classify, {
            "bucket": self.bucket(options),
            "force": options["force"],
            "batch_size": options["batch_size"],
            "classifier": get_classifier(options["classifier"]),
        }
