"""Storing classifier labels (``classified_scope``, ``classified_topic``) on memories.

The classifiers live in the maintenance app; they hand their labels here.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from django.db import connection

from memories.models import VersionKind
from memories.services.history import Change, versions_record


def memories_label(
    *,
    ids: Sequence[uuid.UUID],
    scopes: Sequence[str],
    topics: Sequence[str],
    by: Sequence[str],
    force: bool,
) -> int:
    """Label each memory of ``ids`` with its scope and topic; returns how many rows changed.

    Without ``force`` a label already set (by a client, an operator or an earlier run) is
    kept and only a NULL one is filled; ``metadata.classified_by`` records who labelled it.
    One statement per batch; the metadata change is a jsonb merge in SQL, so a concurrent
    edit of other metadata keys is not lost.
    """
    if not ids:
        return 0
    if force:
        return _relabel_recorded(ids=ids, scopes=scopes, topics=topics, by=by)
    guard = "" if force else "AND (m.classified_scope IS NULL OR m.classified_topic IS NULL)"
    scope_sql = "v.scope" if force else "coalesce(m.classified_scope, v.scope)"
    topic_sql = "v.topic" if force else "coalesce(m.classified_topic, v.topic)"
    with connection.cursor() as cur:
        cur.execute(
            f"""
            UPDATE memories m SET classified_scope = {scope_sql}, classified_topic = {topic_sql},
                   metadata = coalesce(m.metadata, '{{}}'::jsonb) || jsonb_build_object('classified_by', v.by)
            FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::text[]) AS v(id, scope, topic, by)
            WHERE m.id = v.id {guard}
            """,
            [list(ids), list(scopes), list(topics), list(by)],
        )
        return cur.rowcount


def _relabel_recorded(*, ids, scopes, topics, by) -> int:
    """Forced labels: every row whose set label changes gets a ``reclassified`` version
    (a label filled where there was none is not a reclassification)."""
    with connection.cursor() as cur:
        cur.execute(
            """
            UPDATE memories m SET classified_scope = v.scope, classified_topic = v.topic,
                   metadata = coalesce(m.metadata, '{}'::jsonb) || jsonb_build_object('classified_by', v.by)
            FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::text[]) AS v(id, scope, topic, by),
                 (SELECT id, tenant_id, bucket_id, classified_scope, classified_topic FROM memories
                  WHERE id = ANY(%s) FOR UPDATE) AS old
            WHERE m.id = v.id AND old.id = v.id
            RETURNING m.id, old.tenant_id, old.bucket_id, old.classified_scope, old.classified_topic, v.scope,
                      v.topic, v.by
            """,
            [list(ids), list(scopes), list(topics), list(by), list(ids)],
        )
        rows = cur.fetchall()
    versions_record(
        kind=VersionKind.RECLASSIFIED,
        changes=[
            Change(memory_id, tenant_id, bucket_id, {"classified_scope": scope, "classified_topic": topic}, {"by": who})
            for memory_id, tenant_id, bucket_id, scope, topic, new_scope, new_topic, who in rows
            if (scope is not None or topic is not None) and (scope, topic) != (new_scope, new_topic)
        ],
    )
    return len(rows)
