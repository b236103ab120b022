"""Storing classifier labels (``classified_scope``, ``classified_topic``) on memories.

The classifiers live in the maintenance app; they hand their labels here.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from django.db import connection

from memories.models import VersionKind
from memories.services.history import ENGRAM


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
            WITH v AS (SELECT * FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::text[]) AS v(id, scope, topic, by)),
            old AS (
                SELECT m.id, m.tenant_id, m.bucket_id, m.classified_scope, m.classified_topic
                FROM memories m JOIN v ON v.id = m.id FOR UPDATE OF m
            ),
            changed AS (
                UPDATE memories m SET classified_scope = v.scope, classified_topic = v.topic,
                       metadata = coalesce(m.metadata, '{}'::jsonb) || jsonb_build_object('classified_by', v.by)
                FROM v WHERE m.id = v.id RETURNING m.id
            ),
            versions AS (
                INSERT INTO memory_versions (memory_id, tenant_id, bucket_id, kind, previous, details, actor_kind,
                                             actor_id, actor_label, created_at)
                SELECT old.id, old.tenant_id, old.bucket_id, %s,
                       jsonb_build_object('classified_scope', old.classified_scope,
                                          'classified_topic', old.classified_topic),
                       jsonb_build_object('by', v.by), %s, '', %s, now()
                FROM old JOIN v ON v.id = old.id
                WHERE (old.classified_scope IS NOT NULL OR old.classified_topic IS NOT NULL)
                  AND (old.classified_scope IS DISTINCT FROM v.scope OR old.classified_topic IS DISTINCT FROM v.topic)
            )
            SELECT count(*) FROM changed
            """,
            [list(ids), list(scopes), list(topics), list(by), VersionKind.RECLASSIFIED, str(ENGRAM.kind), ENGRAM.label],
        )
        return cur.fetchone()[0]
