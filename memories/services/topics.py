"""Renaming and merging a bucket's topics (``classified_topic``), audited in the same transaction.

A topic an operator renamed or merged is marked ``metadata.classified_by = "operator"``:
the scheduled classification never touches a set label (memories/topics.py).
"""

from __future__ import annotations

from django.db import connection, transaction

from audit.services import Actor, audit_record
from engram_site.exceptions import DomainError
from memories.models import VersionKind
from memories.services.history import Change, versions_record
from memories.topics import TOPIC_MAX_CHARS
from tenants.models import Bucket


def _clean_topic(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise DomainError("The topic name must not be empty.")
    if len(name) > TOPIC_MAX_CHARS:
        raise DomainError(f"The topic name is longer than {TOPIC_MAX_CHARS} characters.")
    return name


def _relabel(*, bucket: Bucket, topics: list[str], into: str, actor: Actor) -> list:
    """Relabel, recording a ``reclassified`` version of each memory whose topic changes."""
    with connection.cursor() as cur:
        cur.execute(
            """
            UPDATE memories m SET classified_topic = %s,
                   metadata = coalesce(m.metadata, '{}'::jsonb) || jsonb_build_object('classified_by', 'operator')
            FROM (SELECT id, classified_topic FROM memories
                  WHERE tenant_id = %s AND bucket_id = %s AND classified_topic = ANY(%s) FOR UPDATE) AS old
            WHERE m.id = old.id
            RETURNING m.id, old.classified_topic
            """,
            [into, bucket.tenant_id, bucket.pk, topics],
        )
        rows = cur.fetchall()
    changes = [
        Change(memory_id, bucket.tenant_id, bucket.pk, {"classified_topic": old}, {})
        for memory_id, old in rows
        if old != into
    ]
    versions_record(kind=VersionKind.RECLASSIFIED, changes=changes, actor=actor)
    return [memory_id for memory_id, _old in rows]


@transaction.atomic
def topic_rename(*, bucket: Bucket, topic: str, new_name: str, actor: Actor) -> int:
    """Rename ``topic`` in ``bucket`` (renaming onto an existing topic merges them).
    Returns the number of memories relabelled; audited as ``topic.rename``."""
    new_name = _clean_topic(new_name)
    ids = _relabel(bucket=bucket, topics=[topic], into=new_name, actor=actor)
    audit_record(
        actor=actor, action="topic.rename", tenant=bucket.tenant, object_type="memory", object_ids=ids,
        details={"bucket_id": str(bucket.pk), "from": topic, "to": new_name},
    )  # fmt: skip
    return len(ids)


@transaction.atomic
def topics_merge(*, bucket: Bucket, topics: list[str], into: str, actor: Actor) -> int:
    """Give every memory of ``topics`` in ``bucket`` the topic ``into``. Returns the
    number of memories relabelled; audited as ``topic.merge``."""
    into = _clean_topic(into)
    topics = [t for t in dict.fromkeys(topics) if t]
    if not topics:
        raise DomainError("Choose at least one topic to merge.")
    ids = _relabel(bucket=bucket, topics=topics, into=into, actor=actor)
    audit_record(
        actor=actor, action="topic.merge", tenant=bucket.tenant, object_type="memory", object_ids=ids,
        details={"bucket_id": str(bucket.pk), "from": topics, "to": into},
    )  # fmt: skip
    return len(ids)
