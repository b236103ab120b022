"""The database read back for assertions: a fingerprint of every table (did a refused request
change anything?) and a bucket's knowledge graph. Unlike the rest of tests/support, these need
Django set up."""

from __future__ import annotations

from django.apps import apps
from django.db import connection

from graph.models import Edge, Entity, Mention
from memories.models import Memory

SNAPSHOT_APPS = {"tenants", "memories", "graph", "maintenance", "audit", "sources", "auth", "admin",
                 "django_celery_beat", "webhooks"}  # fmt: skip
# Written on every authenticated API request (at most once a minute): not a change to tenant data.
VOLATILE_COLUMNS = ["last_used_at"]


def db_snapshot() -> dict[str, tuple[int, str]]:
    """Every table of the apps that hold data: its row count and a hash of its rows."""
    tables = sorted(
        {m._meta.db_table for m in apps.get_models(include_auto_created=True) if m._meta.app_label in SNAPSHOT_APPS}
    )
    state = {}
    with connection.cursor() as cur:
        for table in tables:
            cur.execute(
                f"""
                SELECT count(*), coalesce(md5(string_agg(h, ',' ORDER BY h)), '')
                FROM (SELECT md5((to_jsonb(t) - %s::text[])::text) AS h FROM {connection.ops.quote_name(table)} t) rows
                """,
                [VOLATILE_COLUMNS],
            )
            state[table] = cur.fetchone()
    return state


def assert_unchanged(before: dict, what: str) -> None:
    after = db_snapshot()
    changed = [t for t in before if before[t] != after[t]]
    assert not changed, f"{what} changed the database: {changed}"


def graph_facts(bucket, *, current_only=False) -> set[tuple]:
    """The bucket's edges as (subject, predicate, object) names."""
    edges = Edge.objects.for_bucket(bucket).select_related("subject", "object_entity")
    if current_only:
        edges = edges.current()
    return {(e.subject.name, e.predicate, e.object_entity.name if e.object_entity else e.object_literal) for e in edges}


def graph_snapshot(bucket):
    """Everything extraction decides for a bucket: entities, edges with their validity,
    supersession and links of its memories, the number of mentions."""
    entities = sorted(Entity.objects.for_bucket(bucket).values_list("normalized_name", "type", "mention_count"))
    edges = sorted(
        (e.subject.normalized_name, e.predicate, e.object_entity.normalized_name if e.object_entity else "",
         e.object_literal or "", e.valid_from, e.valid_to, str(e.source_memory_id))
        for e in Edge.objects.for_bucket(bucket).select_related("subject", "object_entity")
    )  # fmt: skip
    memories = sorted(
        (str(m.pk), m.superseded_at, str(m.superseded_by), sorted(m.linked_memory_ids or []))
        for m in Memory.objects.for_bucket(bucket)
    )
    mentions = Mention.objects.filter(bucket_id=bucket.pk).count()
    return entities, edges, memories, mentions
