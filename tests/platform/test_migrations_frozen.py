"""Migrations carry their own data: no migration imports the apps' live code, and the schedule
migrations create exactly the default schedules, re-runnably and reversibly."""

from __future__ import annotations

import ast
import importlib

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django_celery_beat.models import PeriodicTask

from maintenance.schedules import DEFAULT_SCHEDULES
from tests.support import APPS, ROOT

# Referenced by Django's migration serializer from a field's db_default: the expression
# classes themselves, not code whose behaviour a migration depends on.
SERIALIZED_REFERENCES = {"engram_site.db", "memories.models"}
SCHEDULE_MIGRATIONS = (
    "0002_default_schedules",
    "0003_graph_schedule",
    "0004_sources_schedule",
    "0005_access_times_schedule",
    "0006_purge_schedule",
    "0007_conflicts",
    "0008_events_schedules",
    "0010_learn_ranking_schedule",
)


IMPORT_CALLS = {"import_module", "__import__"}


def imported_names(source: str) -> set[str]:
    """Every module (or module.attribute) a migration imports, anywhere in it; "." for a
    relative import."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.update(f"{node.module}.{alias.name}" if node.level == 0 else "." for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in IMPORT_CALLS:
            found.update(arg.value for arg in node.args[:1] if isinstance(arg, ast.Constant))
    return found


def is_allowed(name: str) -> bool:
    parts = name.split(".")
    if name == "." or parts[0] not in APPS:
        return name != "."  # Django, pgvector, the standard library
    if parts[1:2] == ["migrations"]:
        return True  # another migration (memories 0008 reuses 0007's SQL)
    return any(name == allowed or name.startswith(allowed + ".") for allowed in SERIALIZED_REFERENCES)


def forbidden_imports(source: str) -> set[str]:
    return {name for name in imported_names(source) if not is_allowed(name)}


def test_the_check_finds_app_code_imported_inside_a_function():
    source = "def forwards(apps, schema_editor):\n    from maintenance.schedules import ensure_default_schedules\n"
    assert forbidden_imports(source) == {"maintenance.schedules.ensure_default_schedules"}
    assert forbidden_imports("import memories.services\nimport importlib\nimportlib.import_module('graph.x')\n") == {
        "memories.services",
        "graph.x",
    }
    assert forbidden_imports("import engram_site.db\nfrom django.db import migrations\n") == set()


@pytest.mark.parametrize("path", sorted(p for app in APPS for p in (ROOT / app / "migrations").glob("0*.py")), ids=str)
def test_no_migration_imports_the_apps_live_code(path):
    assert forbidden_imports(path.read_text()) == set()


def schedule_migration(name: str):
    return importlib.import_module(f"maintenance.migrations.{name}")


def test_the_schedule_migrations_together_hold_the_default_schedules():
    frozen = [row for name in SCHEDULE_MIGRATIONS for row in schedule_migration(name).SCHEDULES]
    live = [(s.name, s.task, s.description, s.every_seconds, s.crontab, s.expire_seconds) for s in DEFAULT_SCHEDULES]
    assert sorted(frozen) == sorted(live)


@pytest.mark.django_db
def test_migrate_created_each_default_schedule_as_listed():
    for schedule in DEFAULT_SCHEDULES:
        task = PeriodicTask.objects.get(name=schedule.name)
        assert (task.task, task.description, task.expire_seconds, task.enabled) == (
            schedule.task,
            schedule.description,
            schedule.expire_seconds,
            True,
        )
        if schedule.every_seconds:
            assert (task.interval.every, task.interval.period, task.crontab) == (
                schedule.every_seconds,
                "seconds",
                None,
            )
        else:
            crontab = task.crontab
            fields = (crontab.minute, crontab.hour, crontab.day_of_month, crontab.month_of_year, crontab.day_of_week)
            assert (" ".join(fields), str(crontab.timezone), task.interval) == (schedule.crontab, "UTC", None)


@pytest.mark.django_db
def test_schedule_migrations_rerun_keep_edits_and_reverse_only_their_own_rows():
    apps = MigrationLoader(connection).project_state(("maintenance", SCHEDULE_MIGRATIONS[-1])).apps
    PeriodicTask.objects.filter(name="engram: classify").update(enabled=False)
    before = PeriodicTask.objects.count()
    for name in SCHEDULE_MIGRATIONS:
        schedule_migration(name).forwards(apps, None)
    assert PeriodicTask.objects.count() == before
    assert not PeriodicTask.objects.get(name="engram: classify").enabled

    graph = schedule_migration("0003_graph_schedule")
    graph.backwards(apps, None)
    assert not PeriodicTask.objects.filter(name="engram: graph extraction sweep").exists()
    assert PeriodicTask.objects.count() == before - 1
    graph.forwards(apps, None)
    assert PeriodicTask.objects.get(name="engram: graph extraction sweep").interval.every == 120

    schedule_migration("0002_default_schedules").backwards(apps, None)
    assert sorted(PeriodicTask.objects.filter(name__startswith="engram: ").values_list("name", flat=True)) == [
        "engram: apply access times",
        "engram: graph extraction sweep",
        "engram: learn ranking",
        "engram: memory events",
        "engram: purge memories",
        "engram: scan contradictions",
        "engram: sources sweep",
        "engram: webhook deliveries",
    ]
