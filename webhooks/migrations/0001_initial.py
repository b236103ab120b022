"""Webhook subscriptions, deliveries and attempts. Deleting a tenant deletes its subscriptions,
a subscription its deliveries, a delivery its attempts: in the database (one statement each)."""

import django.contrib.postgres.fields
import django.contrib.postgres.functions
import django.db.models.deletion
from django.db import migrations, models

import engram_site.db


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("tenants", "0004_bucket_names_unique_regardless_of_case"),
    ]

    operations = [
        migrations.CreateModel(
            name="WebhookSubscription",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        db_default=django.contrib.postgres.functions.RandomUUID(),
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("url", models.URLField(max_length=2000)),
                (
                    "events",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(max_length=20), blank=True, default=list, size=None
                    ),
                ),
                ("description", models.CharField(blank=True, default="", max_length=200)),
                ("secret", models.CharField(editable=False, max_length=100)),
                ("is_active", models.BooleanField(default=True)),
                ("created_at", models.DateTimeField(db_default=engram_site.db.TransactionNow())),
                ("cursor_xid", models.BigIntegerField(default=0, editable=False)),
                ("cursor_id", models.BigIntegerField(default=0, editable=False)),
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
                "db_table": "webhook_subscriptions",
            },
        ),
        migrations.CreateModel(
            name="WebhookDelivery",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("event_id", models.BigIntegerField()),
                ("event_kind", models.CharField(max_length=20)),
                (
                    "status",
                    models.CharField(
                        choices=[("pending", "pending"), ("delivered", "delivered"), ("failed", "failed")],
                        default="pending",
                        max_length=20,
                    ),
                ),
                ("attempts", models.IntegerField(default=0)),
                ("next_attempt_at", models.DateTimeField(blank=True, null=True)),
                ("last_status_code", models.IntegerField(blank=True, null=True)),
                ("last_error", models.TextField(blank=True, default="")),
                ("created_at", models.DateTimeField(db_default=engram_site.db.TransactionNow())),
                ("delivered_at", models.DateTimeField(blank=True, null=True)),
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
                (
                    "subscription",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="deliveries",
                        to="webhooks.webhooksubscription",
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "webhook deliveries",
                "db_table": "webhook_deliveries",
            },
        ),
        migrations.CreateModel(
            name="WebhookAttempt",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("number", models.IntegerField()),
                ("at", models.DateTimeField()),
                ("status_code", models.IntegerField(blank=True, null=True)),
                ("error", models.TextField(blank=True, default="")),
                ("duration_ms", models.IntegerField()),
                (
                    "delivery",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="attempt_rows",
                        to="webhooks.webhookdelivery",
                    ),
                ),
            ],
            options={
                "db_table": "webhook_attempts",
                "indexes": [models.Index(fields=["delivery", "id"], name="idx_webhook_attempts_delivery")],
            },
        ),
        migrations.AddIndex(
            model_name="webhooksubscription",
            index=models.Index(fields=["tenant", "created_at"], name="idx_webhook_subs_tenant"),
        ),
        migrations.AddIndex(
            model_name="webhookdelivery",
            index=models.Index(
                condition=models.Q(("status", "pending")), fields=["next_attempt_at"], name="idx_webhook_deliveries_due"
            ),
        ),
        migrations.AddIndex(
            model_name="webhookdelivery",
            index=models.Index(fields=["subscription", "-id"], name="idx_webhook_deliveries_sub"),
        ),
        migrations.AddIndex(
            model_name="webhookdelivery",
            index=models.Index(fields=["created_at"], name="idx_webhook_deliveries_created"),
        ),
        migrations.AddConstraint(
            model_name="webhookdelivery",
            constraint=models.UniqueConstraint(
                fields=("subscription", "event_id"), name="webhook_deliveries_unique_event"
            ),
        ),
        migrations.RunSQL(
            sql=[
                "ALTER TABLE webhook_subscriptions ADD CONSTRAINT webhook_subscriptions_tenant_id_fk "
                "FOREIGN KEY (tenant_id) REFERENCES tenants(id) ON DELETE CASCADE",
                "ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_subscription_id_fk "
                "FOREIGN KEY (subscription_id) REFERENCES webhook_subscriptions(id) ON DELETE CASCADE",
                "ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_tenant_id_fk "
                "FOREIGN KEY (tenant_id) REFERENCES tenants(id) ON DELETE CASCADE",
                "ALTER TABLE webhook_attempts ADD CONSTRAINT webhook_attempts_delivery_id_fk "
                "FOREIGN KEY (delivery_id) REFERENCES webhook_deliveries(id) ON DELETE CASCADE",
            ],
            reverse_sql=[
                "ALTER TABLE webhook_attempts DROP CONSTRAINT webhook_attempts_delivery_id_fk",
                "ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_tenant_id_fk",
                "ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_subscription_id_fk",
                "ALTER TABLE webhook_subscriptions DROP CONSTRAINT webhook_subscriptions_tenant_id_fk",
            ],
        ),
    ]
