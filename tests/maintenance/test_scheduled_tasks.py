"""Every task beat runs, and every job command, run once against the real database with some
of everything in it (issue 46, item 6: the access-times job failed on every run for a wrong
import, and nothing ran its body)."""

from __future__ import annotations

import io
import json
import uuid

import pytest
from django.core.management import call_command, get_commands, load_command_class

from engram_site.jobs.command import JobCommand
from engram_site.models import JobRun, JobStatus
from maintenance.schedules import DEFAULT_SCHEDULES
from memories import access
from memories.models import Memory, MemoryAccess
from memories.services import MemoryInput, memories_ingest
from memories.services.edits import memory_delete
from tests.support import free_port
from webhooks.models import WebhookSubscription

pytestmark = pytest.mark.django_db


@pytest.fixture
def some_of_everything(bucket, settings):
    """Memories (one deleted, so there is something to purge one day), access times waiting to
    be applied, and a webhook subscription whose receiver is down."""
    settings.ENGRAM_WEBHOOKS_ALLOW_PRIVATE = True
    settings.ENGRAM_WEBHOOKS_TIMEOUT = 1.0
    items = [
        MemoryInput(content="Ana moved to Porto in March."),
        MemoryInput(content="The team meets on Thursdays at ten."),
        MemoryInput(content="Bruno prefers tea to coffee."),
    ]
    ids = [r.id for r in memories_ingest(bucket=bucket, items=items)]
    memory_delete(memory=Memory.objects.get(pk=ids[2]))
    access.record([uuid.UUID(str(ids[0]))])
    access.flush()
    assert MemoryAccess.objects.count() == 1
    WebhookSubscription.objects.create(
        tenant=bucket.tenant, url=f"http://127.0.0.1:{free_port()}/down", secret="whsec_test"
    )
    return ids


def _task(name: str):
    from engram_site.celery import app

    app.loader.import_default_modules()
    return app.tasks[name]


# Outside a test transaction, as a worker runs them (REINDEX CONCURRENTLY refuses one).
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("schedule", DEFAULT_SCHEDULES, ids=lambda s: s.task)
def test_every_scheduled_task_body_runs_once_and_succeeds(some_of_everything, schedule):
    result = _task(schedule.task)()  # the body, in this process, as a worker would run it
    if isinstance(result, dict) and "status" in result:
        assert result["status"] == JobStatus.SUCCEEDED, result
    assert not JobRun.objects.filter(status=JobStatus.FAILED).exists()


def test_the_access_times_job_applies_what_searches_recorded(some_of_everything):
    first = some_of_everything[0]
    result = _task("maintenance.apply_access_times")()
    assert result["status"] == JobStatus.SUCCEEDED and result["counts"]["applied"] == 1
    assert Memory.objects.get(pk=first).last_accessed_at is not None
    assert not MemoryAccess.objects.exists()


def _job_commands() -> list[str]:
    """The commands that hand a service to JobCommand.handle (loading every command on the way,
    so a command module with a wrong import fails here too)."""
    names = []
    for name, app in sorted(get_commands().items()):
        command = load_command_class(app, name)
        if isinstance(command, JobCommand) and type(command).job is not JobCommand.job:
            names.append(name)
    return names


@pytest.mark.parametrize("name", _job_commands())
def test_every_job_command_names_a_service_that_exists(name):
    command = load_command_class(get_commands()[name], name)
    options = vars(command.create_parser("manage.py", name).parse_args([]))
    fn, kwargs = command.job(**options)
    assert callable(fn) and isinstance(kwargs, dict)


def test_the_access_times_command_applies_them(some_of_everything):
    out = io.StringIO()
    call_command("apply_access_times", "--no-progress", stdout=out)
    assert json.loads(out.getvalue())["status"] == JobStatus.SUCCEEDED
    assert not MemoryAccess.objects.exists()
