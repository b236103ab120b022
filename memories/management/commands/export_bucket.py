"""./engram manage export_bucket BUCKET_ID [--out FILE] [--versions] [--embeddings] [--blocks] [--feedback]

A bucket's memories as JSON Lines, the format of GET /api/v1/buckets/{id}/export (docs/API.md).
"""

from __future__ import annotations

import io
import os
import uuid
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from engram_site.progress import ProgressBar
from engram_site.scoping import scope, scopes_disabled
from memories import selectors
from memories.services import memories_export
from tenants.models import Bucket


def bucket_by_id(value: str) -> Bucket:
    try:
        # Cross-tenant: the operator names a bucket by id, whoever's it is.
        with scopes_disabled():
            return Bucket.objects.select_related("tenant").get(pk=uuid.UUID(value))
    except (ValueError, Bucket.DoesNotExist):
        raise CommandError(f"no bucket with id {value!r}") from None


class Command(BaseCommand):
    help = "Export a bucket's memories as JSON Lines (to --out, or standard output), with a progress bar on stderr."

    def add_arguments(self, parser):
        parser.add_argument("bucket_id")
        parser.add_argument("--out", help="file to write (default: standard output)")
        parser.add_argument("--versions", action="store_true", help="include each memory's history")
        parser.add_argument("--embeddings", action="store_true", help="include the vectors (an import reuses them)")
        parser.add_argument(
            "--blocks", action="store_true", help='after the memories, one {"block": ...} line per memory block'
        )
        parser.add_argument(
            "--feedback", action="store_true", help='after those, one {"feedback": ...} line per rating'
        )
        parser.add_argument("--no-progress", action="store_true", help="do not draw the progress bar")

    def handle(self, *args, bucket_id, **options):
        bucket = bucket_by_id(bucket_id)
        with scope(tenant=bucket.tenant_id):
            self._export_to(bucket, **options)

    def _export_to(self, bucket, *, out, versions, embeddings, blocks, feedback, no_progress, **options):
        progress = ProgressBar(
            f"export {bucket.name}",
            total=selectors.memory_count(bucket=bucket),
            unit="memories",
            stream=io.StringIO() if no_progress else self.stderr._out,
        )
        if not out:
            # Standard output: bytes where it takes them, else text (a StringIO under call_command).
            stream = self.stdout._out
            write = stream.buffer.write if hasattr(stream, "buffer") else lambda chunk: stream.write(chunk.decode())
            self._export(bucket, versions, embeddings, blocks, feedback, write, progress)
            stream.flush()
            return
        # Written beside the file and renamed when complete: a failed export leaves no partial file.
        partial = Path(f"{out}.partial")
        try:
            with open(partial, "wb") as target:
                self._export(bucket, versions, embeddings, blocks, feedback, target.write, progress)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        os.replace(partial, out)

    def _export(self, bucket, versions, embeddings, blocks, feedback, write, progress) -> None:
        chunks = memories_export(
            bucket=bucket, versions=versions, embeddings=embeddings, blocks=blocks, feedback=feedback
        )
        for chunk in chunks:
            write(chunk)
            progress.update(progress.done + chunk.count(b"\n"))
        progress.close()
