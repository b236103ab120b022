"""python manage.py erase --tenant T --agent-id X [--run-id R] [--attributed-to user|assistant]
[--source-actor-id S] [--bucket B] (--dry-run | --yes)

Erases every memory of a tenant matching all the given fields, with everything kept about them
(memories.services.erasure), as POST /api/v1/erasure does. It cannot be undone: without --yes
only --dry-run runs, which counts and changes nothing.
"""

from django.core.management.base import BaseCommand, CommandError

from audit.services import Actor
from engram_site import scoping
from memories.models import Attribution
from memories.services import memories_erase
from tenants.models import Bucket, Tenant
from tenants.selectors import parse_uuid


class Command(BaseCommand):
    help = "Erase every memory of a tenant matching the given identifiers, with all that is kept about them."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True, help="tenant id, slug or name")
        parser.add_argument("--agent-id")
        parser.add_argument("--run-id")
        parser.add_argument("--attributed-to", choices=Attribution.values)
        parser.add_argument("--source-actor-id")
        parser.add_argument("--bucket", help="only this bucket (id or name; default: every bucket)")
        parser.add_argument("--dry-run", action="store_true", help="count what would be erased; change nothing")
        parser.add_argument("--yes", action="store_true", help="erase (it cannot be undone)")

    def handle(self, *args, tenant, bucket, dry_run, yes, **options):
        fields = {
            name: options[name]
            for name in ("agent_id", "run_id", "attributed_to", "source_actor_id")
            if options[name] is not None
        }
        if not fields:
            raise CommandError("Give at least one of --agent-id, --run-id, --attributed-to, --source-actor-id.")
        if not (dry_run or yes):
            raise CommandError("Erasing cannot be undone: add --yes to erase, or --dry-run to count first.")
        owner = _tenant(tenant)
        with scoping.scope(tenant=owner.pk):
            where = _bucket(owner, bucket) if bucket else None
            report = memories_erase(
                tenant=owner, fields=fields, bucket=where, dry_run=dry_run, actor=Actor.system("manage.py erase")
            )
        scope = f"bucket {where.name}" if where else "every bucket"
        verb = "Would erase" if dry_run else "Erased"
        self.stdout.write(f"{verb}, in tenant {owner.name} ({scope}):")
        for name, count in report.counts().items():
            self.stdout.write(f"  {name}: {count}")


def _tenant(value: str) -> Tenant:
    pk = parse_uuid(value)
    found = Tenant.objects.filter(pk=pk).first() if pk else None
    found = found or Tenant.objects.filter(slug=value).first()
    if found is None:
        named = list(Tenant.objects.filter(name=value)[:2])
        if len(named) > 1:
            raise CommandError(f"Several tenants are named {value!r}: give the id or the slug.")
        found = named[0] if named else None
    if found is None:
        raise CommandError(f"No tenant with the id, slug or name {value!r}.")
    return found


def _bucket(tenant: Tenant, value: str) -> Bucket:
    pk = parse_uuid(value)
    buckets = Bucket.objects.for_tenant(tenant)
    found = (buckets.filter(pk=pk).first() if pk else None) or buckets.named(value).first()
    if found is None:
        raise CommandError(f"Tenant {tenant.name} has no bucket with the id or name {value!r}.")
    return found
