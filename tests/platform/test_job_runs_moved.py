"""Job runs moved from the maintenance app to the platform's (engram_site 0001, maintenance
0009): a state-only move. The rows stay in ``maintenance_job_runs``, and the content type is
relabelled, not recreated, so permissions granted on job runs follow the model, both ways."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from engram_site.models import JobRun, JobStatus

pytestmark = pytest.mark.django_db(transaction=True)

MOVE = (("engram_site", "0001_job_runs"), ("maintenance", "0009_job_runs_moved"))


def _apply(*, backwards: bool) -> MigrationExecutor:
    """Unapply (or apply again) the two migrations of the move, and only them: a plan given to
    the executor is run as it is, so later migrations of either app are left alone."""
    executor = MigrationExecutor(connection)
    nodes = [executor.loader.graph.nodes[key] for key in MOVE]
    plan = [(migration, True) for migration in reversed(nodes)] if backwards else [(m, False) for m in nodes]
    executor.migrate(None, plan=plan)
    ContentType.objects.clear_cache()
    return MigrationExecutor(connection)


def _state_has(executor: MigrationExecutor, app_label: str) -> bool:
    """Whether the state of the applied migrations, up to the move, has the model in
    ``app_label``. Later migrations that depend on the move (maintenance 0010 and on) stay
    applied while it is undone; a state built from them would pull the move back in."""
    later = {key for node in MOVE for key in executor.loader.graph.backwards_plan(node)} - set(MOVE)
    applied = [key for key in executor.loader.applied_migrations if key not in later]
    state = executor.loader.project_state(applied)
    return (app_label, "jobrun") in state.models


def test_the_move_keeps_rows_and_permissions_and_reverses():
    run = JobRun.objects.create(name="before_the_move", status=JobStatus.SUCCEEDED, started_at=timezone.now())
    content_type = ContentType.objects.get(app_label="engram_site", model="jobrun")
    reader = User.objects.create_user("reader")
    reader.user_permissions.add(Permission.objects.get(content_type=content_type, codename="view_jobrun"))

    try:
        executor = _apply(backwards=True)
        assert _state_has(executor, "maintenance") and not _state_has(executor, "engram_site")
        assert ContentType.objects.get(pk=content_type.pk).app_label == "maintenance"
        assert User.objects.get(pk=reader.pk).has_perm("maintenance.view_jobrun")
    finally:
        executor = _apply(backwards=False)

    assert _state_has(executor, "engram_site") and not _state_has(executor, "maintenance")
    assert ContentType.objects.get(pk=content_type.pk).app_label == "engram_site"
    assert User.objects.get(pk=reader.pk).has_perm("engram_site.view_jobrun")
    assert JobRun.objects.get(pk=run.pk).name == "before_the_move"
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM maintenance_job_runs WHERE id = %s", [run.pk])
        assert cur.fetchone()[0] == 1
