"""Topics of a bucket (``classified_topic``): grouping for operators (renames and merges
are :mod:`memories.services.topics`).

Re-running the classifier on a selection is ``maintenance.services.topics.topics_reclassify``
(the classifier lives there). A topic an operator renamed or merged is marked
``metadata.classified_by = "operator"``: the scheduled classification never touches
a set label, and a forced re-run (an operator's explicit request) may relabel it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import connection
from django.db.models import QuerySet

from memories.models import Memory
from tenants.models import Bucket

TOPIC_MAX_CHARS = 100
SAMPLES = 3


@dataclass
class TopicGroup:
    topic: str | None  # None: memories without a topic
    count: int
    samples: list[dict] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.topic if self.topic is not None else "(unlabelled)"


def topic_groups(*, bucket: Bucket, samples: int = SAMPLES) -> list[TopicGroup]:
    """The bucket's topics with their memory counts (largest first, unlabelled last) and
    the newest ``samples`` memories of each."""
    with connection.cursor() as cur:
        # One pass over the bucket (idx_memories_tenant_bucket): counts and the newest rows per topic.
        cur.execute(
            """
            SELECT classified_topic, id, content, created_at, total FROM (
                SELECT classified_topic, id, content, created_at,
                       count(*) OVER (PARTITION BY classified_topic) AS total,
                       row_number() OVER (PARTITION BY classified_topic ORDER BY created_at DESC, id) AS n
                FROM memories WHERE tenant_id = %s AND bucket_id = %s
            ) s WHERE n <= %s
            ORDER BY (classified_topic IS NULL), total DESC, classified_topic, n
            """,
            [bucket.tenant_id, bucket.pk, max(1, samples)],
        )
        groups: dict[str | None, TopicGroup] = {}
        for topic, memory_id, content, created_at, total in cur.fetchall():
            group = groups.setdefault(topic, TopicGroup(topic=topic, count=total))
            if len(group.samples) < samples:
                group.samples.append({"id": memory_id, "content": content, "created_at": created_at})
    return list(groups.values())


def topic_memories(*, bucket: Bucket, topic: str | None) -> QuerySet[Memory]:
    memories = Memory.objects.for_bucket(bucket).defer("embedding", "context_embedding")
    if topic is None:
        return memories.filter(classified_topic__isnull=True).order_by("-created_at", "-id")
    memories = memories.filter(classified_topic=topic)
    return memories.order_by("-created_at", "-id")
