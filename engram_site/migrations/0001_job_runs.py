"""Job runs move from the maintenance app to the platform's, with the job runner.

State only: the table (``maintenance_job_runs``), its rows and its indexes stay as they are;
maintenance's 0009 drops the model from its own state. The content type is renamed rather than
recreated, so the permissions operators were given on job runs, and the admin's history of
them, follow the model. Reversible: backwards renames the content type back.
"""

from django.db import migrations, models


def _relabel(apps, schema_editor, *, old: str, new: str) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    rows = content_type.objects.using(schema_editor.connection.alias)
    # A content type already under the new label (made by a migrate after a partial reversal)
    # keeps its own permissions: the old one is left alone rather than merged into it.
    if not rows.filter(app_label=new, model="jobrun").exists():
        rows.filter(app_label=old, model="jobrun").update(app_label=new)
    content_type.objects.clear_cache()


def forwards(apps, schema_editor):
    _relabel(apps, schema_editor, old="maintenance", new="engram_site")


def backwards(apps, schema_editor):
    _relabel(apps, schema_editor, old="engram_site", new="maintenance")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("maintenance", "0008_events_schedules"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="JobRun",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("name", models.CharField(max_length=100)),
                        (
                            "trigger",
                            models.CharField(
                                choices=[("task", "task (worker)"), ("command", "management command")],
                                default="task",
                                max_length=20,
                            ),
                        ),
                        (
                            "status",
                            models.CharField(
                                choices=[("running", "running"), ("succeeded", "succeeded"), ("failed", "failed")],
                                default="running",
                                max_length=20,
                            ),
                        ),
                        ("started_at", models.DateTimeField()),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                        ("heartbeat_at", models.DateTimeField(blank=True, null=True)),
                        ("progress", models.FloatField(blank=True, null=True)),
                        ("counts", models.JSONField(blank=True, default=dict)),
                        ("error", models.TextField(blank=True, default="")),
                        ("host", models.CharField(blank=True, default="", max_length=255)),
                        ("pid", models.IntegerField(blank=True, null=True)),
                    ],
                    options={
                        "db_table": "maintenance_job_runs",
                        "ordering": ["-started_at"],
                        "indexes": [
                            # The admin list and "last runs of a job": ORDER BY started_at DESC, by name.
                            models.Index(fields=["name", "-started_at"], name="jobruns_name_started"),
                            models.Index(fields=["-started_at"], name="jobruns_started"),
                            # Reaping runs whose process died: WHERE status = 'running'.
                            models.Index(
                                condition=models.Q(("status", "running")), fields=["started_at"], name="jobruns_running"
                            ),
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(forwards, backwards),
    ]
