"""The two HNSW graphs are built with m = 12 and ef_construction = 160 (were 16 and 128).

A graph with fewer links per node, built with a wider search, found more of the exact
neighbours at 100k memories for less work at each insert and each walk (bench/README.md,
"HNSW build parameters"). The indexes are rebuilt the way 0007 rebuilt them: each new one
beside the old (CREATE INDEX CONCURRENTLY, so writes and searches go on), then swapped in;
an interrupted run leaves an invalid "_new" index, which the next run drops first.
"""

import importlib

from django.db import migrations

half_precision_hnsw = importlib.import_module("memories.migrations.0007_half_precision_hnsw")

M, EF_CONSTRUCTION = 12, 160
BEFORE = {"m": half_precision_hnsw.M, "ef_construction": half_precision_hnsw.EF_CONSTRUCTION}
COLUMNS = half_precision_hnsw.COLUMNS


def _rebuild(m: int, ef_construction: int) -> list[str]:
    return [
        sql
        for name, column in COLUMNS.items()
        for sql in half_precision_hnsw._half(name, column, m=m, ef_construction=ef_construction)
    ]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("memories", "0007_half_precision_hnsw"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(_rebuild(M, EF_CONSTRUCTION), reverse_sql=_rebuild(**BEFORE)),
            ],
            state_operations=[
                *(migrations.RemoveIndex(model_name="memory", name=name) for name in COLUMNS),
                *(
                    migrations.AddIndex(
                        model_name="memory",
                        index=half_precision_hnsw._state_index(name, col, m=M, ef_construction=EF_CONSTRUCTION),
                    )
                    for name, col in COLUMNS.items()
                ),
            ],
        ),
    ]
