"""Inspect or stop the embedded PostgreSQL server (only when DATABASE_URL is unset)."""

import json

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from engram_site import embedded_pg


class Command(BaseCommand):
    help = "status | url | stop — the embedded PostgreSQL in $ENGRAM_HOME/pgdata"

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["status", "url", "stop"])

    def handle(self, *args, action, **options):
        if not settings.EMBEDDED_DATABASE:
            raise CommandError("DATABASE_URL is set: Engram is not using its embedded PostgreSQL.")
        if action == "status":
            self.stdout.write(json.dumps(embedded_pg.status(settings.ENGRAM_HOME), indent=2))
        elif action == "url":
            # Starts the server when it is not running, like any connection would.
            self.stdout.write(embedded_pg.join(settings.ENGRAM_HOME).url())
        else:
            stopped = embedded_pg.stop(settings.ENGRAM_HOME)
            self.stdout.write("stopped" if stopped else "not running")
