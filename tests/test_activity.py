"""Requests before background work (engram_site/activity.py): the web side marks itself busy,
the worker waits for a pause before a task, and ./engram serve lowers the worker's priority."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from django.test import override_settings

from engram_site import activity, serve
from engram_site.celery import _requests_first


@pytest.fixture(autouse=True)
def _empty_directory(settings, tmp_path):
    settings.ENGRAM_HOME = tmp_path
    settings.ENGRAM_WORKER_YIELD_SECONDS = 10  # the pause on: the web side marks its requests
    yield
    activity.clear()


def _quiet_after_grace():
    time.sleep(activity.GRACE_SECONDS + 0.05)


def test_a_request_in_flight_marks_its_process_and_the_mark_goes_when_it_ends():
    seen = {}

    def view(request):
        seen["marker"] = (activity.directory() / str(os.getpid())).exists()
        seen["active"] = activity.requests_active()
        return "response"

    middleware = activity.RequestActivityMiddleware(view)
    assert middleware(object()) == "response"
    assert seen == {"marker": True, "active": True}
    assert not (activity.directory() / str(os.getpid())).exists()
    # Just ended: still counts for the grace period, then no longer.
    assert activity.requests_active()
    _quiet_after_grace()
    assert not activity.requests_active()


def test_overlapping_requests_keep_the_mark_until_the_last_one_ends():
    release = threading.Event()
    inside = threading.Barrier(3)

    def slow_view(request):
        inside.wait()
        release.wait(5)
        return "ok"

    middleware = activity.RequestActivityMiddleware(slow_view)
    threads = [threading.Thread(target=middleware, args=(object(),)) for _ in range(2)]
    for thread in threads:
        thread.start()
    inside.wait()
    marker = activity.directory() / str(os.getpid())
    assert marker.exists()
    release.set()
    for thread in threads:
        thread.join()
    assert not marker.exists()


def test_a_failing_view_still_clears_the_mark():
    def broken(request):
        raise ValueError("boom")

    with pytest.raises(ValueError):
        activity.RequestActivityMiddleware(broken)(object())
    assert not (activity.directory() / str(os.getpid())).exists()


def test_with_the_pause_off_the_middleware_is_dropped_and_requests_touch_no_file(settings):
    from django.core.exceptions import MiddlewareNotUsed

    settings.ENGRAM_WORKER_YIELD_SECONDS = 0
    with pytest.raises(MiddlewareNotUsed):
        activity.RequestActivityMiddleware(lambda request: "response")


def test_no_web_server_means_no_wait():
    assert not activity.requests_active()
    assert activity.wait_for_quiet(5) < 0.5


def test_the_worker_waits_while_a_request_is_in_flight_and_starts_when_it_ends():
    activity.directory().mkdir(parents=True)
    marker = activity.directory() / str(os.getpid())  # a live process serving a long request
    marker.touch()
    threading.Timer(0.6, marker.unlink).start()
    waited = activity.wait_for_quiet(10)
    assert 0.6 <= waited < 3


def test_the_wait_is_bounded_under_unbroken_load():
    activity.directory().mkdir(parents=True)
    (activity.directory() / str(os.getpid())).touch()
    started = time.monotonic()
    waited = activity.wait_for_quiet(0.4)
    assert waited >= 0.4
    assert time.monotonic() - started < 2
    with override_settings(ENGRAM_WORKER_YIELD_SECONDS=0):
        assert activity.wait_for_quiet() == 0.0


def test_a_mark_left_by_a_dead_process_is_removed_not_waited_on():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    activity.directory().mkdir(parents=True)
    stale = activity.directory() / str(dead.pid)
    stale.touch()
    _quiet_after_grace()
    assert not activity.requests_active()
    assert not stale.exists()


class _Request:
    def __init__(self, eager):
        self.is_eager = eager


class _Task:
    def __init__(self, eager):
        self.request = _Request(eager)


@override_settings(ENGRAM_WORKER_YIELD_SECONDS=0.5)
def test_a_worker_task_waits_before_it_runs_but_an_eager_one_does_not():
    activity.directory().mkdir(parents=True)
    (activity.directory() / str(os.getpid())).touch()
    started = time.monotonic()
    _requests_first(task=_Task(eager=True))
    assert time.monotonic() - started < 0.3
    started = time.monotonic()
    _requests_first(task=_Task(eager=False))
    assert time.monotonic() - started >= 0.5


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
@pytest.mark.parametrize(("value", "nice", "idle"), [("10", 10, False), ("idle", 19, True)])
def test_serve_starts_the_worker_at_the_configured_priority(settings, value, nice, idle):
    settings.ENGRAM_WORKER_NICE = nice
    settings.ENGRAM_WORKER_IDLE = idle
    child = subprocess.Popen(["sleep", "30"], preexec_fn=serve._lower_priority)
    try:
        assert os.getpriority(os.PRIO_PROCESS, child.pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + nice)
        policy = os.sched_getscheduler(child.pid)
        assert policy == (os.SCHED_IDLE if idle else os.SCHED_OTHER)
    finally:
        child.kill()
        child.wait()


def test_an_unknown_worker_priority_is_refused():
    env = {**os.environ, "ENGRAM_WORKER_NICE": "lowest", "DJANGO_SETTINGS_MODULE": "engram_site.settings"}
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "ENGRAM_WORKER_NICE must be 0 to 19 or idle" in done.stderr
