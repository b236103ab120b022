"""Write a backup of the whole database (every tenant) to one file: ``backup PATH``."""

from __future__ import annotations

import os
import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from engram_site import pgtools


class Command(BaseCommand):
    help = (
        "Dump the database (embedded or DATABASE_URL) to PATH in pg_dump's custom format. "
        "Runs while Engram serves: the dump is one consistent snapshot."
    )

    def add_arguments(self, parser):
        parser.add_argument("path", help="the file to write (refused if it exists, unless --overwrite)")
        parser.add_argument("--overwrite", action="store_true", help="replace an existing file at PATH")

    def handle(self, *args, path, overwrite, **options):
        target = Path(path).expanduser().resolve()
        if target.exists() and not overwrite:
            raise CommandError(f"{target} exists; pass --overwrite to replace it")
        if not target.parent.is_dir():
            raise CommandError(f"{target.parent} is not a directory")
        # Written beside the target and renamed into place: a dump that fails halfway never
        # leaves a file that looks like a backup.
        partial = target.with_name(target.name + ".partial")
        started = time.monotonic()
        try:
            pgtools.run(
                [
                    pgtools.program("pg_dump"),
                    "--format=custom",
                    "--no-owner",
                    "--no-privileges",
                    f"--file={partial}",
                ],
                env=pgtools.connection_env(),
            )
            os.replace(partial, target)
        except pgtools.ToolError as exc:
            partial.unlink(missing_ok=True)
            raise CommandError(str(exc)) from exc
        size_mb = target.stat().st_size / 1e6
        self.stdout.write(f"backup written to {target} ({size_mb:.1f} MB in {time.monotonic() - started:.1f} s)")
