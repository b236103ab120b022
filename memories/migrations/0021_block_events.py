"""The change feed carries memory blocks' changes too (block_created, block_updated,
block_deleted): an event names its memory or its block. Both column changes are catalogue-only
(a nullable column added without a default, a NOT NULL dropped): no rewrite of memory_events."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0020_metadata_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="memoryevent",
            name="block_id",
            field=models.UUIDField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="memoryevent",
            name="kind",
            field=models.CharField(
                choices=[
                    ("created", "created"),
                    ("updated", "updated"),
                    ("superseded", "superseded"),
                    ("deleted", "deleted"),
                    ("restored", "restored"),
                    ("expired", "expired"),
                    ("erased", "erased"),
                    ("block_created", "block_created"),
                    ("block_updated", "block_updated"),
                    ("block_deleted", "block_deleted"),
                ],
                max_length=20,
            ),
        ),
        migrations.AlterField(
            model_name="memoryevent",
            name="memory_id",
            field=models.UUIDField(blank=True, null=True),
        ),
    ]
