"""The replica topology of docs/DEPLOYMENT.md ("Read replicas for search"), started here and
hurt under load.

A primary and a hot standby streaming from it (the embedded wheel's PostgreSQL 18, both on
loopback), two web servers reading searches and lists from the standby
(``DATABASE_REPLICA_URL``) and writing to the primary. Agents write a memory on one server and
at once search for it on the other; other agents, whose tenant does not write, only search.
Midway the standby is killed (an immediate shutdown) and started again. Then: every call was
answered (no 5xx, the primary answering while the standby was away), every search right after a
write found that write, every acknowledged write is on the primary and on the standby, and the
standby served searches before the kill and again after its restart.

Every process started here is stopped here, by its process group or data directory.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter

import psycopg
import pytest

from tests.scripts.http_writer import call
from tests.support import base_env, free_port, http_get, manage, wait_for, web_process
from tests.support.load import unhandled_errors
from tests.support.replication import StandbyPair

pytestmark = pytest.mark.slow

# Two tenants: "writers" write and search at once, "readers" (whose tenant never writes) search
# memories written here before the load.
PROVISION = """
import json
from engram_site.scoping import scopes_disabled
from memories.services.buckets import bucket_create
from memories.services import MemoryInput, memories_ingest
from tenants import services
out = {}
for name in ("writers", "readers"):
    tenant = services.tenant_create(name=name)
    bucket = bucket_create(tenant=tenant, name="load")
    token = services.token_issue(tenant=tenant, name=name, scopes=["read", "write"])
    out[name] = {"bucket": str(bucket.pk), "token": token.secret}
    if name == "readers":
        with scopes_disabled():
            memories_ingest(bucket=bucket, items=[MemoryInput(content=f"Lighthouse {i} keeps its lamp lit")
                                                  for i in range(20)])
print(json.dumps(out))
"""

WRITERS = 3
READERS = 2


class Agent(threading.Thread):
    """Writes a memory with a word of its own on one server, then at once searches for that word
    on the other (``writer``); or only searches (reader). Records every call."""

    def __init__(self, name: str, bases: list[str], token: str, bucket: str, stop: threading.Event, writer: bool):
        super().__init__(name=name)
        self.bases, self.token, self.bucket, self.stop, self.writer = bases, token, bucket, stop, writer
        self.calls: list[dict] = []
        self.acknowledged: list[str] = []
        self.read_your_writes: list[bool] = []  # per write acknowledged: found by the search right after

    def _call(self, base: str, method: str, path: str, body: dict) -> tuple[int, dict]:
        started = time.monotonic()
        status, payload, _ = call(method, base + path, self.token, body, timeout=30)
        self.calls.append({"kind": path.rsplit("/", 1)[-1], "status": status, "started": started,
                           "ended": time.monotonic(), "payload": payload if status != 200 else None})  # fmt: skip
        return status, payload

    def run(self) -> None:
        k = 0
        while not self.stop.is_set():
            write_to, search_on = self.bases[k % 2], self.bases[(k + 1) % 2]
            if self.writer:
                word = f"zq{self.name[-1]}x{k}w"
                content = f"Courier {self.name} left parcel {word} at depot {k}"
                status, payload = self._call(
                    write_to, "POST", f"/api/v1/buckets/{self.bucket}/memories", {"content": content}
                )
                if status == 201:
                    self.acknowledged.append(content)
                    status, found = self._call(
                        search_on, "POST", f"/api/v1/buckets/{self.bucket}/search", {"query": word, "mode": "keyword"}
                    )
                    if status == 200:
                        self.read_your_writes.append(content in [hit["content"] for hit in found["results"]])
            else:
                self._call(search_on, "POST", f"/api/v1/buckets/{self.bucket}/search",
                           {"query": f"lighthouse {k % 20} lamp", "mode": "keyword"})  # fmt: skip
            k += 1
            self.stop.wait(0.01)  # a busy agent's pace, not a synchronisation

    def ok_since(self, moment: float) -> int:
        return sum(c["status"] in (200, 201) and c["started"] > moment for c in list(self.calls))


def _replica_reads(base: str) -> Counter:
    """The web server's engram_replica_reads_total, by (database, reason)."""
    status, body = http_get(base + "/metrics")
    assert status == 200
    found: Counter = Counter()
    pattern = r'^engram_replica_reads_total\{database="(\w+)",reason="(\w+)"\} ([0-9.e+]+)$'
    for database, reason, value in re.findall(pattern, body.decode(), re.MULTILINE):
        found[(database, reason)] += float(value)
    return found


def _served_by(bases: list[str], database: str) -> float:
    return sum(value for base in bases for (db, _), value in _replica_reads(base).items() if db == database)


def _together(calls) -> None:
    """Run the calls at once, each in a thread (two servers start, or stop, side by side)."""
    errors: list[BaseException] = []

    def run(function):
        try:
            function()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(function,)) for function in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def test_a_standby_killed_under_load_costs_no_error_and_no_write(pg_home, tmp_path):
    began = time.monotonic()
    setup: dict[str, float] = {}  # seconds per step, in the figures

    def step(name: str) -> None:
        setup[name] = round(time.monotonic() - began - sum(setup.values()), 1)

    pair = StandbyPair(pg_home, pg_home.parent / "standby-area")
    step("primary")
    servers = []
    try:
        env = base_env(
            DATABASE_URL=pair.primary.url, ENGRAM_HOME=str(pg_home), ENGRAM_TOKEN_RATE="100000/min",
            ENGRAM_EMBEDDINGS="off", ENGRAM_PRELOAD_MODELS="0", ENGRAM_RUN_WORKER="0",
        )  # fmt: skip
        manage("migrate", "--noinput", env=env)
        step("migrate")
        ids: dict = {}

        def provision() -> None:
            ids.update(json.loads(manage("shell", "-c", PROVISION, env=env).stdout.strip().splitlines()[-1]))

        web_env = {**env, "DATABASE_REPLICA_URL": pair.url}
        ports = [free_port(), free_port()]
        bases = [f"http://127.0.0.1:{port}" for port in ports]
        servers = [web_process(web_env, port=port, log=tmp_path / f"web-{i}.log") for i, port in enumerate(ports)]
        # The tenants, the standby (a base backup of the migrated primary, streaming what follows)
        # and the web servers come up side by side: until the standby answers, a server reads the primary.
        _together([provision, pair.create, *(server.start for server in servers)])
        step("provision_standby_and_web")
        ready_at = time.monotonic()

        stop = threading.Event()
        agents = [
            Agent(f"writer-{n}", bases, ids["writers"]["token"], ids["writers"]["bucket"], stop, writer=True)
            for n in range(WRITERS)
        ] + [
            Agent(f"reader-{n}", bases, ids["readers"]["token"], ids["readers"]["bucket"], stop, writer=False)
            for n in range(READERS)
        ]  # fmt: skip
        for agent in agents:
            agent.start()
        try:
            wait_for(lambda: all(a.ok_since(0) >= 4 for a in agents), timeout=60, what="the load under way")
            served_before_kill = _served_by(bases, "replica")
            killed_at = time.monotonic()
            pair.kill()
            # The load goes on while the standby is away: every agent answered again, by the primary.
            wait_for(lambda: all(a.ok_since(killed_at) >= 3 for a in agents), timeout=60, what="answers without it")
            pair.start()
            back_at = time.monotonic()
            # Back in use once this process's pause after a failure (replica.RETRY_SECONDS) is over.
            served_at_restart = _served_by(bases, "replica")
            wait_for(lambda: _served_by(bases, "replica") > served_at_restart + 10, timeout=60, interval=0.5,
                     what="searches served by the restarted standby")  # fmt: skip
            wait_for(lambda: all(a.ok_since(back_at) >= 3 for a in agents), timeout=60, what="the load after it")
        finally:
            stop.set()
            for agent in agents:
                agent.join(timeout=60)

        calls = [c for agent in agents for c in agent.calls]
        statuses = Counter(c["status"] for c in calls)
        assert set(statuses) <= {200, 201}, (
            statuses,
            [c["payload"] for c in calls if c["status"] not in (200, 201)][:3],
        )
        for i in range(len(servers)):
            assert unhandled_errors(tmp_path / f"web-{i}.log") == []

        # Read-your-writes: a search right after a write, on the other server, found it; every time.
        checks = [found for agent in agents for found in agent.read_your_writes]
        assert len(checks) >= 15 and all(checks), Counter(checks)

        # The standby served searches before the kill and after its restart; the primary
        # answered for it while it was away (the documented fallback).
        reads = sum((_replica_reads(base) for base in bases), Counter())
        assert served_before_kill > 0
        assert reads[("default", "replica_down")] + reads[("default", "replica_failed")] > 0, reads
        waited = reads[("replica", "caught_up")]
        assert waited > 0, reads  # writers' searches waited for their writes on the standby

        # Every acknowledged write is on the primary, and on the standby once it has caught up.
        acknowledged = [content for agent in agents for content in agent.acknowledged]
        wait_for(pair.caught_up, timeout=60, what="the standby replaying everything")
        for url in (pair.primary.url, pair.url):
            with psycopg.connect(url) as conn:
                stored = Counter(
                    r[0]
                    for r in conn.execute(
                        "SELECT content FROM memories WHERE bucket_id = %s", [ids["writers"]["bucket"]]
                    )
                )
            assert set(acknowledged) <= set(stored) and max(stored.values()) == 1, url

        figures = {
            "calls": len(calls), "writes_acknowledged": len(acknowledged), "read_your_writes_checks": len(checks),
            "standby_down_seconds": round(back_at - killed_at, 1),
            "setup_seconds": setup, "load_seconds": round(time.monotonic() - ready_at, 1),
            "reads": {f"{d}/{r}": v for (d, r), v in reads.items()},
        }  # fmt: skip
        (tmp_path / "figures.json").write_text(json.dumps(figures, indent=2))
        print(json.dumps(figures))
    finally:
        # What is checked has been checked: no shutdown to wait for (the data is thrown away).
        for server in servers:
            server.kill()
        pair.close()
