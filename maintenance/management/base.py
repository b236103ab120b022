"""The maintenance commands that can be limited to one bucket (``--bucket``)."""

from __future__ import annotations

import uuid

from django.core.management.base import CommandError

from engram_site.jobs.command import JobCommand
from engram_site.scoping import scopes_disabled
from tenants.models import Bucket


class BucketJobCommand(JobCommand):
    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--bucket", help="only this bucket (id)")

    def bucket(self, options) -> Bucket | None:
        value = options.get("bucket")
        if not value:
            return None
        try:
            # Cross-tenant: the operator names a bucket by id, whoever's it is.
            with scopes_disabled():
                return Bucket.objects.select_related("tenant").get(pk=uuid.UUID(value))
        except (ValueError, Bucket.DoesNotExist):
            raise CommandError(f"no bucket with id {value!r}") from None
