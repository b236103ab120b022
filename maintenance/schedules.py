"""The default beat schedules (django-celery-beat's DatabaseScheduler).

Migrations 0002-0008 and 0010 each create the rows they add from a frozen copy (a new default
schedule needs a new migration; tests/platform/test_migrations_frozen.py checks that they add up to
this list); ``ensure_default_schedules`` re-adds missing ones. Both only add schedules that
are missing (matched by name), so an operator's edits in the admin — another interval, a
disabled task — survive upgrades and re-runs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DefaultSchedule:
    name: str
    task: str
    description: str
    every_seconds: int | None = None
    # "minute hour day_of_month month_of_year day_of_week", UTC
    crontab: str | None = None
    # A run that waited longer than this in the queue is dropped: the next one is due anyway.
    expire_seconds: int | None = None


DEFAULT_SCHEDULES = [
    DefaultSchedule(
        name="engram: enrichment sweep",
        task="maintenance.enrichment_sweep",
        description="Fill embeddings, lemmas and context vectors that are missing (model was down, hint lost).",
        every_seconds=60,
        expire_seconds=60,
    ),
    DefaultSchedule(
        name="engram: classify",
        task="maintenance.classify",
        description="Classify scope and topic of memories that have none (tenants with classification on).",
        every_seconds=300,
        expire_seconds=300,
    ),
    DefaultSchedule(
        name="engram: scan near-duplicates",
        task="maintenance.scan_near_duplicates",
        description="Find pairs of memories above the similarity threshold; store them for review.",
        crontab="7 * * * *",
        expire_seconds=3600,
    ),
    DefaultSchedule(
        name="engram: scan contradictions",
        task="maintenance.scan_conflicts",
        description="Find pairs of memories that likely contradict each other; store them for review.",
        crontab="27 * * * *",
        expire_seconds=3600,
    ),
    DefaultSchedule(
        name="engram: link memories",
        task="maintenance.link_memories",
        description="Record refines / cites links between memories, and run the graph's supersession pass.",
        crontab="37 * * * *",
        expire_seconds=3600,
    ),
    DefaultSchedule(
        name="engram: graph extraction sweep",
        task="graph.extract_pending",
        description="Extract entities and facts from memories the knowledge graph has not seen yet.",
        every_seconds=120,
        expire_seconds=120,
    ),
    DefaultSchedule(
        name="engram: sources sweep",
        task="sources.sweep",
        description="Distil documents and conversations a lost hint, a dead worker or a failure left unfinished.",
        every_seconds=60,
        expire_seconds=60,
    ),
    DefaultSchedule(
        name="engram: apply access times",
        task="maintenance.apply_access_times",
        description="Copy when searches returned memories into memories.last_accessed_at, off the search path.",
        every_seconds=300,
        expire_seconds=300,
    ),
    DefaultSchedule(
        name="engram: purge memories",
        task="maintenance.purge_memories",
        description="Delete for good the memories deleted, or expired, longer ago than their bucket's retention days.",
        crontab="52 * * * *",
        expire_seconds=3600,
    ),
    DefaultSchedule(
        name="engram: memory events",
        task="maintenance.memory_events",
        description="Record expired events in the change feed; delete events older than ENGRAM_EVENTS_RETENTION_DAYS.",
        every_seconds=300,
        expire_seconds=300,
    ),
    DefaultSchedule(
        name="engram: webhook deliveries",
        task="webhooks.deliver",
        description="Turn new change-feed events into webhook deliveries, send those due, retry failed ones.",
        every_seconds=10,
        expire_seconds=10,
    ),
    DefaultSchedule(
        name="engram: reindex HNSW",
        task="maintenance.reindex_hnsw",
        description="REINDEX CONCURRENTLY the embedding indexes (HNSW quality drifts as rows are added).",
        crontab="17 3 * * *",
        expire_seconds=6 * 3600,
    ),
    DefaultSchedule(
        name="engram: learn ranking",
        task="maintenance.learn_ranking",
        description=(
            "Learn the fusion weights of buckets with enough search feedback; "
            "adopt them only where they beat the defaults on held-back ratings."
        ),
        crontab="23 2 * * *",
        expire_seconds=6 * 3600,
    ),
    DefaultSchedule(
        name="engram: prune job runs",
        task="maintenance.prune_job_runs",
        description="Delete job runs older than ENGRAM_JOB_RETENTION_DAYS.",
        crontab="47 4 * * *",
        expire_seconds=6 * 3600,
    ),
]


def ensure_default_schedules(apps=None) -> list[str]:
    """Create the default periodic tasks that do not exist yet; returns the names created.

    ``apps`` is a migration's app registry, or None for the live models.
    """
    if apps is None:
        from django.apps import apps
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTasks = apps.get_model("django_celery_beat", "PeriodicTasks")
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    CrontabSchedule = apps.get_model("django_celery_beat", "CrontabSchedule")
    from django.utils import timezone

    created = []
    for schedule in DEFAULT_SCHEDULES:
        if PeriodicTask.objects.filter(name=schedule.name).exists():
            continue
        fields = {"interval": None, "crontab": None}
        if schedule.every_seconds:
            fields["interval"], _ = IntervalSchedule.objects.get_or_create(
                every=schedule.every_seconds, period="seconds"
            )
        else:
            minute, hour, day_of_month, month_of_year, day_of_week = schedule.crontab.split()
            fields["crontab"], _ = CrontabSchedule.objects.get_or_create(
                minute=minute,
                hour=hour,
                day_of_month=day_of_month,
                month_of_year=month_of_year,
                day_of_week=day_of_week,
                timezone="UTC",
            )
        PeriodicTask.objects.create(
            name=schedule.name,
            task=schedule.task,
            description=schedule.description,
            expire_seconds=schedule.expire_seconds,
            enabled=True,
            **fields,
        )
        created.append(schedule.name)
    if created:
        # Tell running beat schedulers to reload (the model's save signal does not fire
        # for a migration's historical models).
        PeriodicTasks.objects.update_or_create(ident=1, defaults={"last_update": timezone.now()})
    return created
