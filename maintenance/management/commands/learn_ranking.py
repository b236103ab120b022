"""Learn buckets' fusion weights from their feedback (what the nightly schedule runs), or reset
what a bucket learned (memories.services.ranking_learning; docs/RETRIEVAL.md, "Learned weights")."""

import json

from django.core.management.base import CommandError

from audit.services import Actor
from engram_site.jobs.command import JobCommand
from engram_site.scoping import scopes_disabled
from memories.services import ranking_learning
from tenants.models import Bucket


class Command(JobCommand):
    help = (
        "Learn the fusion weights of the buckets with enough ratings whose ratings changed since they were "
        "last learned (--bucket: those buckets, changed or not); adopted only where they beat the defaults "
        "on held-back ratings. --reset forgets what the --bucket buckets learned (defaults until their ratings "
        "change)."
    )
    job_name = "learn_ranking"
    lock = True

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--bucket", action="append", default=[], metavar="ID", help="a bucket id (repeatable)")
        parser.add_argument("--min-ratings", type=int, help="default ENGRAM_LEARN_MIN_RATINGS")
        parser.add_argument("--reset", action="store_true", help="forget what the --bucket buckets learned")

    def _buckets(self, ids: list[str]) -> list[Bucket]:
        found = {str(b.pk): b for b in Bucket.objects.filter(pk__in=ids).select_related("tenant")}
        missing = [i for i in ids if i not in found]
        if missing:
            raise CommandError(f"no such bucket: {', '.join(missing)}")
        return [found[i] for i in ids]

    def handle(self, *args, **options):
        if options["reset"]:
            if not options["bucket"]:
                raise CommandError("--reset needs --bucket")
            with scopes_disabled():
                buckets = self._buckets(options["bucket"])
                deleted = ranking_learning.ranking_learned_reset(buckets=buckets, actor=Actor.system("learn_ranking"))
            self.stdout.write(json.dumps({"job": "learn_ranking", "reset": deleted}))
            return
        super().handle(*args, **options)

    def job(self, **options):
        kwargs = {}
        if options["bucket"]:
            kwargs["buckets"] = self._buckets(options["bucket"])
        if options["min_ratings"] is not None:
            kwargs["min_ratings"] = options["min_ratings"]
        return ranking_learning.ranking_learn_all, kwargs
