"""The ``switch_embedding_model`` job of one bucket."""

from __future__ import annotations

from engram_site.jobs.runner import JobRecorder
from engram_site.locks import advisory_lock
from engram_site.providers import embedding
from memories.services.embedding_switch import embedding_switch_run, embedding_switch_status
from tenants.models import Bucket


def embedding_switch(*, recorder: JobRecorder, bucket: Bucket, stop_after: int | None = None) -> dict:
    """The ``switch_embedding_model`` job of one bucket (memories.services.embedding_switch):
    progress is the bucket's memories with vectors of the new model staged. One run per
    bucket at a time (an advisory lock); LockHeld when another holds it."""
    with advisory_lock(f"switch_embedding_model:{bucket.pk}"):
        status = embedding_switch_status(bucket=bucket)
        recorder.set(bucket_id=str(bucket.pk), model=status.model, next_model=status.next_model)
        recorder.set_total(status.memories)
        recorder.advance(status.staged)  # staged by earlier runs
        try:
            outcome = embedding_switch_run(bucket=bucket, on_batch=recorder.advance, stop_after=stop_after)
        except embedding.EmbeddingUnavailable as exc:
            recorder.fail(f"the embedding model is unavailable ({exc}); the next run goes on from here")
            return {"status": "failed", "model": status.next_model, "staged": recorder.done}
        recorder.add(staged=outcome["staged"], swapped=outcome.get("swapped", 0))
        recorder.set(status=outcome["status"])
        return outcome
