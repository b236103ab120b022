"""Topics: classify a selection again (the console's topic pages)."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Q

from audit.services import Actor, audit_record
from engram_site.exceptions import DomainError
from maintenance.services.classification import memories_classify
from memories.models import Memory
from tenants.models import Bucket

RECLASSIFY_MAX = 5000


def topics_reclassify(
    *,
    bucket: Bucket,
    actor: Actor,
    memory_ids: Iterable | None = None,
    topics: Iterable[str | None] | None = None,
    classifier=None,
) -> dict:
    """Classify again the memories of ``bucket`` given by id and/or by topic (``None``:
    the unlabelled ones), overwriting labels a classifier or an operator set (labels
    a client set are kept; rows without an embedding wait for the enrichment sweep).
    At most :data:`RECLASSIFY_MAX` memories per call; ``manage.py classify --bucket``
    does whole buckets."""
    selection = Q(pk__in=[])
    if memory_ids is not None:
        selection |= Q(pk__in=list(memory_ids))
    for topic in topics or []:
        selection |= Q(classified_topic__isnull=True) if topic is None else Q(classified_topic=topic)
    ids = list(Memory.objects.for_bucket(bucket).filter(selection).values_list("id", flat=True)[: RECLASSIFY_MAX + 1])
    if len(ids) > RECLASSIFY_MAX:
        raise DomainError(
            f"More than {RECLASSIFY_MAX} memories selected; use `manage.py classify --bucket {bucket.pk} --force`."
        )
    counts = memories_classify(memory_ids=ids, bucket=bucket, force=True, classifier=classifier) if ids else {}
    audit_record(
        actor=actor,
        action="topic.reclassify",
        tenant=bucket.tenant,
        object_type="memory",
        object_ids=ids,
        details={"bucket_id": str(bucket.pk), "topics": list(topics or []), "counts": counts},
    )
    return {"selected": len(ids), **counts}
