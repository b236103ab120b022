"""The default beat schedules (maintenance/schedules.py). Re-runnable: only missing
schedules are added, so operators' edits in the admin are kept."""

from django.db import migrations


def forwards(apps, schema_editor):
    from maintenance.schedules import ensure_default_schedules

    ensure_default_schedules(apps)


def backwards(apps, schema_editor):
    from maintenance.schedules import DEFAULT_SCHEDULES

    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTask.objects.filter(name__in=[s.name for s in DEFAULT_SCHEDULES]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("maintenance", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
