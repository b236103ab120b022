"""The change feed: memory_events (one row per change, written with it) and memory_event_trims
(how far the retention trim went per bucket). Tenant and bucket cascade in the database."""

import django.core.serializers.json
import django.db.models.deletion
from django.db import migrations, models

import engram_site.db


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0013_enrichment_failures"),
        ("tenants", "0004_bucket_names_unique_regardless_of_case"),
    ]

    operations = [
        migrations.CreateModel(
            name="MemoryEventTrim",
            fields=[
                (
                    "bucket",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        primary_key=True,
                        related_name="+",
                        serialize=False,
                        to="tenants.bucket",
                    ),
                ),
                ("xid", models.BigIntegerField()),
                ("event_id", models.BigIntegerField()),
            ],
            options={
                "db_table": "memory_event_trims",
            },
        ),
        migrations.CreateModel(
            name="MemoryEvent",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("memory_id", models.UUIDField()),
                ("agent_id", models.TextField(blank=True, null=True)),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("created", "created"),
                            ("updated", "updated"),
                            ("superseded", "superseded"),
                            ("deleted", "deleted"),
                            ("restored", "restored"),
                            ("expired", "expired"),
                            ("erased", "erased"),
                        ],
                        max_length=20,
                    ),
                ),
                ("payload", models.JSONField(default=dict, encoder=django.core.serializers.json.DjangoJSONEncoder)),
                ("at", models.DateTimeField(db_default=engram_site.db.TransactionNow())),
                ("xid", models.BigIntegerField(db_default=engram_site.db.CurrentTransactionId())),
                (
                    "bucket",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="tenants.bucket",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="tenants.tenant",
                    ),
                ),
            ],
            options={
                "db_table": "memory_events",
                "indexes": [
                    models.Index(fields=["tenant", "bucket", "xid", "id"], name="idx_events_bucket_feed"),
                    models.Index(fields=["tenant", "xid", "id"], name="idx_events_tenant_feed"),
                    models.Index(fields=["memory_id"], name="idx_events_memory"),
                    models.Index(fields=["at"], name="idx_events_at"),
                ],
            },
        ),
        migrations.RunSQL(
            sql=[
                "ALTER TABLE memory_events ADD CONSTRAINT memory_events_tenant_id_fk FOREIGN KEY (tenant_id) "
                "REFERENCES tenants(id) ON DELETE CASCADE",
                "ALTER TABLE memory_events ADD CONSTRAINT memory_events_bucket_id_fk FOREIGN KEY (bucket_id) "
                "REFERENCES buckets(id) ON DELETE CASCADE",
                "ALTER TABLE memory_event_trims ADD CONSTRAINT memory_event_trims_bucket_id_fk FOREIGN KEY (bucket_id) "
                "REFERENCES buckets(id) ON DELETE CASCADE",
            ],
            reverse_sql=[
                "ALTER TABLE memory_events DROP CONSTRAINT memory_events_tenant_id_fk",
                "ALTER TABLE memory_events DROP CONSTRAINT memory_events_bucket_id_fk",
                "ALTER TABLE memory_event_trims DROP CONSTRAINT memory_event_trims_bucket_id_fk",
            ],
        ),
    ]
