"""link_memories: refines / cites links, stored so that readers can tell the kind."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.core.management import call_command
from django.utils import timezone

from maintenance.services import links
from memories.links import LINKS_KEY
from memories.models import Memory
from tests.factories import write

pytestmark = pytest.mark.django_db

NURSE = "My sister Anna works as a nurse in Boston."
NURSE_DETAIL = "My sister Anna works as a nurse in Boston at Mass General, in the cardiology ward."


def days_ago(days: int, *contents) -> list[dict]:
    """``contents`` as memories written ``days`` ago, a second apart."""
    at = timezone.now() - timedelta(days=days)
    return [{"content": c, "created_at": at + timedelta(seconds=i)} for i, c in enumerate(contents)]


def link(*args) -> dict:
    out = io.StringIO()
    call_command("link_memories", *args, stdout=out, stderr=io.StringIO())
    return json.loads(out.getvalue())["counts"]


def links_of(memory_id):
    memory = Memory.objects.get(pk=memory_id)
    return memory.linked_memory_ids, (memory.metadata or {}).get(LINKS_KEY, [])


def test_a_newer_memory_that_adds_detail_refines_the_older_one(bucket):
    [older] = write(bucket, *days_ago(10, NURSE), sequence=False)
    [newer] = write(bucket, *days_ago(0, NURSE_DETAIL), sequence=False)
    counts = link()
    assert counts["refines"] == 1
    assert links_of(newer) == ([str(older)], [{"id": str(older), "kind": "refines"}])
    assert links_of(older) == ([], [])  # links point from the newer memory to the one it builds on


def test_similar_but_different_facts_are_not_links(bucket):
    write(bucket, *days_ago(5, "My favourite colour is blue.", "I live in Seattle."), sequence=False)
    ids = write(
        bucket,
        *days_ago(0, "My favourite colour is green.", "I live in Portland.", "I enjoy baking bread on Sundays."),
        sequence=False,
    )
    assert link()["refines"] == 0
    assert all(links_of(i) == ([], []) for i in ids)


def test_naming_a_memory_by_id_or_quoting_it_cites_it(bucket, other_bucket):
    [plan] = write(bucket, *days_ago(3, "We are moving to Lisbon next spring"), sequence=False)
    [foreign] = write(other_bucket, *days_ago(0, "A memory of another tenant"), sequence=False)
    by_id, by_quote = write(
        bucket,
        *days_ago(
            0,
            f"The moving plan ({plan}) is confirmed; see also {foreign}.",
            'At dinner Mom repeated "we are moving to Lisbon next spring" to everyone.',
        ),
        sequence=False,
    )
    counts = link()
    assert counts["cites"] == 2
    assert links_of(by_id) == ([str(plan)], [{"id": str(plan), "kind": "cites"}])  # the other tenant's id: ignored
    assert links_of(by_quote) == ([str(plan)], [{"id": str(plan), "kind": "cites"}])


def test_links_are_recorded_once_and_existing_links_are_kept(bucket):
    [older] = write(bucket, *days_ago(10, NURSE), sequence=False)
    [newer] = write(bucket, *days_ago(0, NURSE_DETAIL), sequence=False)
    superseded = "00000000-0000-0000-0000-0000000000aa"
    Memory.objects.filter(pk=newer).update(linked_memory_ids=[superseded], metadata={"source": "chat"})
    link()
    link("--full")
    assert links.links_find_for(memory_ids=[newer])["refines"] == 1  # found again, stored once
    ids, kinds = links_of(newer)
    assert ids == [superseded, str(older)]
    assert kinds == [{"id": str(older), "kind": "refines"}]
    assert Memory.objects.get(pk=newer).metadata["source"] == "chat"


def test_the_pass_is_incremental_and_runs_the_graph_supersession_pass_on_changed_buckets(bucket, monkeypatch):
    import graph.participants

    calls = []

    def supersession_pass(*, bucket):
        calls.append(bucket.pk)
        return SimpleNamespace(superseded=0)

    monkeypatch.setattr(graph.participants, "supersession_pass", supersession_pass)
    write(bucket, *days_ago(0, NURSE), sequence=False)
    assert link()["scanned"] == 1
    assert calls == [bucket.pk]
    assert link()["scanned"] == 0  # nothing new: no rescan, no supersession pass
    assert calls == [bucket.pk]


def test_without_a_listener_the_supersedes_step_is_skipped(bucket, monkeypatch):
    from memories import participants

    monkeypatch.delitem(participants._registered, "graph")  # the graph's participant is back after the test
    write(bucket, *days_ago(0, NURSE), sequence=False)
    counts = link()
    assert counts["scanned"] == 1 and counts["superseded"] == 0


def test_with_the_graph_switched_off_the_supersedes_step_is_skipped(bucket, settings, monkeypatch):
    import graph.participants

    settings.ENGRAM_GRAPH_ENABLED = False
    monkeypatch.setattr(graph.participants, "supersession_pass", lambda **kwargs: pytest.fail("the graph is off"))
    write(bucket, *days_ago(0, NURSE), sequence=False)
    counts = link()
    assert counts["scanned"] == 1 and counts["superseded"] == 0
