from django.contrib.postgres.indexes import GinIndex, OpClass
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations
from django.db.models import Q


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run in a transaction: a large memories table stays
    # writable while the index is built.
    atomic = False

    dependencies = [
        ("memories", "0019_learned_rankings"),
    ]

    operations = [
        # The metadata filter of searches and listings: metadata @> ? AND metadata <> '{}'.
        AddIndexConcurrently(
            model_name="memory",
            index=GinIndex(
                OpClass("metadata", name="jsonb_path_ops"),
                condition=~Q(metadata={}),
                name="idx_memories_metadata",
            ),
        ),
    ]
