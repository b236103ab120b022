"""The schema of record (seed 000), checked against the migrated database.

pytest-django builds the test database from the migrations alone, so this
introspects exactly what a fresh ``migrate`` produces. The expected spec is
written out by hand from seed 000's CREATE TABLE: a missing, extra or altered
column, default, index or cascade fails here the day it happens.
"""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection

pytestmark = pytest.mark.django_db

# name -> (type, nullable, default expression or None)
MEMORY_COLUMNS = {
    "id": ("uuid", False, "gen_random_uuid()"),
    "tenant_id": ("uuid", False, None),
    "bucket_id": ("uuid", False, None),
    "content": ("text", False, None),
    "embedding": ("vector(384)", True, None),
    "metadata": ("jsonb", True, "'{}'::jsonb"),
    "token_count": ("integer", True, None),
    "classified_topic": ("text", True, None),
    "classified_scope": ("text", True, None),
    "hint_root": ("text", True, None),
    "hint_tags": ("text[]", True, None),
    "created_at": ("timestamp with time zone", True, "now()"),
    "last_accessed_at": ("timestamp with time zone", True, None),
    "text_lemmatized": ("text", True, None),
    "text_hash": ("character varying(32)", True, None),
    "attributed_to": ("character varying(20)", True, None),
    "agent_id": ("text", True, None),
    "run_id": ("text", True, None),
    "linked_memory_ids": ("jsonb", True, "'[]'::jsonb"),
    "source_actor_id": ("text", True, None),
    "lemmatized_tsv": ("tsvector", True, None),
}

# Columns beyond seed 000 that a hot-path query needs (each documented in docs/SCHEMA.md).
MEMORY_EXTRA_COLUMNS: dict[str, tuple[str, bool, str | None]] = {
    # Sequence context (memories 0002): a second lexical document and a second vector.
    "context_text": ("text", True, None),
    "context_lemmatized": ("text", True, None),
    "context_embedding": ("vector(384)", True, None),
    "context_tsv": ("tsvector", True, None),
    # Supersession (memories 0003): retrieval demotes or filters historical memories.
    "superseded_at": ("timestamp with time zone", True, None),
    "superseded_by": ("uuid", True, None),
    # Sequence position (memories 0009): retrieval's neighbour lift and expansion.
    "sequence_id": ("uuid", True, None),
    "sequence_index": ("integer", True, None),
    # A memory's life (memories 0010): the importance boost and filter, expiry.
    "importance": ("double precision", True, None),
    "expires_at": ("timestamp with time zone", True, None),
    # The model that made the row's vectors (memories 0012): a switch changes it with them.
    "embedding_model": ("character varying(64)", False, "'all-MiniLM-L6-v2'::character varying"),
}

GENERATED = {
    "lemmatized_tsv": "to_tsvector('simple'::regconfig, COALESCE(text_lemmatized, ''::text))",
    "context_tsv": (
        "\nCASE\n    WHEN (context_lemmatized IS NULL) THEN NULL::tsvector\n    ELSE to_tsvector('simple'::regconfig, "
        "(COALESCE(COALESCE(text_lemmatized, ''::text), ''::text) || COALESCE((COALESCE(' '::text, ''::text) || "
        "COALESCE(context_lemmatized, ''::text)), ''::text)))\nEND"
    ),
}

MEMORY_INDEXES = {
    "memories_pkey": "CREATE UNIQUE INDEX memories_pkey ON public.memories USING btree (id)",
    "idx_memories_tenant": "CREATE INDEX idx_memories_tenant ON public.memories USING btree (tenant_id)",
    "idx_memories_bucket": "CREATE INDEX idx_memories_bucket ON public.memories USING btree (bucket_id)",
    "idx_memories_tenant_bucket": (
        "CREATE INDEX idx_memories_tenant_bucket ON public.memories USING btree (tenant_id, bucket_id)"
    ),
    "idx_memories_bucket_created": (
        "CREATE INDEX idx_memories_bucket_created ON public.memories USING btree (tenant_id, bucket_id, created_at)"
    ),
    "idx_memories_last_accessed": (
        "CREATE INDEX idx_memories_last_accessed ON public.memories USING btree (tenant_id, last_accessed_at)"
    ),
    "idx_memories_lemmatized_tsv": (
        # The seed's index, with a bounded pending list (models.GIN_PENDING_LIST_KB).
        "CREATE INDEX idx_memories_lemmatized_tsv ON public.memories USING gin (lemmatized_tsv) "
        "WITH (gin_pending_list_limit='256')"
    ),
    "idx_memories_hash_unique": (
        "CREATE UNIQUE INDEX idx_memories_hash_unique ON public.memories USING btree "
        "(tenant_id, bucket_id, text_hash) WHERE (text_hash IS NOT NULL)"
    ),
    "idx_memories_attributed": (
        "CREATE INDEX idx_memories_attributed ON public.memories USING btree "
        "(tenant_id, bucket_id, attributed_to) WHERE (attributed_to IS NOT NULL)"
    ),
    "idx_memories_agent": (
        "CREATE INDEX idx_memories_agent ON public.memories USING btree (tenant_id, agent_id) "
        "WHERE (agent_id IS NOT NULL)"
    ),
    "idx_memories_run": (
        "CREATE INDEX idx_memories_run ON public.memories USING btree (tenant_id, run_id) WHERE (run_id IS NOT NULL)"
    ),
    "idx_memories_linked": "CREATE INDEX idx_memories_linked ON public.memories USING gin (linked_memory_ids)",
    "idx_memories_embedding_hnsw": (
        "CREATE INDEX idx_memories_embedding_hnsw ON public.memories USING hnsw "
        "(((embedding)::halfvec(384)) halfvec_cosine_ops) WITH (m='12', ef_construction='160')"
    ),
}

MEMORY_EXTRA_INDEXES = {
    # The metadata filter of searches and listings (memories/filters.py), rows with metadata only.
    "idx_memories_metadata": (
        "CREATE INDEX idx_memories_metadata ON public.memories USING gin (metadata jsonb_path_ops) "
        "WHERE (NOT ((metadata = '{}'::jsonb) AND (metadata IS NOT NULL)))"
    ),
    "idx_memories_context_tsv": (
        "CREATE INDEX idx_memories_context_tsv ON public.memories USING gin (context_tsv) "
        "WITH (gin_pending_list_limit='256') WHERE (context_lemmatized IS NOT NULL)"
    ),
    "idx_memories_context_hnsw": (
        "CREATE INDEX idx_memories_context_hnsw ON public.memories USING hnsw "
        "(((context_embedding)::halfvec(384)) halfvec_cosine_ops) WITH (m='12', ef_construction='160')"
    ),
    "idx_memories_sequence": (
        "CREATE INDEX idx_memories_sequence ON public.memories USING btree "
        "(tenant_id, bucket_id, sequence_id, sequence_index) WHERE (sequence_id IS NOT NULL)"
    ),
    "idx_memories_important": (
        "CREATE INDEX idx_memories_important ON public.memories USING btree (tenant_id, bucket_id) "
        "WHERE (importance IS NOT NULL)"
    ),
    "idx_memories_expires": (
        "CREATE INDEX idx_memories_expires ON public.memories USING btree (expires_at) WHERE (expires_at IS NOT NULL)"
    ),
    "idx_memories_long": (
        "CREATE INDEX idx_memories_long ON public.memories USING btree (created_at, id) WHERE (token_count > 254)"
    ),
    "idx_memories_enrich_pending": (
        "CREATE INDEX idx_memories_enrich_pending ON public.memories USING btree (created_at) "
        "WHERE ((embedding IS NULL) OR (text_lemmatized IS NULL) OR ((context_embedding IS NULL) AND "
        "(context_text IS NOT NULL)) OR ((context_lemmatized IS NULL) AND (context_text IS NOT NULL)))"
    ),
}

MEMORY_FOREIGN_KEYS = {
    "FOREIGN KEY (tenant_id) REFERENCES tenants(id) ON DELETE CASCADE",
    "FOREIGN KEY (bucket_id) REFERENCES buckets(id) ON DELETE CASCADE",
}


def _columns(table: str) -> dict[str, tuple[str, bool, str | None]]:
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull,
                   CASE WHEN a.attgenerated = '' THEN pg_get_expr(d.adbin, d.adrelid) END
            FROM pg_attribute a
            LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
            WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
            ORDER BY a.attnum
            """,
            [table],
        )
        return {name: (typ, nullable, default) for name, typ, nullable, default in cur.fetchall()}


def _generated(table: str) -> dict[str, str]:
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT a.attname, pg_get_expr(d.adbin, d.adrelid)
            FROM pg_attribute a JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
            WHERE a.attrelid = %s::regclass AND a.attgenerated = 's'
            """,
            [table],
        )
        return dict(cur.fetchall())


def _indexes(table: str) -> dict[str, str]:
    with connection.cursor() as cur:
        cur.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [table])
        return dict(cur.fetchall())


def _foreign_keys(table: str) -> set[str]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'f'",
            [table],
        )
        return {row[0] for row in cur.fetchall()}


def test_memories_columns_match_seed_000():
    actual = _columns("memories")
    expected = {**MEMORY_COLUMNS, **MEMORY_EXTRA_COLUMNS}
    assert set(actual) == set(expected), "column set differs from the schema of record"
    for name, spec in expected.items():
        assert actual[name] == spec, f"column {name}: expected {spec}, found {actual[name]}"


def test_memories_seed_columns_come_first_in_seed_order():
    assert list(_columns("memories"))[: len(MEMORY_COLUMNS)] == list(MEMORY_COLUMNS)


def test_lemmatized_tsv_is_a_stored_generated_simple_tsvector():
    assert _generated("memories") == GENERATED


def test_memories_indexes_match_seed_000():
    actual = _indexes("memories")
    expected = {**MEMORY_INDEXES, **MEMORY_EXTRA_INDEXES}
    assert set(actual) == set(expected)
    for name, definition in expected.items():
        assert actual[name] == definition, f"index {name} differs"


def test_memories_cascade_from_tenant_and_bucket_in_the_database():
    assert _foreign_keys("memories") == MEMORY_FOREIGN_KEYS
    assert "FOREIGN KEY (tenant_id) REFERENCES tenants(id) ON DELETE CASCADE" in _foreign_keys("buckets")


def test_graph_tables_cascade_from_memories_and_buckets():
    assert "FOREIGN KEY (source_memory_id) REFERENCES memories(id) ON DELETE CASCADE" in _foreign_keys("graph_edges")
    assert "FOREIGN KEY (memory_id) REFERENCES memories(id) ON DELETE CASCADE" in _foreign_keys("graph_mentions")
    assert "FOREIGN KEY (bucket_id) REFERENCES buckets(id) ON DELETE CASCADE" in _foreign_keys("graph_entities")
    assert "graph_entities_unique_name" in _indexes("graph_entities")
    assert "USING gin (aliases)" in _indexes("graph_entities")["graph_entities_aliases"]


def test_vector_extension_is_installed():
    with connection.cursor() as cur:
        cur.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cur.fetchone()
    assert row is not None
    major, minor = (int(x) for x in row[0].split(".")[:2])
    assert (major, minor) >= (0, 8)


@pytest.mark.parametrize("installed", ["0.6.2", "0.7.4", None])
def test_the_half_precision_migration_names_the_pgvector_it_needs(installed):
    import importlib

    migration = importlib.import_module("memories.migrations.0007_half_precision_hnsw")
    # The server answers the migration's own query as one with an older pgvector (or none)
    # would: a temporary view named pg_extension, which the search path puts before the
    # catalog's, for this test's transaction only.
    with connection.cursor() as cur:
        cur.execute(
            "CREATE TEMPORARY VIEW pg_extension AS SELECT %s::text AS extversion, 'vector'::name AS extname WHERE %s",
            [installed or "", installed is not None],
        )
    try:
        with connection.schema_editor() as editor, pytest.raises(RuntimeError, match=r"needs 0\.8 or newer") as raised:
            migration._require_halfvec(None, editor)
        assert (installed or "(none)") in str(raised.value)
    finally:
        with connection.cursor() as cur:
            cur.execute("DROP VIEW pg_temp.pg_extension")


def test_the_half_precision_migration_accepts_the_installed_pgvector():
    import importlib

    migration = importlib.import_module("memories.migrations.0007_half_precision_hnsw")
    with connection.schema_editor() as editor:
        migration._require_halfvec(None, editor)  # the embedded server's 0.8.5: no error


@pytest.mark.django_db(transaction=True)
def test_the_hnsw_parameter_migration_rebuilds_both_graphs_and_back():
    import importlib

    migration = importlib.import_module("memories.migrations.0008_hnsw_m12_efc160")
    hnsw = ("idx_memories_embedding_hnsw", "idx_memories_context_hnsw")

    def run(statements):
        with connection.cursor() as cur:
            for sql in statements:
                cur.execute(sql)

    try:
        run(migration._rebuild(**migration.BEFORE))
        indexes = _indexes("memories")
        assert all("WITH (m='16', ef_construction='128')" in indexes[name] for name in hnsw)
        # A build interrupted earlier left an index named "_new" behind: the next run drops it.
        run(["CREATE INDEX idx_memories_context_hnsw_new ON memories (created_at)"])
    finally:
        run(migration._rebuild(migration.M, migration.EF_CONSTRUCTION))
    indexes = _indexes("memories")
    expected = {**MEMORY_INDEXES, **MEMORY_EXTRA_INDEXES}
    assert {name: indexes[name] for name in hnsw} == {name: expected[name] for name in hnsw}
    assert not [name for name in indexes if name.endswith("_new")]


def test_tenant_bucket_and_token_tables():
    tenants = _columns("tenants")
    assert tenants["id"] == ("uuid", False, "gen_random_uuid()")
    assert {"name", "slug", "is_active", "settings", "created_at"} <= set(tenants)
    buckets = _columns("buckets")
    assert buckets["tenant_id"][:2] == ("uuid", False)
    # Names are unique regardless of case (migration tenants 0004).
    assert _indexes("buckets")["buckets_tenant_name_ci_unique"] == (
        "CREATE UNIQUE INDEX buckets_tenant_name_ci_unique ON public.buckets "
        "USING btree (tenant_id, lower((name)::text))"
    )
    tokens = _columns("api_tokens")
    assert {"token_hash", "prefix", "scopes", "bucket_id", "expires_at", "revoked_at", "last_used_at"} <= set(tokens)
    assert "secret" not in tokens and "token" not in tokens


def test_models_and_migrations_agree():
    # The same check CI runs: no model change without its migration.
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
