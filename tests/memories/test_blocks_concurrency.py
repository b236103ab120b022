"""Two agents editing one block at once, each on its own database connection (threads): one
wins, the other gets 412, nothing is lost. The version check is the UPDATE's own WHERE, so a
writer whose read was current when it looked, but whose UPDATE waited behind the winner's,
still finds the row moved on."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections, transaction

from engram_site.scoping import in_this_context
from memories.models import BlockEdit, MemoryBlock
from memories.services.blocks import BlockPatch, Expected, block_patch, block_put
from tests.factories import make_client
from tests.support import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _url(bucket, label="persona"):
    return f"/api/v1/buckets/{bucket.pk}/blocks/{label}"


def _waiting_on_a_lock() -> bool:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
        return bool(cur.fetchone()[0])


def test_of_two_writers_based_on_one_version_the_one_whose_update_waited_gets_412(tenant, bucket):
    """Both read version 1 and pass the version check in Python; the second's UPDATE then waits
    on the first's row lock. When the first commits, the second's ``WHERE version = 1`` matches
    no row: 412, and the first's text stays. (An UPDATE by id alone would overwrite it.)"""
    block, _ = block_put(bucket=bucket, agent_id=None, label="persona", content="v1", expected=Expected())
    tag = block.etag
    written, go = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}
    second_api = make_client(tenant)

    def first():  # writes, then holds its transaction open until the second is queued behind it
        try:
            with transaction.atomic():
                outcome["first"] = block_put(
                    bucket=bucket, agent_id=None, label="persona", content="first writer's text",
                    expected=Expected.from_headers(tag, None),
                )  # fmt: skip
                written.set()
                assert go.wait(30)
        except Exception as exc:
            outcome["first"] = exc
        finally:
            connections.close_all()

    def second():  # the other agent, through the API, with the same version's tag
        try:
            outcome["second"] = second_api.put(
                _url(bucket), {"content": "second writer's text"}, format="json", HTTP_IF_MATCH=tag
            )
        finally:
            connections.close_all()

    threads = [threading.Thread(target=in_this_context(first)), threading.Thread(target=second)]
    threads[0].start()
    assert written.wait(30)
    threads[1].start()
    wait_for(_waiting_on_a_lock, timeout=30, interval=0.02)  # the second's UPDATE queues behind the first's
    go.set()
    for thread in threads:
        thread.join(60)

    assert not isinstance(outcome["first"], Exception), outcome["first"]
    response = outcome["second"]
    assert response.status_code == 412, response.content
    assert response.json()["version"] == 2
    block = MemoryBlock.objects.get(pk=block.pk)
    assert (block.content, block.version) == ("first writer's text", 2)
    assert list(BlockEdit.objects.filter(block_id=block.pk).order_by("version").values_list("content", flat=True)) == [
        "v1",
        "first writer's text",
    ]


def test_two_creates_of_one_block_at_once_make_one_block_and_a_412(tenant, bucket):
    written, go = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}
    api = make_client(tenant)

    def first():
        try:
            with transaction.atomic():
                outcome["first"] = block_put(
                    bucket=bucket, agent_id="alfa", label="human", content="from the first", expected=Expected()
                )
                written.set()
                assert go.wait(30)
        except Exception as exc:
            outcome["first"] = exc
        finally:
            connections.close_all()

    def second():  # found no block when it looked; its insert waits on the first's, then fails
        try:
            outcome["second"] = api.put(_url(bucket, "human") + "?agent_id=alfa", {"content": "from the second"},
                                        format="json")  # fmt: skip
        finally:
            connections.close_all()

    threads = [threading.Thread(target=in_this_context(first)), threading.Thread(target=second)]
    threads[0].start()
    assert written.wait(30)
    threads[1].start()
    wait_for(_waiting_on_a_lock, timeout=30, interval=0.02)
    go.set()
    for thread in threads:
        thread.join(60)

    assert not isinstance(outcome["first"], Exception), outcome["first"]
    assert outcome["second"].status_code == 412, outcome["second"].content
    assert list(MemoryBlock.objects.filter(bucket=bucket).values_list("content", flat=True)) == ["from the first"]


def test_agents_appending_at_once_by_read_modify_write_lose_no_line(tenant, bucket):
    """Four agents each append five lines, each append based on the version it just read
    (retrying on 412). Every line ends up in the block, each version exactly once."""
    api = make_client(tenant)
    assert api.put(_url(bucket), {"content": "log:"}, format="json").status_code == 201
    writers, lines = 4, 5
    barrier = threading.Barrier(writers, timeout=60)
    statuses: list[int] = []
    failures: list[str] = []

    def agent(n: int) -> None:
        client = clients[n]
        try:
            barrier.wait()
            for k in range(lines):
                for _attempt in range(200):
                    etag = client.get(_url(bucket))["ETag"]
                    response = client.patch(_url(bucket), {"append": f"agent {n} line {k}"}, format="json",
                                            HTTP_IF_MATCH=etag)  # fmt: skip
                    statuses.append(response.status_code)
                    if response.status_code == 200:
                        break
                    if response.status_code != 412:
                        failures.append(f"{response.status_code} {response.content[:200]!r}")
                        return
                else:
                    failures.append(f"agent {n} never got line {k} in")
        finally:
            connections.close_all()

    clients = [make_client(tenant) for _ in range(writers)]  # made here: the threads only send requests
    threads = [threading.Thread(target=agent, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)

    assert failures == []
    block = MemoryBlock.objects.get(bucket=bucket)
    expected = {f"agent {n} line {k}" for n in range(writers) for k in range(lines)}
    assert set(block.content.split("\n")[1:]) == expected and block.content.count("\n") == writers * lines
    assert block.version == 1 + writers * lines
    versions = list(BlockEdit.objects.filter(block_id=block.pk).values_list("version", flat=True))
    assert sorted(versions) == list(range(1, block.version + 1))
    assert set(statuses) <= {200, 412}


def test_appends_with_if_match_star_at_once_all_land(tenant, bucket):
    block, _ = block_put(bucket=bucket, agent_id=None, label="notes", content="", expected=Expected())
    writers = 4
    barrier = threading.Barrier(writers, timeout=60)
    errors: list[BaseException] = []

    def agent(n: int) -> None:
        try:
            barrier.wait()
            for k in range(5):
                block_patch(bucket=bucket, agent_id=None, label="notes", patch=BlockPatch(append=f"{n}-{k}"),
                            expected=Expected(any=True))  # fmt: skip
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=in_this_context(agent), args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    block = MemoryBlock.objects.get(pk=block.pk)
    assert sorted(block.content.split("\n")) == sorted(f"{n}-{k}" for n in range(writers) for k in range(5))
    assert block.version == 21
