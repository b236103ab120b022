"""./engram manage export_bucket BUCKET_ID [--out FILE] [--versions] [--embeddings]

A bucket's memories as JSON Lines, the format of GET /api/v1/buckets/{id}/export (docs/API.md).
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from memories import selectors
from memories.management.progress import Progress
from memories.services import memories_export
from tenants.models import Bucket


def bucket_by_id(value: str) -> Bucket:
    try:
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
        parser.add_argument("--no-progress", action="store_true", help="do not draw the progress bar")

    def handle(self, *args, bucket_id, out, versions, embeddings, no_progress, **options):
        bucket = bucket_by_id(bucket_id)
        progress = Progress(
            f"export {bucket.name}",
            total=selectors.memory_count(bucket=bucket),
            unit="memories",
            stream=None if no_progress else self.stderr._out,
        )
        # Written beside the file and renamed when complete: a failed export leaves no partial file.
        partial = Path(f"{out}.partial") if out else None
        target = open(partial, "wb") if partial else sys.stdout.buffer  # noqa: SIM115 - closed below
        try:
            for chunk in memories_export(bucket=bucket, versions=versions, embeddings=embeddings):
                target.write(chunk)
                progress.update(progress.done + chunk.count(b"\n"))
            target.flush()
        except BaseException:
            if partial:
                target.close()
                partial.unlink(missing_ok=True)
            raise
        if partial:
            target.close()
            os.replace(partial, out)
        progress.close()
