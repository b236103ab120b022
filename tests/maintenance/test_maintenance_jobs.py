"""Job runs, the beat schedule, the enrichment commands and the write hook."""

from __future__ import annotations

import io
import json
import os
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from engram_site import locks
from engram_site.jobs import runner
from engram_site.models import JobRun, JobStatus
from maintenance.schedules import DEFAULT_SCHEDULES, ensure_default_schedules
from memories import hooks
from memories.models import PENDING_ENRICHMENT, Memory
from memories.tasks import enqueue_enrichment
from tests.factories import write

pytestmark = pytest.mark.django_db


# --- the beat schedule -----------------------------------------------------------------------------


def test_default_schedules_exist_after_migrate():
    tasks = {t.name: t for t in PeriodicTask.objects.all()}
    for schedule in DEFAULT_SCHEDULES:
        task = tasks[schedule.name]
        assert task.task == schedule.task and task.enabled
    assert tasks["engram: enrichment sweep"].interval.every == 60
    assert tasks["engram: classify"].interval.every == 300
    assert (tasks["engram: reindex HNSW"].crontab.minute, tasks["engram: reindex HNSW"].crontab.hour) == ("17", "3")
    for hourly in ("engram: scan near-duplicates", "engram: link memories"):
        assert tasks[hourly].crontab.hour == "*"


def test_every_scheduled_task_is_registered():
    from engram_site.celery import app

    app.loader.import_default_modules()
    assert {s.task for s in DEFAULT_SCHEDULES} <= set(app.tasks)


def test_ensuring_schedules_again_keeps_operator_edits():
    task = PeriodicTask.objects.get(name="engram: classify")
    task.enabled = False
    task.save()
    PeriodicTask.objects.filter(name="engram: link memories").delete()
    assert ensure_default_schedules() == ["engram: link memories"]
    assert not PeriodicTask.objects.get(name="engram: classify").enabled
    assert PeriodicTask.objects.filter(name__startswith="engram: ").count() == len(DEFAULT_SCHEDULES)


def test_schedules_are_listed_and_editable_in_the_admin(admin_client):
    response = admin_client.get("/admin/django_celery_beat/periodictask/")
    assert response.status_code == 200
    page = response.content.decode()
    for schedule in DEFAULT_SCHEDULES:
        assert schedule.name in page
    task = PeriodicTask.objects.get(name="engram: enrichment sweep")
    assert admin_client.get(f"/admin/django_celery_beat/periodictask/{task.pk}/change/").status_code == 200


# --- job runs --------------------------------------------------------------------------------------


def test_a_successful_run_is_recorded_with_counts_and_progress():
    def job(*, recorder):
        recorder.set_total(4)
        for _ in range(4):
            recorder.advance()
        recorder.add(done=4)

    outcome = runner.run_job("unit_job", job)
    run = JobRun.objects.get(pk=outcome.run_id)
    assert (run.status, run.counts, run.progress) == (JobStatus.SUCCEEDED, {"done": 4}, 1.0)
    assert run.finished_at >= run.started_at and run.pid == os.getpid() and run.host


def test_a_crashing_job_is_recorded_as_failed_and_visible_in_the_admin(admin_client):
    def job(*, recorder):
        recorder.add(before_crash=1)
        raise ValueError("the disk is on fire")

    with pytest.raises(ValueError):
        runner.run_job("crashy_job", job)
    run = JobRun.objects.get(name="crashy_job")
    assert run.status == JobStatus.FAILED and "the disk is on fire" in run.error
    assert run.counts == {"before_crash": 1}
    response = admin_client.get("/admin/engram_site/jobrun/?status__exact=failed")
    assert list(response.context["cl"].result_list) == [run]
    assert "the disk is on fire" in response.content.decode()  # the error shows in the list itself
    response = admin_client.get("/admin/engram_site/jobrun/?status__exact=succeeded")
    assert run not in response.context["cl"].result_list
    assert admin_client.get(f"/admin/engram_site/jobrun/{run.pk}/change/").status_code == 200


def test_a_job_that_reports_failure_without_raising_is_failed():
    outcome = runner.run_job("half_job", lambda *, recorder: recorder.fail("3 rows could not be embedded"))
    assert outcome.status == JobStatus.FAILED
    assert JobRun.objects.get(pk=outcome.run_id).error == "3 rows could not be embedded"


def test_idle_runs_of_frequent_jobs_are_not_kept():
    outcome = runner.run_job("quiet_job", lambda *, recorder: None, keep_idle=False)
    assert outcome.status == JobStatus.SUCCEEDED and outcome.run_id is None
    assert not JobRun.objects.filter(name="quiet_job").exists()
    busy = runner.run_job("quiet_job", lambda *, recorder: recorder.add(rows=2), keep_idle=False)
    assert JobRun.objects.filter(pk=busy.run_id).exists()


def test_runs_of_dead_processes_are_closed_as_failed():
    dead = JobRun.objects.create(
        name="ghost", status=JobStatus.RUNNING, started_at=timezone.now(), host=runner.HOST, pid=2**22 + 12345
    )
    silent = JobRun.objects.create(
        name="silent", status=JobStatus.RUNNING, started_at=timezone.now() - timedelta(hours=3), host="elsewhere"
    )
    alive = JobRun.objects.create(
        name="alive", status=JobStatus.RUNNING, started_at=timezone.now(), host="elsewhere", pid=1
    )
    runner.run_job("next_job", lambda *, recorder: None)
    for run in (dead, silent, alive):
        run.refresh_from_db()
    assert dead.status == JobStatus.FAILED and "is gone" in dead.error
    assert silent.status == JobStatus.FAILED and "no progress" in silent.error
    assert alive.status == JobStatus.RUNNING


def test_a_locked_job_is_skipped_while_another_run_holds_the_lock():
    with locks.advisory_lock("lonely_job"):
        # Another session: the lock is per database session.
        from django.db import connections

        other = connections.create_connection("default")
        try:
            with other.cursor() as cur:
                cur.execute("SELECT pg_try_advisory_lock(%s)", [locks.lock_key("lonely_job")])
                assert cur.fetchone()[0] is False
        finally:
            other.close()
        outcome = runner.run_job("lonely_job", lambda *, recorder: None, lock=False)
        assert outcome.status == JobStatus.SUCCEEDED  # unlocked jobs do not care


def test_old_runs_are_pruned():
    old = JobRun.objects.create(name="old", status=JobStatus.SUCCEEDED, started_at=timezone.now() - timedelta(days=40))
    new = JobRun.objects.create(name="new", status=JobStatus.SUCCEEDED, started_at=timezone.now())
    assert runner.job_runs_prune(older_than=timedelta(days=30)) == 1
    assert not JobRun.objects.filter(pk=old.pk).exists() and JobRun.objects.filter(pk=new.pk).exists()


# --- embed_missing / lemmatize_missing -----------------------------------------------------------------


def test_embed_missing_fills_only_embeddings_with_a_progress_bar(bucket, settings, monkeypatch):
    from engram_site.providers import lemmatizer

    settings.ENGRAM_EMBEDDINGS_ENABLED = False
    monkeypatch.setattr(lemmatizer, "_load", lambda: (_ for _ in ()).throw(lemmatizer.LemmatizerUnavailable("x")))
    ids = write(bucket, *[f"Fact number {i} about the garden shed" for i in range(7)])
    monkeypatch.undo()
    settings.ENGRAM_EMBEDDINGS_ENABLED = True
    stdout, stderr = io.StringIO(), io.StringIO()
    call_command("embed_missing", "--batch-size", "3", stdout=stdout, stderr=stderr)
    rows = Memory.objects.filter(pk__in=ids)
    assert not rows.filter(embedding__isnull=True).exists()
    assert rows.filter(text_lemmatized__isnull=True).count() == 7  # lemmas are lemmatize_missing's job
    summary = json.loads(stdout.getvalue())
    assert summary["status"] == "succeeded" and summary["counts"]["embedded"] == 7
    assert "embed_missing [" in stderr.getvalue() and "7/7" in stderr.getvalue()
    run = JobRun.objects.get(name="embed_missing")
    assert (run.trigger, run.status, run.progress) == ("command", JobStatus.SUCCEEDED, 1.0)

    call_command("lemmatize_missing", stdout=io.StringIO(), stderr=io.StringIO())
    assert not rows.filter(PENDING_ENRICHMENT).exists()


def test_embed_missing_with_the_model_down_fails_visibly_and_loses_nothing(bucket, settings):
    settings.ENGRAM_EMBEDDINGS_ENABLED = False
    ids = write(bucket, "The boiler was serviced in May", "The chimney needs sweeping")
    with pytest.raises(CommandError, match="could not be enriched"):
        call_command("embed_missing", stdout=io.StringIO(), stderr=io.StringIO())
    assert JobRun.objects.get(name="embed_missing").status == JobStatus.FAILED
    assert Memory.objects.filter(pk__in=ids).count() == 2


def test_embed_missing_resumes_where_a_previous_run_stopped(bucket, settings):
    settings.ENGRAM_EMBEDDINGS_ENABLED = False
    ids = write(bucket, *[f"Resumable fact {i}" for i in range(6)])
    settings.ENGRAM_EMBEDDINGS_ENABLED = True
    from memories.services import memories_enrich_pending

    # A run that handled one batch and died: the NULLs are the cursor.
    assert memories_enrich_pending(batch_size=2, kind="embeddings").embedded == 2
    call_command("embed_missing", "--bucket", str(bucket.pk), stdout=(out := io.StringIO()), stderr=io.StringIO())
    assert json.loads(out.getvalue())["counts"]["embedded"] == 4
    assert not Memory.objects.filter(pk__in=ids, embedding__isnull=True).exists()


def test_commands_reject_an_unknown_bucket(db):
    with pytest.raises(CommandError, match="no bucket"):
        call_command("embed_missing", "--bucket", "not-a-uuid", stdout=io.StringIO(), stderr=io.StringIO())


# --- the write hook ------------------------------------------------------------------------------------


def test_a_write_enqueues_enrichment_and_follow_up_work_on_commit(
    bucket, settings, celery_eager, django_capture_on_commit_callbacks
):
    settings.ENGRAM_EMBEDDINGS_ENABLED = False
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        ids = write(bucket, "I prefer dark roast coffee in the morning.", "In the morning I prefer dark roast coffee.")
    assert Memory.objects.filter(pk__in=ids, embedding__isnull=True).count() == 2
    settings.ENGRAM_EMBEDDINGS_ENABLED = True
    for callback in callbacks:  # the commit happens: the chain runs (eagerly, here)
        callback()
    rows = Memory.objects.filter(pk__in=ids)
    assert not rows.filter(PENDING_ENRICHMENT).exists()
    assert set(rows.values_list("classified_scope", flat=True)) == {"general"}
    from maintenance.models import DuplicateCandidate

    assert DuplicateCandidate.objects.for_bucket(bucket).count() == 1


def test_a_broker_outage_never_fails_a_write_and_backs_off(
    bucket, tmp_path, caplog, django_capture_on_commit_callbacks
):
    from tests.support import use_broker

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the broker folder should be")
    hooks.reset_backoff()
    with use_broker("filesystem://", broker_dir=blocker / "broker"):
        with django_capture_on_commit_callbacks(execute=True):
            first = write(bucket, "Written while the broker is down")
        with django_capture_on_commit_callbacks(execute=True):
            second = write(bucket, "Also written while the broker is down")
    assert Memory.objects.filter(pk__in=first + second).count() == 2
    warnings = [r for r in caplog.records if r.name == "memories.hooks" and "could not queue" in r.getMessage()]
    assert len(warnings) == 1  # the second write did not even try: the sweep will catch up
    hooks.reset_backoff()


def test_the_hook_swallows_unexpected_errors(monkeypatch, caplog):
    from celery import canvas

    def explode(*args, **kwargs):
        raise RuntimeError("surprise")

    monkeypatch.setattr(canvas.Signature, "apply_async", explode)
    hooks.reset_backoff()
    enqueue_enrichment(bucket_id="b", memory_ids=["00000000-0000-0000-0000-000000000001"])
    hooks.after_enrichment(memory_ids=["00000000-0000-0000-0000-000000000001"])
    assert any("surprise" in r.getMessage() for r in caplog.records)
    hooks.reset_backoff()


def test_serve_starts_a_worker_with_beat_on_the_database_scheduler(settings):
    from engram_site.serve import _worker_command

    command = _worker_command()
    assert command[1:6] == ["-m", "celery", "-A", "engram_site", "worker"]
    assert "--beat" in command
    assert command[command.index("--scheduler") + 1] == "django_celery_beat.schedulers:DatabaseScheduler"
    assert command[command.index("--queues") + 1] == settings.CELERY_TASK_DEFAULT_QUEUE
    assert 1 <= int(command[command.index("--concurrency") + 1]) <= 2
