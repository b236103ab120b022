"""python manage.py create_tenant NAME [--token-name N] [--scopes read,write] [--bucket B]
    [--agents a,b [--include-shared]]

Creates a tenant and an API token. The token is printed as the last line of
output, alone, so scripts can capture it with ``| tail -n 1``.
"""

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from audit.services import Actor
from engram_site.exceptions import DomainError
from engram_site.scoping import scope
from tenants import services


class Command(BaseCommand):
    help = "Create a tenant and an API token; the token is the last line of output."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--token-name", default="default")
        parser.add_argument("--scopes", default="read,write", help="comma-separated: read, write, admin")
        parser.add_argument("--bucket", help="also create a bucket with this name")
        parser.add_argument("--agents", help="comma-separated agent ids: hold the token to these agents' memories")
        parser.add_argument(
            "--include-shared", action="store_true", help="with --agents: also read memories without an agent"
        )

    def handle(self, *args, name, token_name, scopes, bucket, agents=None, include_shared=False, **options):
        try:
            with transaction.atomic():
                actor = Actor.system("manage.py create_tenant")
                tenant = services.tenant_create(name=name, first_bucket=bucket or None, actor=actor)
                with scope(tenant=tenant.pk):
                    created_bucket = tenant.buckets.get() if bucket else None
                    issued = services.token_issue(
                        tenant=tenant, name=token_name, scopes=services.parse_scopes(scopes), actor=actor,
                        agent_ids=agents, include_shared=include_shared,
                    )  # fmt: skip
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"Tenant: {tenant.name} (slug {tenant.slug}, id {tenant.pk})")
        if created_bucket:
            self.stdout.write(f"Bucket: {created_bucket.name} (id {created_bucket.pk})")
        self.stdout.write(f"Token '{issued.token.name}' with scopes {','.join(issued.token.scopes)}.")
        if issued.token.agent_ids:
            shared = ", and shared memories (read-only)" if issued.token.include_shared else ""
            self.stdout.write(f"Held to agents {','.join(issued.token.agent_ids)}{shared}.")
        self.stdout.write("The token is shown once; store it now:")
        self.stdout.write(issued.secret)
