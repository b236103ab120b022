"""The two HNSW indexes hold 16-bit copies of the vectors (models.half_precision).

Each new index is built beside the old one without blocking writes (CREATE INDEX
CONCURRENTLY; hence a non-atomic migration), then the old one is dropped and the new one
takes its name. Searches keep an index throughout: until the swap they walk the old one.
An interrupted build leaves an invalid "_new" index, which the next run drops first.
The build needs maintenance_work_mem for the graph: at 100k memories ~30 s per index
with the embedded server's settings (docs/OPERATIONS.md).
"""

import django.contrib.postgres.indexes
import django.db.models.functions.comparison
import pgvector.django.halfvec
import pgvector.django.indexes
from django.db import migrations

M = 16
EF_CONSTRUCTION = 128
COLUMNS = {"idx_memories_embedding_hnsw": "embedding", "idx_memories_context_hnsw": "context_embedding"}


def _swap(name: str, definition: str, m: int = M, ef_construction: int = EF_CONSTRUCTION) -> list[str]:
    """Build ``name`` anew beside the old index, then drop the old one and rename."""
    return [
        f"DROP INDEX CONCURRENTLY IF EXISTS {name}_new",
        f"CREATE INDEX CONCURRENTLY {name}_new ON memories USING hnsw ({definition}) "
        f"WITH (m = {m}, ef_construction = {ef_construction})",
        f"DROP INDEX CONCURRENTLY IF EXISTS {name}",
        f"ALTER INDEX {name}_new RENAME TO {name}",
    ]


def _half(name: str, column: str, m: int = M, ef_construction: int = EF_CONSTRUCTION) -> list[str]:
    """``_swap`` to a graph over the half-precision copies (also what 0008 rebuilds with its parameters)."""
    return _swap(name, f"({column}::halfvec(384)) halfvec_cosine_ops", m, ef_construction)


def _full(name: str, column: str) -> list[str]:
    return _swap(name, f"{column} vector_cosine_ops")


def _require_halfvec(apps, schema_editor):
    """Say which pgvector is needed instead of failing on an unknown type: halfvec came with
    0.7, and retrieval's iterative index scans with 0.8."""
    with schema_editor.connection.cursor() as cur:
        cur.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cur.fetchone()
    version = tuple(int(part) for part in row[0].split(".")[:2]) if row else (0, 0)
    if version < (0, 8):
        raise RuntimeError(
            f"pgvector {row[0] if row else '(none)'} is too old: Engram needs 0.8 or newer "
            "(ALTER EXTENSION vector UPDATE after upgrading the package)."
        )


def _state_index(name: str, column: str, m: int = M, ef_construction: int = EF_CONSTRUCTION):
    return pgvector.django.indexes.HnswIndex(
        django.contrib.postgres.indexes.OpClass(
            django.db.models.functions.comparison.Cast(
                column, output_field=pgvector.django.halfvec.HalfVectorField(dimensions=384)
            ),
            name="halfvec_cosine_ops",
        ),
        ef_construction=ef_construction,
        m=m,
        name=name,
    )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("memories", "0006_gin_pending_list_limit"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunPython(_require_halfvec, migrations.RunPython.noop),
                migrations.RunSQL(
                    [sql for name, column in COLUMNS.items() for sql in _half(name, column)],
                    reverse_sql=[sql for name, column in COLUMNS.items() for sql in _full(name, column)],
                ),
            ],
            state_operations=[
                *(migrations.RemoveIndex(model_name="memory", name=name) for name in COLUMNS),
                *(
                    migrations.AddIndex(model_name="memory", index=_state_index(name, col))
                    for name, col in COLUMNS.items()
                ),
            ],
        ),
    ]
