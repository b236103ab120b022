"""Write-behind buffers (engram_site/buffers.py): entries batched in memory, written in one
call by flush, by the one buffer thread (when full or after flush_seconds) and at exit."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading

import pytest

from engram_site import buffers
from memories import access
from tenants import usage
from tests.support import ROOT

DEADLINE = 10.0


class Writer:
    """A buffer's write function that keeps the batches it got and signals each one."""

    def __init__(self, *, fail: bool = False):
        self.batches: list[dict] = []
        self.wrote = threading.Event()
        self.fail = fail

    def __call__(self, batch: dict) -> int:
        if self.fail:
            raise RuntimeError("the database is gone")
        self.batches.append(dict(batch))
        self.wrote.set()
        return len(batch)


def add(key, value):
    def change(pending: dict) -> int:
        added = key not in pending
        pending[key] = value
        return int(added)

    return change


@pytest.fixture
def flusher():
    """A flusher of the test's own: its thread (if started) ends with the test, and the
    process's buffers (access times, usage) are not in it."""
    own = buffers.Flusher(name="test-buffer-flush", background=lambda: True)
    yield own
    own.stop()


def quiet_buffer(writer, **options) -> buffers.WriteBehindBuffer:
    """A buffer whose flusher never starts a thread: only flush() writes."""
    idle = buffers.Flusher(name="unused", background=lambda: False)
    options = {"flush_seconds": 3600, "flush_size": 1000, **options}
    return buffers.WriteBehindBuffer(write=writer, failure="could not write %d test rows", flusher=idle, **options)


def test_entries_recorded_apart_are_written_in_one_batch():
    writer = Writer()
    buffer = quiet_buffer(writer)
    buffer.record(add("a", 1))
    buffer.record(add("b", 2))
    buffer.record(add("a", 3))  # the same key again: the later value wins
    assert writer.batches == []
    assert buffer.flush() == 2
    assert writer.batches == [{"a": 3, "b": 2}]
    assert buffer.flush() == 0 and len(writer.batches) == 1  # nothing left, nothing written


def test_discard_forgets_what_is_pending():
    writer = Writer()
    buffer = quiet_buffer(writer)
    buffer.record(add("a", 1))
    buffer.discard()
    assert buffer.flush() == 0 and writer.batches == []


def test_a_failed_write_is_logged_and_its_batch_dropped(caplog):
    buffer = quiet_buffer(Writer(fail=True))
    buffer.record(add("a", 1))
    with caplog.at_level(logging.WARNING, logger="engram_site.buffers"):
        assert buffer.flush() == 0
    assert "could not write 1 test rows" in caplog.text
    assert buffer.empty


def test_the_thread_writes_a_full_buffer_at_once(flusher):
    writer = Writer()
    buffer = buffers.WriteBehindBuffer(
        write=writer, flush_seconds=3600, flush_size=3, failure="could not write %d test rows", flusher=flusher
    )
    buffer.record(add("a", 1))
    buffer.record(add("b", 1))
    assert not buffer.full
    buffer.record(add("c", 1))
    assert writer.wrote.wait(DEADLINE), "the full buffer was not written"
    assert writer.batches == [{"a": 1, "b": 1, "c": 1}]


def test_the_thread_writes_a_waiting_entry_after_flush_seconds(flusher):
    writer = Writer()
    buffer = buffers.WriteBehindBuffer(
        write=writer, flush_seconds=0.05, flush_size=1000, failure="could not write %d test rows", flusher=flusher
    )
    buffer.record(add("a", 1))
    assert writer.wrote.wait(DEADLINE), "the waiting entry was not written"
    assert writer.batches == [{"a": 1}]


@pytest.mark.slow
def test_what_is_pending_is_written_at_exit():
    script = """
from engram_site import buffers
idle = buffers.Flusher(name="unused", background=lambda: False)
def write(batch):
    print("WROTE", sorted(batch.items()), flush=True)
    return len(batch)
buffer = buffers.WriteBehindBuffer(write=write, flush_seconds=3600, flush_size=1000, failure="%d", flusher=idle)
buffer.record(lambda pending: pending.update(a=1) or 1)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "WROTE [('a', 1)]" in done.stdout


def test_access_times_and_usage_share_the_one_buffer_thread():
    assert access.BUFFER.flusher is usage.BUFFER.flusher is buffers.FLUSHER
