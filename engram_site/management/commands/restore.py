"""Restore a backup written by ``backup`` into the configured database: ``restore PATH``."""

from __future__ import annotations

import time
from pathlib import Path

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from engram_site import pgtools


def _table_count() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'")
        return cursor.fetchone()[0]


class Command(BaseCommand):
    help = (
        "Restore PATH (a backup from `backup`) into the database (embedded or DATABASE_URL), then "
        "apply this release's migrations. Stop Engram's web, worker and beat processes first."
    )

    def add_arguments(self, parser):
        parser.add_argument("path", help="a file written by `./engram manage backup`")
        parser.add_argument(
            "--replace",
            action="store_true",
            help="drop everything in the database's public schema first (required when it is not empty)",
        )
        parser.add_argument("--yes", action="store_true", help="do not ask before --replace drops the data")
        parser.add_argument("--no-migrate", action="store_true", help="leave the restored schema as it was backed up")

    def handle(self, *args, path, replace, yes, no_migrate, **options):
        source = Path(path).expanduser().resolve()
        if not source.is_file():
            raise CommandError(f"{source} is not a file")
        restore = pgtools.program("pg_restore")
        env = pgtools.connection_env()
        try:
            # Reads the archive's table of contents: refuses a file that is not a custom-format dump
            # before anything in the database is touched.
            pgtools.run([restore, "--list", str(source)], env=env)
        except pgtools.ToolError as exc:
            raise CommandError(f"{source} is not a backup pg_restore can read: {exc}") from exc

        tables = _table_count()
        if tables and not replace:
            raise CommandError(
                f"the database already holds {tables} tables; restore into an empty one, or pass --replace "
                "to drop them first"
            )
        if tables and replace:
            if not yes and input(f"Drop all {tables} tables in the database and restore {source}? [y/N] ") != "y":
                raise CommandError("cancelled; nothing changed")
            with connection.cursor() as cursor:
                # The extension lives in public too; the dump creates it again.
                cursor.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
        connection.close()

        started = time.monotonic()
        try:
            # One transaction: a restore that fails partway leaves the database as it was.
            pgtools.run(
                [restore, "--no-owner", "--no-privileges", "--exit-on-error", "--single-transaction",
                 f"--dbname={env['PGDATABASE']}", str(source)],
                env=env,
            )  # fmt: skip
        except pgtools.ToolError as exc:
            raise CommandError(str(exc)) from exc
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")  # a dump carries no planner statistics
        self.stdout.write(f"restored {source} in {time.monotonic() - started:.1f} s")
        if not no_migrate:
            call_command("migrate", interactive=False, verbosity=0)
            self.stdout.write("migrations applied")
