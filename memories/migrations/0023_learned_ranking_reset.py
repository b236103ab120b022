"""A reset keeps the bucket's learned row, emptied, with reset_at: the nightly run then leaves the
bucket on the defaults until its ratings change (a deleted row made it due again at once)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0022_block_events_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="learnedranking",
            name="reset_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
