"""./engram manage import_bucket BUCKET_ID FILE [--skip-invalid]

JSON Lines into a bucket, as POST /api/v1/buckets/{id}/import takes them (docs/API.md), from a
file of any size ("-": standard input, copied to a temporary file first). Prints the counts as
JSON; an invalid line stops the import before anything is written, unless --skip-invalid.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile

from django.core.management.base import BaseCommand, CommandError

from audit.services import Actor
from engram_site.progress import ProgressBar
from engram_site.scoping import scope
from memories.management.commands.export_bucket import bucket_by_id
from memories.services import memories_import
from memories.services.transfer import ImportRejected
from memories.transfer_format import import_lines


class Command(BaseCommand):
    help = 'Import JSON Lines (an export, or {"content": ...} lines) into a bucket, with a progress bar on stderr.'

    def add_arguments(self, parser):
        parser.add_argument("bucket_id")
        parser.add_argument("file", help='a JSON Lines file ("-": standard input)')
        parser.add_argument("--skip-invalid", action="store_true", help="skip invalid lines and report them")
        parser.add_argument("--no-progress", action="store_true", help="do not draw the progress bar")

    def handle(self, *args, bucket_id, file, skip_invalid, no_progress, **options):
        bucket = bucket_by_id(bucket_id)
        with scope(tenant=bucket.tenant_id), self._open(file) as handle:
            size = os.fstat(handle.fileno()).st_size
            stream = io.StringIO() if no_progress else self.stderr._out
            passes = [] if skip_invalid else ["check"]
            passes.append("import")

            def read():
                # Each pass (a check, then the import) reads the file from the start.
                progress = ProgressBar(f"{passes.pop(0)} {bucket.name}", total=size, unit="bytes", stream=stream)
                handle.seek(0)
                for line in import_lines(handle):
                    progress.update(handle.tell())
                    yield line
                progress.update(size)
                progress.close()

            try:
                report = memories_import(
                    bucket=bucket, read=read, skip_invalid=skip_invalid, actor=Actor.system("manage.py import_bucket")
                )
            except ImportRejected as exc:
                for rejected in exc.extra["rejected"]:
                    self.stderr.write(f"line {rejected['line']}: {rejected['detail']}")
                raise CommandError(exc.message) from None
        self.stdout.write(json.dumps(report.as_dict()))

    def _open(self, file: str):
        if file != "-":
            try:
                return open(file, "rb")
            except OSError as exc:
                raise CommandError(f"cannot read {file}: {exc}") from None
        # Standard input cannot be read twice (a check, then the import): copy it first.
        spool = tempfile.TemporaryFile()  # noqa: SIM115 - closed by the caller's with
        shutil.copyfileobj(sys.stdin.buffer, spool)
        spool.seek(0)
        return spool
