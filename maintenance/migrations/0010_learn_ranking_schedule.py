"""The nightly learning of each bucket's ranking from its feedback (memories.services.ranking_learning).
Re-runnable: added only when missing by name."""

from django.db import migrations
from django.utils import timezone

# (name, task, description, every_seconds, crontab "minute hour day month weekday" UTC,
# expire_seconds): the row as this migration adds it, frozen here so that what it does never
# changes with maintenance/schedules.py (which keeps the list for tests and docs).
SCHEDULES = [
    (
        "engram: learn ranking",
        "maintenance.learn_ranking",
        (
            "Learn the fusion weights of buckets with enough search feedback; "
            "adopt them only where they beat the defaults on held-back ratings."
        ),
        None,
        "23 2 * * *",
        6 * 3600,
    ),
]


def add_missing(apps, schedules) -> None:
    """Create the schedules not yet present by name; an operator's edit of one is kept."""
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTasks = apps.get_model("django_celery_beat", "PeriodicTasks")
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    CrontabSchedule = apps.get_model("django_celery_beat", "CrontabSchedule")
    created = False
    for name, task, description, every_seconds, crontab, expire_seconds in schedules:
        if PeriodicTask.objects.filter(name=name).exists():
            continue
        fields = {"interval": None, "crontab": None}
        if every_seconds:
            fields["interval"], _ = IntervalSchedule.objects.get_or_create(every=every_seconds, period="seconds")
        else:
            minute, hour, day_of_month, month_of_year, day_of_week = crontab.split()
            fields["crontab"], _ = CrontabSchedule.objects.get_or_create(
                minute=minute,
                hour=hour,
                day_of_month=day_of_month,
                month_of_year=month_of_year,
                day_of_week=day_of_week,
                timezone="UTC",
            )
        PeriodicTask.objects.create(
            name=name, task=task, description=description, expire_seconds=expire_seconds, enabled=True, **fields
        )
        created = True
    if created:
        # Tell running beat schedulers to reload (the model's save signal does not fire for
        # a migration's historical models).
        PeriodicTasks.objects.update_or_create(ident=1, defaults={"last_update": timezone.now()})


def forwards(apps, schema_editor):
    add_missing(apps, SCHEDULES)


def backwards(apps, schema_editor):
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTask.objects.filter(name__in=[schedule[0] for schedule in SCHEDULES]).delete()


class Migration(migrations.Migration):
    dependencies = [("maintenance", "0009_job_runs_moved")]

    operations = [migrations.RunPython(forwards, backwards)]
