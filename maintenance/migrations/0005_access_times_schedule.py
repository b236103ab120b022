from django.db import migrations


def forwards(apps, schema_editor):
    # Adds the schedules that are missing (here: applying access times); edits kept.
    from maintenance.schedules import ensure_default_schedules

    ensure_default_schedules(apps)


def backwards(apps, schema_editor):
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTask.objects.filter(name="engram: apply access times").delete()


class Migration(migrations.Migration):
    dependencies = [("maintenance", "0004_sources_schedule")]

    operations = [migrations.RunPython(forwards, backwards)]
