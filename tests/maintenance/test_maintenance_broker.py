"""The embedded broker (kombu's filesystem transport, made safe for several processes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kombu import Connection, Consumer, Producer
from kombu.transport import filesystem

from engram_site.broker import Transport, transport_options
from tests.scripts.broker_peer import QUEUE
from tests.support import ROOT, base_env


def peer(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.scripts.broker_peer", *args],
        cwd=ROOT,
        env=base_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_concurrent_producers_and_consumers_deliver_every_message_exactly_once(tmp_path):
    producers, per_producer = 3, 150
    consumers = [peer("consume", str(tmp_path), "3") for _ in range(3)]
    for p in [peer("produce", str(tmp_path), str(n * per_producer), str(per_producer)) for n in range(producers)]:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
    received: list[int] = []
    for c in consumers:
        out, err = c.communicate(timeout=120)
        assert c.returncode == 0, err[-2000:]
        received += json.loads(out)
    # None lost (no half-written file was read), none delivered twice (a claim is one rename).
    assert sorted(received) == list(range(producers * per_producer))
    assert [list((tmp_path / f).iterdir()) for f in ("queue", "tmp", "claimed")] == [[], [], []]


def test_an_exchange_table_caught_between_its_creation_and_its_first_write_is_read_as_empty(tmp_path, monkeypatch):
    # kombu remembers in the process which queues it declared: a state of this test's own, so
    # that the other tests declare theirs in their folders again.
    monkeypatch.setattr(Transport, "global_state", filesystem.virtual.BrokerState())
    # What another process's declaration leaves for an instant: the table file, still empty.
    options = transport_options(Path(tmp_path))
    control = Path(options["control_folder"])
    control.mkdir(parents=True, exist_ok=True)
    (control / f"{QUEUE.exchange.name}.exchange").write_bytes(b"")
    with Connection("filesystem://", transport="engram_site.broker:Transport", transport_options=options) as conn:
        channel = conn.default_channel
        assert channel.get_table(QUEUE.exchange.name) == []
        Producer(channel).publish({"i": 1}, exchange=QUEUE.exchange, routing_key="peers", declare=[QUEUE])
        assert [entry.queue for entry in channel.get_table(QUEUE.exchange.name)] == [QUEUE.name]
        received: list[int] = []
        with Consumer(conn, [QUEUE], callbacks=[lambda body, m: (received.append(body["i"]), m.ack())]):
            conn.drain_events(timeout=5)
    assert received == [1]


def test_a_backlog_drains_in_publication_order(tmp_path):
    options = transport_options(Path(tmp_path))
    with Connection("filesystem://", transport="engram_site.broker:Transport", transport_options=options) as conn:
        producer = Producer(conn.default_channel)
        for i in range(200):
            producer.publish({"i": i}, exchange=QUEUE.exchange, routing_key="peers", declare=[QUEUE])
        received: list[int] = []
        with Consumer(conn, [QUEUE], callbacks=[lambda body, m: (received.append(body["i"]), m.ack())]):
            while len(received) < 200:
                conn.drain_events(timeout=5)
    assert received == list(range(200))


def test_an_unwritable_broker_folder_fails_the_publish_not_the_process(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    options = transport_options(blocker / "broker")  # logs a warning, does not raise
    with Connection("filesystem://", transport="engram_site.broker:Transport", transport_options=options) as conn:
        producer = Producer(conn.default_channel)
        try:
            producer.publish({"i": 1}, exchange=QUEUE.exchange, routing_key="peers", declare=[QUEUE])
        except Exception as exc:  # the caller (memories.hooks) logs it and moves on
            assert "Not a directory" in str(exc) or isinstance(exc, OSError)
        else:
            raise AssertionError("publishing into a file should fail")
