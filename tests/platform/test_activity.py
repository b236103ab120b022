"""Requests before background work (engram_site/activity.py): the web side marks itself busy,
the worker waits for a pause before a task, and ./engram serve lowers the worker's priority."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from datetime import UTC, datetime

import pytest
from django.core.exceptions import MiddlewareNotUsed
from django.db import transaction
from django.test import override_settings

from engram_site import activity, serve
from engram_site.celery import _requests_first
from graph.services.extraction import graph_extract_memories, graph_rebuild
from maintenance.services.classification import memories_classify
from maintenance.services.conflicts import conflicts_find_for
from maintenance.services.duplicates import near_duplicates_find_for
from maintenance.services.links import links_find_for
from memories.services import MemoryInput, memories_ingest
from tests.support.clock import FakeClock
from tests.support.db import graph_snapshot


@pytest.fixture(autouse=True)
def _empty_directory(settings, tmp_path, monkeypatch):
    # The requests' folder of this test only. Not by moving ENGRAM_HOME: a connection opened
    # meanwhile would start a PostgreSQL of its own there (engram_site/embedded_backend).
    monkeypatch.setattr(activity, "directory", lambda: tmp_path / "run" / "requests")
    settings.ENGRAM_WORKER_YIELD_SECONDS = 10  # the pause on: the web side marks its requests
    activity.forget_owed_work()
    yield
    activity.clear()
    activity.forget_owed_work()


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    """activity's clock, moved by hand: its waits take no time and are recorded (``clock.slept``)."""
    fake = FakeClock()
    monkeypatch.setattr(activity, "time", fake)
    return fake


def _quiet_after_grace(clock):
    clock.sleep(activity.GRACE_SECONDS + 0.05)


def test_a_request_in_flight_marks_its_process_and_the_mark_goes_when_it_ends(clock):
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
    _quiet_after_grace(clock)
    assert not activity.requests_active()


def _request(method: str, path: str):
    from django.test import RequestFactory

    return RequestFactory().generic(method, path)


@pytest.mark.parametrize("yield_to_writes", [False, True])
def test_memory_writes_are_waited_for_only_when_configured_and_searches_always(settings, yield_to_writes):
    """A steady stream of writes held the worker at its wait limit's pace, so the work they queued
    fell behind for as long as they went on (bench/results/steady-ingest-*): by default the
    worker waits for searches and reads, not for memory writes."""
    settings.ENGRAM_WORKER_YIELD_TO_WRITES = yield_to_writes
    seen = []
    middleware = activity.RequestActivityMiddleware(lambda request: seen.append(activity.requests_active()))
    bucket = "00000000-0000-0000-0000-000000000001"
    activity.clear()
    middleware(_request("POST", f"/api/v1/buckets/{bucket}/memories"))
    assert not (activity.directory() / str(os.getpid())).exists()
    middleware(_request("GET", f"/api/v1/buckets/{bucket}/memories"))  # a list is a read
    middleware(_request("POST", f"/api/v1/buckets/{bucket}/search"))
    assert seen == [yield_to_writes, True, True]


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
    settings.ENGRAM_WORKER_YIELD_SECONDS = 0
    with pytest.raises(MiddlewareNotUsed):
        activity.RequestActivityMiddleware(lambda request: "response")


def test_no_web_server_means_no_wait(clock):
    assert not activity.requests_active()
    assert activity.wait_for_quiet(5) == 0.0
    assert clock.sleeps == []


def test_the_worker_waits_while_a_request_is_in_flight_and_starts_when_it_ends(clock):
    activity.directory().mkdir(parents=True)
    marker = activity.directory() / str(os.getpid())  # a live process serving a long request
    marker.touch()

    def request_ends():
        marker.unlink()
        now = clock.time()  # the folder changed at the clock's time, as the worker sees it
        os.utime(marker.parent, (now, now))

    clock.at(0.6, request_ends)  # 0.6 s into the wait
    waited = activity.wait_for_quiet(10)
    # Until it ended, and then the grace period: polled, far from the limit.
    ended = 0.6 + activity.GRACE_SECONDS
    assert ended - 1e-6 <= waited <= ended + 2 * activity.POLL_SECONDS
    assert waited == pytest.approx(clock.slept) and max(clock.sleeps) <= activity.POLL_SECONDS


def test_the_wait_is_bounded_under_unbroken_load(clock):
    activity.directory().mkdir(parents=True)
    (activity.directory() / str(os.getpid())).touch()
    waited = activity.wait_for_quiet(0.4)
    assert waited == pytest.approx(0.4) and clock.slept == pytest.approx(0.4)  # the limit, not more
    with override_settings(ENGRAM_WORKER_YIELD_SECONDS=0):
        assert activity.wait_for_quiet() == 0.0


def _unbroken_load():
    activity.directory().mkdir(parents=True, exist_ok=True)
    (activity.directory() / str(os.getpid())).touch()  # a request that never ends


def test_a_wait_that_ran_to_its_limit_is_followed_by_as_long_of_work_without_waiting(settings, clock):
    settings.ENGRAM_WORKER_YIELD_SHARE = 0.5
    _unbroken_load()
    assert activity.wait_for_quiet(0.4) == pytest.approx(0.4)
    slept = len(clock.sleeps)
    clock.sleep(0.35)  # work
    assert activity.wait_for_quiet(0.4) == 0.0  # still inside the owed turn: no wait, no polling
    assert len(clock.sleeps) == slept + 1
    clock.sleep(0.1)  # the owed 0.4 s are over
    assert activity.wait_for_quiet(0.4) == pytest.approx(0.4)


def test_under_unbroken_load_the_worker_waits_at_most_its_share_of_the_time(settings, clock):
    settings.ENGRAM_WORKER_YIELD_SHARE = 0.25
    _unbroken_load()
    started, waited = clock.monotonic(), 0.0
    while clock.monotonic() - started < 100:
        waited += activity.wait_for_quiet(2.0)
        clock.sleep(0.05)  # one task's work between two waits
    assert waited / (clock.monotonic() - started) == pytest.approx(0.25, abs=0.03)


def test_with_a_share_of_one_the_worker_waits_before_every_task(settings, clock):
    settings.ENGRAM_WORKER_YIELD_SHARE = 1.0
    _unbroken_load()
    for _ in range(3):
        assert activity.wait_for_quiet(0.4) == pytest.approx(0.4)


def test_a_wait_the_requests_ended_earns_no_turn_without_waiting(settings, clock):
    settings.ENGRAM_WORKER_YIELD_SHARE = 0.5
    marker = activity.directory() / str(os.getpid())
    _unbroken_load()
    clock.at(0.2, marker.unlink)  # the requests pause before the limit
    assert activity.wait_for_quiet(0.4) < 0.4
    _unbroken_load()
    assert activity.wait_for_quiet(0.4) == pytest.approx(0.4)  # waits again at once


@pytest.mark.slow
def test_a_mark_left_by_a_dead_process_is_removed_not_waited_on(clock):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    activity.directory().mkdir(parents=True)
    stale = activity.directory() / str(dead.pid)
    stale.touch()
    _quiet_after_grace(clock)
    assert not activity.requests_active()
    assert not stale.exists()


class _Request:
    def __init__(self, eager):
        self.is_eager = eager


class _Task:
    def __init__(self, eager):
        self.request = _Request(eager)


@override_settings(ENGRAM_WORKER_YIELD_SECONDS=0.5)
def test_a_worker_task_waits_before_it_runs_but_an_eager_one_does_not(clock):
    activity.directory().mkdir(parents=True)
    (activity.directory() / str(os.getpid())).touch()
    _requests_first(task=_Task(eager=True))
    assert clock.sleeps == []
    _requests_first(task=_Task(eager=False))
    assert clock.slept == pytest.approx(0.5)


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.parametrize("share", ["0", "1.5", "-1"])
def test_a_yield_share_outside_zero_to_one_is_refused(share):
    env = {**os.environ, "ENGRAM_WORKER_YIELD_SHARE": share, "DJANGO_SETTINGS_MODULE": "engram_site.settings"}
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "ENGRAM_WORKER_YIELD_SHARE must be above 0 and at most 1" in done.stderr


@pytest.mark.slow
def test_an_unknown_worker_priority_is_refused():
    env = {**os.environ, "ENGRAM_WORKER_NICE": "lowest", "DJANGO_SETTINGS_MODULE": "engram_site.settings"}
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "ENGRAM_WORKER_NICE must be 0 to 19 or idle" in done.stderr


# --- pause points inside long background tasks ---------------------------------------------------


@pytest.fixture
def background(monkeypatch):
    """This process as the worker's: its pause points are live (and no slice of work is running)."""
    monkeypatch.setattr(activity, "_background", True)
    monkeypatch.setattr(activity, "_slice_started", 0.0)


@pytest.fixture
def waits(monkeypatch):
    """Each wait a pause point asks for (instead of waiting)."""
    calls = []
    monkeypatch.setattr(activity, "wait_for_quiet", lambda limit=None: calls.append(limit) or 0.0)
    return calls


def test_a_web_process_never_pauses_and_does_its_work_in_one_go(waits):
    assert not activity.yielding()
    assert list(activity.turns(range(60))) == [list(range(60))]
    assert activity.pause() == 0.0
    assert waits == []


def test_a_worker_does_its_work_in_turns_with_a_pause_before_each(background, waits):
    assert activity.yielding()
    assert [len(turn) for turn in activity.turns(range(60), 25)] == [25, 25, 10]
    assert len(waits) == 3
    # With the pause off, a worker too goes in one go.
    with override_settings(ENGRAM_WORKER_YIELD_SECONDS=0):
        assert list(activity.turns(range(60), 25)) == [list(range(60))]
    assert len(waits) == 3


@pytest.mark.django_db(transaction=True)
@override_settings(ENGRAM_WORKER_YIELD_SECONDS=0.5)
def test_a_pause_point_waits_for_requests_but_never_inside_a_transaction(background, clock):
    activity.directory().mkdir(parents=True)
    (activity.directory() / str(os.getpid())).touch()  # a request in flight
    assert activity.pause() == pytest.approx(0.5) and clock.slept == pytest.approx(0.5)
    clock.sleep(1)  # past the slice that wait bought
    slept = len(clock.sleeps)
    with transaction.atomic():
        assert activity.pause() == 0.0  # it would hold the transaction's locks while waiting
    assert len(clock.sleeps) == slept


@pytest.mark.django_db
def test_long_background_tasks_pause_between_memories_and_reach_the_same_result(bucket, background, monkeypatch):
    """The follow-up work of a large write (graph extraction, near-duplicates, contradictions,
    links, classification) gives way to requests between memories, not only before the task;
    extraction in turns builds the graph one extraction of all the memories builds."""
    texts = [
        ("Alice lives in Boston.", 2021, 3), ("Alice works at Initech.", 2021, 4),
        ("Initech is headquartered in Austin.", 2021, 5), ("My sister Anna is a nurse.", 2022, 1),
        ("I bought a Pixel 7.", 2023, 1), ("Alice moved to Seattle.", 2024, 2),
        ("I switched to an iPhone 15.", 2024, 6),
    ]  # fmt: skip
    items = [MemoryInput(content=c, created_at=datetime(y, m, 1, tzinfo=UTC)) for c, y, m in texts]
    ids = [r.id for r in memories_ingest(bucket=bucket, items=items, sequence=False)]
    pauses = []
    monkeypatch.setattr(activity, "pause", lambda: pauses.append(1) or 0.0)

    monkeypatch.setattr(activity, "TURN", 2)
    report = graph_extract_memories(memory_ids=ids)
    assert not report.errors and report.memories == len(ids)
    assert len(pauses) == 4  # turns of 2, 2, 2, 1
    in_turns = graph_snapshot(bucket)
    assert in_turns[1]  # facts
    assert any(superseded_by != "None" for _id, _at, superseded_by, _links in in_turns[2])  # Alice's move
    graph_rebuild(bucket=bucket)  # all of them in one transaction
    rebuilt = graph_snapshot(bucket)
    assert rebuilt[1:] == in_turns[1:]
    assert sorted(e[:2] for e in rebuilt[0]) == sorted(e[:2] for e in in_turns[0])

    for find in (near_duplicates_find_for, conflicts_find_for, links_find_for):
        pauses.clear()
        assert find(memory_ids=ids)["scanned"] == len(ids)
        assert len(pauses) == len(ids), find.__name__
    pauses.clear()
    assert memories_classify(memory_ids=ids, force=True, batch_size=3)["classified"] == len(ids)
    assert len(pauses) >= 3


@override_settings(ENGRAM_WORKER_YIELD_SECONDS=0.3)
def test_after_a_wait_a_slice_of_work_goes_on_before_the_next_one(background, monkeypatch, clock):
    """Under unbroken load each wait (at most the limit) buys a slice of work, not one pause
    point's worth: a per-memory loop would otherwise move one memory per limit."""
    monkeypatch.setattr(activity, "SLICE_SECONDS", 0.4)
    activity.directory().mkdir(parents=True)
    (activity.directory() / str(os.getpid())).touch()  # a request that never ends
    assert activity.pause() == pytest.approx(0.3)  # waited out the limit
    slept = len(clock.sleeps)
    for _ in range(100):  # within the slice: no wait
        assert activity.pause() == 0.0
    assert len(clock.sleeps) == slept
    clock.sleep(0.45)  # the work of the slice
    assert activity.pause() == pytest.approx(0.3)  # the slice is over: waits again
