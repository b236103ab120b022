"""The web server's worker spreads new connections over the workers (engram_site/gunicorn_worker.py):
a worker that holds connections steps back from the listening socket before it takes another, the
longer the more it holds, so that a worker holding fewer takes it first. Left to the race for the
socket, four clients that connected together were all found on one of two workers."""

from __future__ import annotations

import http.client
import os
import selectors
import socket
import sys
import time
from types import SimpleNamespace

import pytest

from engram_site import gunicorn_worker
from engram_site.gunicorn_worker import MAX_ACCEPT_PAUSE, SpreadingThreadWorker
from tests.support import Process, base_env, free_port, test_database_url, wait_for


@pytest.fixture
def listener():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    yield sock
    sock.close()


@pytest.fixture
def clock(monkeypatch):
    """The worker's clock, moved by the test."""
    now = SimpleNamespace(value=100.0)
    monkeypatch.setattr(gunicorn_worker, "time", SimpleNamespace(monotonic=lambda: now.value))
    return now


@pytest.fixture
def clients():
    opened = []

    def connect(listening):
        client = socket.create_connection(listening.getsockname(), timeout=5)
        opened.append(client)
        return client

    yield connect
    for client in opened:
        client.close()


def _worker(listener, *, workers: int, holding: int) -> SpreadingThreadWorker:
    """The worker's accepting part alone: gunicorn's loop and thread pool are not started, and a
    connection it takes is kept in ``taken``."""
    worker = SpreadingThreadWorker.__new__(SpreadingThreadWorker)
    worker.cfg = SimpleNamespace(workers=workers)
    worker.sockets = [listener]
    worker.poller = selectors.DefaultSelector()
    worker.alive = True
    worker.nr_conns = holding
    worker._accepting = False
    worker.accept_after = 0.0
    worker.taken = []
    worker.enqueue_req = worker.taken.append
    worker.set_accept_enabled(True)
    return worker


def _listening(worker, listener) -> bool:
    return any(key.fileobj is listener for key in worker.poller.get_map().values())


@pytest.mark.parametrize(("workers", "holding"), [(2, 0), (1, 5)], ids=["holding-none", "alone"])
def test_a_worker_holding_no_connection_or_alone_takes_a_new_one_at_once(listener, clients, workers, holding):
    worker = _worker(listener, workers=workers, holding=holding)
    clients(listener)
    worker.accept(listener)
    assert len(worker.taken) == 1 and worker.nr_conns == holding + 1


def test_a_worker_holding_connections_steps_back_before_it_takes_one_then_takes_it(listener, clients, clock):
    pause = gunicorn_worker.ACCEPT_PAUSE_PER_CONNECTION
    worker = _worker(listener, workers=2, holding=3)
    clients(listener)
    worker.accept(listener)
    assert worker.taken == [], "took the connection at once while holding three"
    assert not _listening(worker, listener), "still polling the listening socket during its pause"
    assert worker.accept_after == pytest.approx(100.0 + 3 * pause)
    worker.set_accept_enabled(True)  # what gunicorn's loop asks on each turn
    assert not _listening(worker, listener), "listening again before its pause ended"

    clock.value = worker.accept_after
    worker.set_accept_enabled(True)
    assert _listening(worker, listener)
    worker.accept(listener)  # the connection it stepped back from, still waiting
    assert len(worker.taken) == 1 and worker.nr_conns == 4

    # The next connection waits again, longer: it holds four now.
    clock.value += 1.0
    clients(listener)
    worker.accept(listener)
    assert len(worker.taken) == 1
    assert worker.accept_after == pytest.approx(clock.value + 4 * pause)


def test_the_pause_is_bounded(listener, clients):
    worker = _worker(listener, workers=4, holding=500)
    assert worker.accept_pause() == MAX_ACCEPT_PAUSE


def test_a_stepped_back_worker_wakes_when_its_pause_ends_not_after_the_loops_second(listener, clients, clock):
    worker = _worker(listener, workers=2, holding=2)
    waited = []
    worker.poller.select = lambda timeout: waited.append(timeout) or []
    clients(listener)
    worker.accept(listener)
    worker.wait_for_and_dispatch_events(1.0)
    assert waited == [pytest.approx(2 * gunicorn_worker.ACCEPT_PAUSE_PER_CONNECTION)]


# A WSGI application that answers with the pid of the worker that serves it. Its pauses are made
# long enough for a loaded test machine to schedule the other worker within them; the master loads
# it before forking (preload_app), so the workers have them too.
PID_APP = """
import os
from engram_site import gunicorn_worker

gunicorn_worker.ACCEPT_PAUSE_PER_CONNECTION = 0.1
gunicorn_worker.MAX_ACCEPT_PAUSE = 0.5


def application(environ, start_response):
    body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
"""


@pytest.mark.slow
def test_clients_connecting_one_after_another_are_spread_evenly_over_the_web_servers_workers(tmp_path):
    (tmp_path / "pid_app.py").write_text(PID_APP)
    port = free_port()
    env = base_env(
        DATABASE_URL=test_database_url(), ENGRAM_EMBEDDINGS="off", ENGRAM_PRELOAD_MODELS="0",
        PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
    )  # fmt: skip

    def answers() -> bool:
        try:
            probe = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            probe.request("GET", "/", headers={"Connection": "close"})
            probe.getresponse().read()
            probe.close()
            return True
        except OSError:
            return False

    server = Process(
        [sys.executable, "-m", "gunicorn", "pid_app:application", "--config", "python:engram_site.gunicorn_config",
         "--bind", f"127.0.0.1:{port}", "--workers", "2", "--threads", "2", "--keep-alive", "60",
         "--no-control-socket"],
        env=env, log=tmp_path / "server.log", ready=answers,
    )  # fmt: skip
    server.start()
    connections = []
    try:
        wait_for(lambda: server.output().count("Booting worker") >= 2, timeout=60, proc=server, what="both workers")
        time.sleep(0.5)  # sleep-ok: the probe's connection closes and both workers are back at the listening socket
        pids = []
        for _ in range(6):
            # Each client keeps its connection, as an agent's HTTP client does, and is served on it.
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            connection.request("GET", "/")
            pids.append(int(connection.getresponse().read()))
            connections.append(connection)
        served = sorted(pids.count(pid) for pid in set(pids))
        assert served == [3, 3], f"six kept-alive connections were served by workers {pids}"
    finally:
        for connection in connections:
            connection.close()
        server.stop()
