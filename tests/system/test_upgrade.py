"""Upgrading: a database populated at the previous release's migration state migrates to this
release's with every row intact and still searchable.

The database is a new one on the test server, migrated by a separate process to the state the
previous release left (``PREVIOUS_RELEASE``), filled with rows written in that schema's own
columns, then migrated by ``manage.py migrate`` like ``./engram serve`` does at start.
"""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest
from psycopg.types.json import Jsonb

from engram_site.providers import embedding
from engram_site.providers.lemmatizer import lemmatize
from tests.support import base_env, manage, test_database_url

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Each app's last migration in the previous release (main as it landed on 2026-11-26, stop 40).
# When a release lands, move this to its migration leaves.
PREVIOUS_RELEASE = {
    "audit": "0001_initial",
    "tenants": "0004_bucket_names_unique_regardless_of_case",
    "memories": "0011_important_index",
    "maintenance": "0006_purge_schedule",
    "graph": "0004_entity_first_word_index",
    "sources": "0001_initial",
}

MIGRATE_TO_PREVIOUS = f"""
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
executor = MigrationExecutor(connection)
executor.migrate({sorted(PREVIOUS_RELEASE.items())!r})
"""

# The rows each populated table holds, keyed by primary key, as JSON: compared before and after.
TABLES = {
    "tenants": "id",
    "buckets": "id",
    "api_tokens": "id",
    "memories": "id",
    "memory_versions": "id",
    "memories_deleted": "id",
    "graph_entities": "id",
    "graph_mentions": "id",
    "graph_edges": "id",
    "sources": "id",
    "source_chunks": "id",
    "audit_events": "id",
}

SEARCH_AFTER_UPGRADE = """
import json
from engram_site.scoping import scope, scopes_disabled
from memories.retrieval import memories_search
from tenants.models import Bucket
with scopes_disabled():  # cross-tenant: the bucket is found by its id, whoever's it is
    bucket = Bucket.objects.get(id="{bucket}")
found = {{}}
with scope(tenant=bucket.tenant_id):  # searched as its tenant's request would
    for mode in ("keyword", "vector"):
        result = memories_search(bucket=bucket, query="Which city does Alice live in?", mode=mode, record_access=False)
        found[mode] = [str(hit.id) for hit in result.hits]
print("RESULT" + json.dumps(found))
"""


def _vector(text: str) -> str:
    return "[" + ",".join(f"{x:.7f}" for x in embedding.embed_texts([text])[0]) + "]"


def _populate(conn: psycopg.Connection) -> dict[str, str]:
    tenant, bucket = str(uuid.uuid4()), str(uuid.uuid4())
    alice, bob, gone = str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4())
    oslo_entity, alice_entity, source = str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4())
    facts = {alice: "Alice lives in Oslo with her two cats.", bob: "Bob prefers green tea over coffee."}
    run = conn.execute
    run("INSERT INTO tenants (id, name, slug, is_active, settings) VALUES (%s, 'Acme', 'acme', true, %s)",
        [tenant, Jsonb({"ranking": {"recency_weight": 0.1}})])  # fmt: skip
    run("INSERT INTO buckets (id, tenant_id, name, description, retention_days) VALUES (%s, %s, 'main', 'd', 14)",
        [bucket, tenant])  # fmt: skip
    run("INSERT INTO api_tokens (name, prefix, token_hash, scopes, created_at, tenant_id, bucket_id) "
        "VALUES ('agent', 'eng_abc', %s, '{read,write}', now(), %s, %s)", ["f" * 64, tenant, bucket])  # fmt: skip
    for memory_id, content in facts.items():
        run(
            "INSERT INTO memories (id, tenant_id, bucket_id, content, embedding, token_count, text_lemmatized, "
            "text_hash, attributed_to, agent_id, classified_scope, importance, expires_at, metadata) "
            "VALUES (%s, %s, %s, %s, %s::vector, 9, %s, md5(%s), 'user', 'planner', 'specific', 0.7, "
            "now() + interval '30 days', %s)",
            [memory_id, tenant, bucket, content, _vector(content), lemmatize(content), content, Jsonb({"k": 1})],
        )
    run("INSERT INTO memory_versions (memory_id, kind, previous, details, actor_kind, actor_id, actor_label, "
        "tenant_id, bucket_id) VALUES (%s, 'edited', %s, '{}', 'token', '1', 'agent', %s, %s)",
        [alice, Jsonb({"content": "Alice lives in Bergen."}), tenant, bucket])  # fmt: skip
    run("INSERT INTO memories_deleted (id, reason, content, row, tenant_id, bucket_id) "
        "VALUES (%s, 'deleted', 'An old fact.', %s, %s, %s)",
        [gone, Jsonb({"id": gone, "content": "An old fact."}), tenant, bucket])  # fmt: skip
    for entity_id, name, kind in ((alice_entity, "Alice", "PERSON"), (oslo_entity, "Oslo", "PLACE")):
        run("INSERT INTO graph_entities (id, tenant_id, bucket_id, name, normalized_name, type, aliases, "
            "mention_count) VALUES (%s, %s, %s, %s, lower(%s), %s, '{}', 1)",
            [entity_id, tenant, bucket, name, name, kind])  # fmt: skip
        run("INSERT INTO graph_mentions (tenant_id, bucket_id, entity_id, memory_id) VALUES (%s, %s, %s, %s)",
            [tenant, bucket, entity_id, alice])  # fmt: skip
    run("INSERT INTO graph_edges (tenant_id, bucket_id, subject_id, predicate, object_entity_id, functional_key, "
        "valid_from, confidence, source_memory_id) VALUES (%s, %s, %s, 'lives_in', %s, 'alice|lives_in', now(), "
        "0.9, %s)", [tenant, bucket, alice_entity, oslo_entity, alice])  # fmt: skip
    run("INSERT INTO sources (id, tenant_id, bucket_id, kind, title, metadata, content_hash, status, chunks_total, "
        "chunks_done, memories_created, memories_deduplicated, dropped, error, attempts, text, options, "
        "distilled_by, submitted_by) VALUES (%s, %s, %s, 'document', 'Notes', '{}', md5('x'), 'done', 1, 1, 1, 0, "
        "0, '', 1, 'Alice lives in Oslo.', '{}', 'rules', 'token:1')", [source, tenant, bucket])  # fmt: skip
    run("INSERT INTO source_chunks (source_id, ordinal, text, heading, status, error, statements, dropped) "
        "VALUES (%s, 0, 'Alice lives in Oslo.', '', 'done', '', 1, 0)", [source])  # fmt: skip
    run("INSERT INTO audit_events (created_at, actor_kind, actor_id, actor_label, action, object_type, object_ids, "
        "object_count, details, request_id, tenant_id) VALUES (now(), 'token', '1', 'agent', 'memory.create', "
        "'memory', %s, 1, '{}', 'r1', %s)", [Jsonb([alice]), tenant])  # fmt: skip
    conn.commit()
    return {"bucket": bucket, "alice": alice, "bob": bob}


def _snapshot(conn: psycopg.Connection) -> dict[str, dict[str, dict]]:
    return {
        table: {str(row[0]): row[1] for row in conn.execute(f"SELECT {key}, to_jsonb(t) FROM {table} t")}
        for table, key in TABLES.items()
    }


@pytest.fixture
def upgrade_database(db):
    """A new, empty database on the test server, dropped afterwards."""
    url = test_database_url()
    name = f"upgrade_{uuid.uuid4().hex[:10]}"
    admin = url.replace(f"/{url.split('/')[3].split('?')[0]}", "/postgres", 1)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url.replace(f"/{url.split('/')[3].split('?')[0]}", f"/{name}", 1)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_previous_release_database_migrates_with_every_row_intact(upgrade_database):
    env = base_env(DATABASE_URL=upgrade_database)
    manage("shell", "-c", MIGRATE_TO_PREVIOUS, env=env)
    with psycopg.connect(upgrade_database) as conn:
        state = dict(conn.execute("SELECT app, max(name) FROM django_migrations GROUP BY app").fetchall())
        assert {app: state.get(app) for app in PREVIOUS_RELEASE} == PREVIOUS_RELEASE
        ids = _populate(conn)
        before = _snapshot(conn)

    output = manage("shell", "-c", "from django.core.management import call_command; call_command('migrate')",
                    env=env).stdout  # fmt: skip
    assert "Applying" in output or "No migrations to apply" in output
    searched = manage("shell", "-c", SEARCH_AFTER_UPGRADE.format(bucket=ids["bucket"]), env=env).stdout

    with psycopg.connect(upgrade_database) as conn:
        after = _snapshot(conn)
        pending = conn.execute("SELECT count(*) FROM django_migrations").fetchone()[0]
    assert pending > 0
    for table, rows in before.items():
        assert rows, f"{table} was not populated"
        assert set(after[table]) == set(rows), f"{table}: rows lost or added by the upgrade"
        for key, old in rows.items():
            new = after[table][key]
            # Columns a migration added may appear; every old column keeps its value.
            changed = {column for column, value in old.items() if new.get(column) != value}
            assert not changed, f"{table} {key}: {sorted(changed)} changed"

    found = json.loads(searched.split("RESULT", 1)[1])
    assert found["keyword"][0] == ids["alice"]
    assert found["vector"][0] == ids["alice"]
