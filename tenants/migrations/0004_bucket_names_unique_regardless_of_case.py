"""Bucket names become unique regardless of case within a tenant.

Before this, "Team" and "team" could both exist. The unique index cannot be built over such
pairs, so first every clashing name but the oldest bucket's is renamed with a suffix that is
free in the tenant ("team (2)", "team (3)", ...), and each rename is written to the audit log
(actor: system, "migration tenants.0004"). Ids, tokens and memories are untouched: the API
addresses buckets by id. Re-runnable: with no clash left it changes nothing.
"""

from django.db import migrations, models
from django.db.models.functions import Lower

NAME_MAX = 200
ACTOR = "migration tenants.0004"


def _free_name(Bucket, tenant_id, name: str) -> str:
    taken = Bucket.objects.filter(tenant_id=tenant_id).alias(key=Lower("name"))
    n = 2
    while True:
        suffix = f" ({n})"
        candidate = name[: NAME_MAX - len(suffix)] + suffix
        if not taken.filter(key=Lower(models.Value(candidate))).exists():
            return candidate
        n += 1


def rename_clashing_names(apps, schema_editor):
    Bucket = apps.get_model("tenants", "Bucket")
    AuditEvent = apps.get_model("audit", "AuditEvent")
    clashes = (
        Bucket.objects.annotate(key=Lower("name"))
        .values("tenant_id", "key")
        .annotate(n=models.Count("id"))
        .filter(n__gt=1)
        .order_by("tenant_id", "key")
    )
    for clash in clashes:
        same = (
            Bucket.objects.filter(tenant_id=clash["tenant_id"])
            .alias(key=Lower("name"))
            .filter(key=clash["key"])
            .order_by("created_at", "id")
        )
        for bucket in list(same)[1:]:  # the oldest keeps its name
            previous = bucket.name
            bucket.name = _free_name(Bucket, bucket.tenant_id, previous)
            bucket.save(update_fields=["name"])
            AuditEvent.objects.create(
                actor_kind="system", actor_label=ACTOR, tenant_id=bucket.tenant_id, action="bucket.update",
                object_type="bucket", object_ids=[str(bucket.pk)], object_count=1,
                details={"fields": ["name"], "name": bucket.name, "previous_name": previous,
                         "reason": "bucket names are unique regardless of case"},
            )  # fmt: skip
            print(f"\n  bucket {bucket.pk}: renamed {previous!r} to {bucket.name!r} (its name differed only in case)")


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0003_bucket_retention_days"),
        ("audit", "0001_initial"),
    ]

    operations = [
        # The names keep what the renames gave them when migrating backwards.
        migrations.RunPython(rename_clashing_names, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="bucket",
            constraint=models.UniqueConstraint(
                models.F("tenant"),
                Lower("name"),
                name="buckets_tenant_name_ci_unique",
            ),
        ),
        migrations.RemoveConstraint(model_name="bucket", name="buckets_tenant_name_unique"),
    ]
