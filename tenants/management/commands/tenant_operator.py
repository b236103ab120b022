"""python manage.py tenant_operator USERNAME --tenant SLUG [--tenant SLUG ...] [--remove]

Makes USERNAME a tenant operator of the given tenants: a staff user (created with a
generated password, printed once, if it does not exist), in the "Tenant operators"
group (the console's permissions), with a membership per tenant. ``--remove`` takes the
tenants away instead. Superusers operate every tenant and need none of this.
"""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from audit.services import Actor
from engram_site.scoping import scopes_disabled
from tenants import services
from tenants.models import OperatorMembership, Tenant


class Command(BaseCommand):
    help = "Let a staff user operate some tenants in the console (or, with --remove, stop)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--tenant", action="append", required=True, help="tenant slug (repeatable)")
        parser.add_argument("--remove", action="store_true", help="remove the memberships instead")

    @scopes_disabled()  # cross-tenant: a user's memberships in any tenants
    def handle(self, *args, username, tenant, remove, **options):
        tenants = list(Tenant.objects.filter(slug__in=tenant))
        missing = sorted(set(tenant) - {t.slug for t in tenants})
        if missing:
            raise CommandError(f"No tenant with the slug(s): {', '.join(missing)}")
        actor = Actor.system("manage.py tenant_operator")
        User = get_user_model()
        password = None
        with transaction.atomic():
            user = User.objects.filter(username=username).first()
            if remove:
                if user is None:
                    raise CommandError(f"No user {username!r}.")
                for membership in OperatorMembership.objects.filter(user=user, tenant__in=tenants).select_related(
                    "tenant", "user"
                ):
                    services.operator_revoke(membership=membership, actor=actor)
            else:
                if user is None:
                    password = secrets.token_urlsafe(18)
                    user = User.objects.create_user(username, password=password, is_staff=True)
                elif not user.is_staff:
                    user.is_staff = True
                    user.save(update_fields=["is_staff"])
                user.groups.add(services.operator_group_ensure())
                for t in tenants:
                    services.operator_grant(user=user, tenant=t, actor=actor)
        slugs = (
            OperatorMembership.objects.filter(user=user).order_by("tenant__slug").values_list("tenant__slug", flat=True)
        )
        names = ", ".join(slugs) or "none"
        if user.is_superuser:
            self.stdout.write(f"{username} is a superuser: they operate every tenant whatever their memberships.")
        self.stdout.write(f"{username} operates: {names}")
        if password:
            self.stdout.write("Password (shown once; change it in the admin):")
            self.stdout.write(password)
