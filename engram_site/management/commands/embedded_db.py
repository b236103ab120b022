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
        if settings.EMBEDDED_DATABASE is None:
            raise CommandError("DATABASE_URL is set: Engram is not using its embedded PostgreSQL.")
        if action == "status":
            self.stdout.write(json.dumps(embedded_pg.status(settings.ENGRAM_HOME), indent=2))
        elif action == "url":
            self.stdout.write(settings.EMBEDDED_DATABASE.url())
        else:
            # This process is itself a holder (settings started or joined the server).
            stopped = embedded_pg.stop(settings.ENGRAM_HOME)
            self.stdout.write("stopped" if stopped else "not running")
