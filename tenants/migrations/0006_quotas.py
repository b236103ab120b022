"""tenant_usage: what each tenant did per UTC day (tenants/usage.py), quota refusals included.

The unique (tenant_id, day) index is the flush's upsert target (ON CONFLICT (tenant_id, day))
and serves the charts' read: WHERE tenant_id IN (...) AND day >= ? (and the tenant's cascade).
"""

import django.contrib.postgres.fields
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0005_token_agents"),
    ]

    operations = [
        migrations.CreateModel(
            name="TenantUsage",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("day", models.DateField()),
                ("memories_written", models.BigIntegerField(db_default=0, default=0)),
                ("searches", models.BigIntegerField(db_default=0, default=0)),
                ("tokens_returned", models.BigIntegerField(db_default=0, default=0)),
                (
                    "latency_histogram",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.BigIntegerField(),
                        blank=True,
                        db_default=models.Value(
                            [],
                            django.contrib.postgres.fields.ArrayField(base_field=models.BigIntegerField(), size=None),
                        ),
                        default=list,
                        size=None,
                    ),
                ),
                ("memories_stored", models.BigIntegerField(blank=True, null=True)),
                ("storage_bytes", models.BigIntegerField(blank=True, null=True)),
                ("refused_reads", models.BigIntegerField(db_default=0, default=0)),
                ("refused_writes", models.BigIntegerField(db_default=0, default=0)),
                ("refused_memories", models.BigIntegerField(db_default=0, default=0)),
                ("refused_batch", models.BigIntegerField(db_default=0, default=0)),
                ("refused_document_bytes", models.BigIntegerField(db_default=0, default=0)),
                (
                    "tenant",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="tenants.tenant",
                    ),
                ),
            ],
            options={
                "db_table": "tenant_usage",
                "ordering": ["tenant_id", "day"],
                "constraints": [
                    models.UniqueConstraint(fields=("tenant", "day"), name="tenant_usage_tenant_day_unique")
                ],
            },
        ),
    ]
