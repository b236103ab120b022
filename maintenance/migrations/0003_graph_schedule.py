from django.db import migrations


def forwards(apps, schema_editor):
    # Adds the schedules that are missing (here: the graph extraction sweep); edits kept.
    from maintenance.schedules import ensure_default_schedules

    ensure_default_schedules(apps)


def backwards(apps, schema_editor):
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTask.objects.filter(name="engram: graph extraction sweep").delete()


class Migration(migrations.Migration):
    dependencies = [("maintenance", "0002_default_schedules")]

    operations = [migrations.RunPython(forwards, backwards)]
