"""The ``relemmatize`` job: every stored lexical document made again with the current lemmatizer."""

from __future__ import annotations

from engram_site.jobs.runner import JobRecorder
from memories.services.relemmatize import RelemmatizeReport, memories_relemmatize
from tenants.models import Bucket


def relemmatize(
    *, recorder: JobRecorder, bucket: Bucket | None = None, batch_size: int | None = None
) -> RelemmatizeReport:
    report = memories_relemmatize(bucket=bucket, batch_size=batch_size or 500, on_batch=recorder.advance)
    recorder.add(**report.counts())
    return report
