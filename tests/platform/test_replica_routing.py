"""Which database each operation uses when a replica is configured (engram_site/replica.py):
the router, the choice a read makes (read-your-writes, a replica that is down or behind), the
fall back to the primary, and the middleware that notes writes.

Here the "replica" alias is a second connection to the test database: what these tests check
is which connection a statement goes through. A real standby, killed under load, is
tests/platform/test_replica_topology.py's.
"""

from __future__ import annotations

import pytest
from django.db import DEFAULT_DB_ALIAS, OperationalError, connections, transaction
from django.test.utils import CaptureQueriesContext

from engram_site import replica
from engram_site.metrics import REPLICA_WAIT_SECONDS
from memories import access
from memories.models import Memory
from tests.factories import search, write


@pytest.fixture(scope="module")
def _replica_configured(django_db_setup, django_db_blocker):
    """A "replica" alias for this module's tests: a second connection to the test database.
    Module-scoped, so that it exists before a test's database access is set up (a test that
    connects to it names it: ``django_db(databases=BOTH)``)."""
    primary = connections[DEFAULT_DB_ALIAS].settings_dict
    # connections.settings is settings.DATABASES: the alias is configured for replica.configured() too.
    connections.settings[replica.ALIAS] = {**primary, "TEST": {**primary["TEST"], "MIRROR": DEFAULT_DB_ALIAS}}
    yield replica.ALIAS
    with django_db_blocker.unblock():
        connections[replica.ALIAS].close()
    del connections[replica.ALIAS]
    del connections.settings[replica.ALIAS]


@pytest.fixture
def replica_alias(_replica_configured):
    replica.reset()
    yield _replica_configured
    replica.reset()


BOTH = [DEFAULT_DB_ALIAS, replica.ALIAS]
# Outside the test's transaction (a read inside one stays on the primary), both aliases allowed.
committed = pytest.mark.django_db(transaction=True, databases=BOTH)


def _observations() -> float:
    return sum(bucket.get() for bucket in REPLICA_WAIT_SECONDS._buckets)


def _statements(captured: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in captured.captured_queries]


# --- the router -------------------------------------------------------------------------------


def test_without_a_replica_every_read_chooses_the_primary(db, monkeypatch):
    from django.conf import settings

    monkeypatch.delitem(settings.DATABASES, replica.ALIAS, raising=False)
    assert not replica.configured()
    assert replica.choose(None) == (DEFAULT_DB_ALIAS, "no_replica")
    assert replica.read(None, lambda using: using) == DEFAULT_DB_ALIAS


def test_the_router_sends_reads_where_the_block_says_and_writes_to_the_primary(db, replica_alias):
    router = replica.Router()
    assert router.db_for_read(Memory) == DEFAULT_DB_ALIAS
    with transaction.atomic(durable=False), replica.reading(replica_alias):
        # Inside a transaction of the primary, reads stay in it.
        assert router.db_for_read(Memory) == DEFAULT_DB_ALIAS
    assert router.db_for_write(Memory) == DEFAULT_DB_ALIAS
    assert router.allow_migrate(DEFAULT_DB_ALIAS, "memories") is True
    assert router.allow_migrate(replica_alias, "memories") is False


@committed
def test_a_replica_block_reads_the_replica_outside_transactions(replica_alias):
    router = replica.Router()
    with replica.reading(replica_alias):
        assert router.db_for_read(Memory) == replica_alias
        assert replica.read_connection() is connections[replica_alias]
        assert router.db_for_write(Memory) == DEFAULT_DB_ALIAS
    assert replica.read_connection() is connections[DEFAULT_DB_ALIAS]


def test_inside_a_transaction_a_read_chooses_the_primary(db, replica_alias):
    # Every test of this kind runs in a transaction of the primary.
    assert replica.choose(None) == (DEFAULT_DB_ALIAS, "transaction")


# --- read-your-writes and the fallback (outside the test transaction) ---------------------------


@committed
def test_a_tenant_without_recent_writes_reads_the_replica(replica_alias, tenant):
    assert replica.choose(tenant.pk) == (replica_alias, "replica")


@committed
def test_after_a_write_the_read_waits_for_the_replica_to_replay_it(replica_alias, tenant, monkeypatch):
    replica.note_write(tenant.pk)
    target = replica.primary_position()
    positions = iter([target - 1, target - 1, target])  # the replica replays it on the third look
    monkeypatch.setattr(replica, "replayed_position", lambda: next(positions))
    waits = REPLICA_WAIT_SECONDS._sum.get(), _observations()
    assert replica.choose(tenant.pk) == (replica_alias, "caught_up")
    # The wait is measured (engram_replica_wait_seconds): two polls of POLL_SECONDS at least.
    assert _observations() == waits[1] + 1
    assert REPLICA_WAIT_SECONDS._sum.get() - waits[0] >= 2 * replica.POLL_SECONDS


@committed
def test_a_replica_behind_past_the_bound_sends_the_read_to_the_primary(replica_alias, tenant, settings, monkeypatch):
    settings.ENGRAM_REPLICA_WAIT_MS = 20
    replica.note_write(tenant.pk)
    looks = []
    monkeypatch.setattr(replica, "replayed_position", lambda: looks.append(1) or 0)
    assert replica.choose(tenant.pk) == (DEFAULT_DB_ALIAS, "replica_behind")
    assert len(looks) > 1  # it waited, polling
    # The next reads of a tenant with writes do not wait again for a while; others still read the replica.
    looks.clear()
    assert replica.choose(tenant.pk) == (DEFAULT_DB_ALIAS, "replica_behind")
    assert looks == []
    assert replica.choose(None) == (replica_alias, "replica")


@committed
def test_in_primary_mode_a_tenant_reads_the_primary_after_its_writes(replica_alias, tenant, other_tenant, settings):
    settings.ENGRAM_READ_YOUR_WRITES = "primary"
    replica.note_write(tenant.pk)
    assert replica.choose(tenant.pk) == (DEFAULT_DB_ALIAS, "recent_write")
    assert replica.choose(other_tenant.pk) == (replica_alias, "replica")


@committed
def test_a_failed_replica_read_runs_again_on_the_primary_and_the_replica_is_left_alone(replica_alias, tenant):
    ran = []

    def run(using):
        ran.append(using)
        if using == replica_alias:
            raise OperationalError("connection refused")
        return "answer"

    assert replica.read(tenant.pk, run) == "answer"
    assert ran == [replica_alias, DEFAULT_DB_ALIAS]
    # Left alone for a while: straight to the primary.
    ran.clear()
    assert replica.read(tenant.pk, run) == "answer"
    assert ran == [DEFAULT_DB_ALIAS]
    assert replica.choose(tenant.pk) == (DEFAULT_DB_ALIAS, "replica_down")


@committed
def test_an_unreachable_replica_while_waiting_sends_the_read_to_the_primary(replica_alias, tenant, monkeypatch):
    replica.note_write(tenant.pk)

    def unreachable():
        raise OperationalError("could not connect")

    monkeypatch.setattr(replica, "replayed_position", unreachable)
    assert replica.choose(tenant.pk) == (DEFAULT_DB_ALIAS, "replica_down")


# --- which connection the API's operations use -------------------------------------------------


@committed
def test_a_search_reads_only_the_replica_and_records_access_on_the_primary(replica_alias, bucket, api):
    write(bucket, "The heron nests by the mill pond.", "Otters fish below the weir.")
    primary = connections[DEFAULT_DB_ALIAS]
    with CaptureQueriesContext(connections[replica_alias]) as on_replica, CaptureQueriesContext(primary) as on_primary:
        found = search(api, bucket, "heron mill pond", mode="keyword")
    assert [hit["content"] for hit in found["results"]][:1] == ["The heron nests by the mill pond."]
    assert any("memories" in sql for sql in _statements(on_replica))
    # The primary authenticated the token and found the bucket; it read no memory.
    assert not any("FROM memories" in sql or 'FROM "memories"' in sql for sql in _statements(on_primary))
    with CaptureQueriesContext(primary) as flushed, CaptureQueriesContext(connections[replica_alias]) as not_flushed:
        access.flush()
    assert any("INSERT INTO memory_access" in sql for sql in _statements(flushed))
    assert _statements(not_flushed) == []


@committed
def test_a_memory_list_reads_the_replica(replica_alias, bucket, api):
    write(bucket, "The heron nests by the mill pond.")
    with CaptureQueriesContext(connections[replica_alias]) as on_replica:
        response = api.get(f"/api/v1/buckets/{bucket.pk}/memories")
    assert response.status_code == 200
    assert [m["content"] for m in response.json()["results"]] == ["The heron nests by the mill pond."]
    assert any('"memories"' in sql for sql in _statements(on_replica))


@committed
def test_a_write_goes_to_the_primary_and_notes_its_tenant(replica_alias, tenant, bucket, api):
    assert not replica.wrote_recently(tenant.pk)
    with CaptureQueriesContext(connections[replica_alias]) as on_replica:
        response = api.post(
            f"/api/v1/buckets/{bucket.pk}/memories", {"content": "Swifts arrive in May."}, format="json"
        )
    assert response.status_code == 201
    assert _statements(on_replica) == []
    assert replica.wrote_recently(tenant.pk)


@committed
def test_a_search_notes_no_write(replica_alias, tenant, bucket, api):
    write(bucket, "Swifts arrive in May.")
    search(api, bucket, "swifts", mode="keyword")
    assert not replica.wrote_recently(tenant.pk)


@committed
def test_a_search_after_a_write_waits_for_the_replica(replica_alias, tenant, bucket, api, monkeypatch):
    api.post(f"/api/v1/buckets/{bucket.pk}/memories", {"content": "Swifts arrive in May."}, format="json")
    looked = []
    monkeypatch.setattr(replica, "replayed_position", lambda: looked.append(1) or replica.primary_position())
    with CaptureQueriesContext(connections[replica_alias]) as on_replica:
        found = search(api, bucket, "swifts", mode="keyword")
    assert looked and [hit["content"] for hit in found["results"]] == ["Swifts arrive in May."]
    assert any("memories" in sql for sql in _statements(on_replica))


@committed
def test_a_search_answers_from_the_primary_when_the_replica_is_unreachable(replica_alias, bucket, api):
    write(bucket, "The heron nests by the mill pond.")
    # The replica's address now leads nowhere: nothing listens on port 1.
    config = connections.settings[replica_alias]
    saved = dict(config)
    connections[replica_alias].close()
    del connections[replica_alias]
    config.update(ENGINE="django.db.backends.postgresql", HOST="127.0.0.1", PORT="1")
    try:
        found = search(api, bucket, "heron", mode="keyword")
    finally:
        del connections[replica_alias]
        config.clear()
        config.update(saved)
    assert [hit["content"] for hit in found["results"]] == ["The heron nests by the mill pond."]
    assert replica.choose(bucket.tenant_id) == (DEFAULT_DB_ALIAS, "replica_down")


@committed
def test_the_hnsw_settings_of_a_walk_on_the_replica_are_set_on_the_replicas_connection(replica_alias):
    from memories.retrieval import vector

    primary = connections[DEFAULT_DB_ALIAS]
    # missing_ok: a session that has not loaded pgvector yet has no such setting (NULL).
    primary_setting = "SELECT current_setting('hnsw.ef_search', true)"
    with primary.cursor() as cur:
        cur.execute(primary_setting)
        before = cur.fetchone()[0]
    with replica.reading(replica_alias), replica.read_connection().cursor() as cur:
        vector.hnsw_settings(cur, 77)
    with connections[replica_alias].cursor() as cur:
        cur.execute("SELECT current_setting('hnsw.ef_search'), current_setting('hnsw.iterative_scan')")
        assert cur.fetchone() == ("77", "relaxed_order")
    with primary.cursor() as cur:
        cur.execute(primary_setting)
        assert cur.fetchone()[0] == before != "77"
