from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run in a transaction: the feed stays writable meanwhile.
    atomic = False

    dependencies = [
        ("memories", "0021_block_events"),
    ]

    operations = [
        # An erasure scrubs the events of the agent's blocks: WHERE block_id = ANY(...).
        AddIndexConcurrently(
            model_name="memoryevent",
            index=models.Index(
                condition=models.Q(("block_id__isnull", False)), fields=["block_id"], name="idx_events_block"
            ),
        ),
    ]
