"""Tokens held to agents: ``api_tokens.agent_ids`` (empty: every agent) and ``include_shared``.

Existing tokens get an empty list and false: they keep reaching every agent's memories. No
index: a token is looked up by its hash, and these columns are read from the row found.
"""

import django.contrib.postgres.fields
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0004_bucket_names_unique_regardless_of_case"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="agent_ids",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(max_length=200),
                blank=True,
                default=list,
                help_text="Only these agents' memories (empty: every agent's).",
                size=None,
            ),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="include_shared",
            field=models.BooleanField(
                default=False,
                help_text="With agent ids: may also read the shared memories, those without an agent.",
            ),
        ),
    ]
