import django.contrib.postgres.indexes
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations


class Migration(migrations.Migration):
    # Built CONCURRENTLY (outside a transaction): the graph keeps taking reads and writes.
    atomic = False

    dependencies = [
        ("graph", "0002_processed"),
    ]

    operations = [
        # Graph retrieval's seeds: WHERE tenant_id = ? AND bucket_id = ? AND
        # (normalized_name = ANY(?) OR aliases && ?) — without it the OR reads every entity.
        AddIndexConcurrently(
            model_name="entity",
            index=django.contrib.postgres.indexes.GinIndex(fields=["aliases"], name="graph_entities_aliases"),
        ),
    ]
