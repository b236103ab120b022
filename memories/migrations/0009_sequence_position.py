"""Each memory's place in the sequence it was written in (retrieval's neighbour lift).

The columns are nullable, so adding them rewrites nothing; the index is built
concurrently so writes and searches go on while a large table is indexed. Memories
written before this migration keep NULL: their batches are not recorded anywhere.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("memories", "0008_hnsw_m12_efc160"),
    ]

    operations = [
        migrations.AddField(model_name="memory", name="sequence_id", field=models.UUIDField(blank=True, null=True)),
        migrations.AddField(
            model_name="memory", name="sequence_index", field=models.IntegerField(blank=True, null=True)
        ),
        AddIndexConcurrently(
            model_name="memory",
            index=models.Index(
                condition=models.Q(("sequence_id__isnull", False)),
                fields=["tenant", "bucket", "sequence_id", "sequence_index"],
                name="idx_memories_sequence",
            ),
        ),
    ]
