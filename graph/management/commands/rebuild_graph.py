"""python manage.py rebuild_graph (--bucket ID ... | --tenant ID | --all | --pending)

Rebuilds knowledge graphs from the memories table (idempotent), or with
--pending extracts only memories the graph has not processed yet.
"""

import sys

from django.core.management.base import BaseCommand, CommandError

from engram_site.scoping import scopes_disabled
from graph.services import extraction
from tenants.models import Bucket, Tenant
from tenants.selectors import parse_uuid


class Command(BaseCommand):
    help = "Rebuild the knowledge graph of buckets from their memories."

    def add_arguments(self, parser):
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--bucket", action="append", help="bucket id (repeatable)")
        target.add_argument("--tenant", help="tenant id or slug")
        target.add_argument("--all", action="store_true", help="every bucket of every tenant")
        target.add_argument("--pending", action="store_true", help="only memories not yet extracted")

    @scopes_disabled()  # cross-tenant: an operator's rebuild of the buckets named, or of all
    def handle(self, *args, bucket, tenant, all, pending, **options):
        if pending:
            total = 0
            while True:
                report = extraction.graph_extract_pending(limit=500)
                if report.skipped:
                    raise CommandError(report.skipped)
                if not report.memories:
                    break
                total += report.memories
                sys.stderr.write(f"\r  extracted {total} memories")
            sys.stderr.write("\n")
            self.stdout.write(f"Extracted {total} pending memories.")
            return
        if bucket:
            buckets = list(Bucket.objects.filter(pk__in=bucket).select_related("tenant"))
            if len(buckets) != len(set(bucket)):
                raise CommandError("Unknown bucket id.")
        elif tenant:
            owner = Tenant.objects.filter(slug=tenant).first() or Tenant.objects.filter(pk=_uuid(tenant)).first()
            if owner is None:
                raise CommandError("Unknown tenant.")
            buckets = list(owner.buckets.select_related("tenant"))
        else:
            buckets = list(Bucket.objects.select_related("tenant").order_by("tenant__name", "name"))
        for index, item in enumerate(buckets, start=1):
            sys.stderr.write(f"[{index}/{len(buckets)}] {item.tenant.name} / {item.name} … ")
            report = extraction.graph_rebuild(bucket=item)
            if report.skipped:
                raise CommandError(report.skipped)
            sys.stderr.write(
                f"{report.memories} memories, {report.entities} entities, {report.edges} edges, "
                f"{report.superseded} superseded\n"
            )
        self.stdout.write(f"Rebuilt {len(buckets)} bucket graph(s).")


def _uuid(value):
    return parse_uuid(value)
