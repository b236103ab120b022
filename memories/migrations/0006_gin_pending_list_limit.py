"""Bound the pending lists of the two tsvector GIN indexes (models.GIN_PENDING_LIST_KB).

The storage parameter is set in place: ALTER INDEX ... SET takes effect for the next writes
without rebuilding the index (the state records the same index with the new parameter).
"""

import django.contrib.postgres.indexes
from django.db import migrations, models

PENDING_LIST_KB = 256
INDEXES = [
    django.contrib.postgres.indexes.GinIndex(
        fields=["lemmatized_tsv"], name="idx_memories_lemmatized_tsv", gin_pending_list_limit=PENDING_LIST_KB
    ),
    django.contrib.postgres.indexes.GinIndex(
        fields=["context_tsv"],
        name="idx_memories_context_tsv",
        condition=models.Q(("context_lemmatized__isnull", False)),
        gin_pending_list_limit=PENDING_LIST_KB,
    ),
]


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0005_bucket_created_index"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    [f"ALTER INDEX {i.name} SET (gin_pending_list_limit = {PENDING_LIST_KB})" for i in INDEXES],
                    reverse_sql=[f"ALTER INDEX {i.name} RESET (gin_pending_list_limit)" for i in INDEXES],
                )
            ],
            state_operations=[
                *(migrations.RemoveIndex(model_name="memory", name=index.name) for index in INDEXES),
                *(migrations.AddIndex(model_name="memory", index=index) for index in INDEXES),
            ],
        ),
    ]
