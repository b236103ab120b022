"""Near-duplicate review: merge (keep A or B), keep both, bulk decisions."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from audit.models import AuditEvent
from audit.services import Actor
from engram_site.exceptions import Conflict, NotFound
from graph.models import Edge, Entity, Mention
from maintenance.models import DuplicateCandidate, DuplicateStatus
from maintenance.services import duplicate_review, duplicates
from memories.links import LINKS_KEY
from memories.models import Memory
from memories.services import memory_update
from memories.services.links import links_add
from tests.factories import make_duplicate_candidate, write

pytestmark = pytest.mark.django_db

COFFEE = "I prefer dark roast coffee in the morning."
COFFEE_AGAIN = "In the morning I prefer a dark roast coffee."
NURSE = "My sister Anna works as a nurse in Boston."
NURSE_AGAIN = "My sister Anna is a nurse in Boston."
ACTOR = Actor.system("test")


def scan(*args) -> dict:
    out = io.StringIO()
    call_command("scan_near_duplicates", *args, stdout=out, stderr=io.StringIO())
    return json.loads(out.getvalue())["counts"]


def side(candidate, memory_id) -> str:
    return "a" if candidate.memory_a_id == memory_id else "b"


def test_merge_keeps_one_row_and_unites_tags_links_and_graph(bucket):
    coffee, again, other = write(bucket, COFFEE, COFFEE_AGAIN, NURSE, sequence=False)
    memory_update(memory=Memory.objects.get(pk=coffee), hint_tags=["drinks"], metadata={"source": "chat"})
    memory_update(memory=Memory.objects.get(pk=again), hint_tags=["morning", "drinks"], agent_id="agent-7")
    links_add(memory_id=again, links=[(other, "refines")])
    links_add(memory_id=other, links=[(again, "cites")])
    user = Entity.objects.create(
        tenant_id=bucket.tenant_id, bucket_id=bucket.pk, name="user", normalized_name="user", type="SPEAKER"
    )
    coffee_entity = Entity.objects.create(
        tenant_id=bucket.tenant_id, bucket_id=bucket.pk, name="coffee", normalized_name="coffee", type="THING"
    )
    for memory_id in (coffee, again):
        Mention.objects.create(tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory_id=memory_id, entity=user)
    Mention.objects.create(tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory_id=again, entity=coffee_entity)
    moved = Edge.objects.create(
        tenant_id=bucket.tenant_id, bucket_id=bucket.pk, subject=user, predicate="prefers", object_entity=coffee_entity,
        valid_from=Memory.objects.get(pk=again).created_at, source_memory_id=again,
    )  # fmt: skip
    candidate = make_duplicate_candidate(bucket, coffee, again, similarity=0.95)

    result = duplicate_review.duplicate_merge(candidate=candidate, keep=side(candidate, coffee), actor=ACTOR)

    assert (result.kept_id, result.removed_id) == (coffee, again)
    assert not Memory.objects.filter(pk=again).exists()
    kept = Memory.objects.get(pk=coffee)
    assert kept.content == COFFEE
    assert kept.hint_tags == ["drinks", "morning"]
    assert kept.agent_id == "agent-7" and kept.metadata["source"] == "chat"
    assert kept.linked_memory_ids == [str(other)]
    assert kept.metadata[LINKS_KEY] == [{"id": str(other), "kind": "refines"}]
    citer = Memory.objects.get(pk=other)
    assert citer.linked_memory_ids == [str(coffee)] and citer.metadata[LINKS_KEY] == [
        {"id": str(coffee), "kind": "cites"}
    ]
    assert set(Mention.objects.filter(memory_id=coffee).values_list("entity_id", flat=True)) == {
        user.pk,
        coffee_entity.pk,
    }
    assert Edge.objects.get(pk=moved.pk).source_memory_id == coffee
    assert Entity.objects.get(pk=user.pk).mention_count == 1
    # The candidate went with the removed memory; the audit event is the record, with its content.
    assert not DuplicateCandidate.objects.exists()
    event = AuditEvent.objects.get(action="duplicate.merge")
    assert event.object_ids == [str(coffee), str(again)]
    assert event.details["removed"]["content"] == COFFEE_AGAIN and event.details["kept_id"] == str(coffee)


def test_merge_keeping_b_removes_a(bucket):
    coffee, again = write(bucket, COFFEE, COFFEE_AGAIN, sequence=False)
    candidate = make_duplicate_candidate(bucket, coffee, again, similarity=0.95)
    keep = "b"
    survivor = candidate.memory_b_id
    duplicate_review.duplicate_merge(candidate=candidate, keep=keep, actor=ACTOR)
    assert list(Memory.objects.for_bucket(bucket).values_list("id", flat=True)) == [survivor]


def test_supersession_and_other_candidates_follow_the_survivor(bucket):
    coffee, again, nurse, nurse_again = write(bucket, COFFEE, COFFEE_AGAIN, NURSE, NURSE_AGAIN, sequence=False)
    Memory.objects.filter(pk=nurse).update(superseded_by=again, superseded_at=Memory.objects.get(pk=again).created_at)
    decided = make_duplicate_candidate(bucket, again, nurse_again, status=DuplicateStatus.KEPT_BOTH, similarity=0.95)
    open_pair = make_duplicate_candidate(bucket, again, nurse, similarity=0.95)
    candidate = make_duplicate_candidate(bucket, coffee, again, similarity=0.95)
    duplicate_review.duplicate_merge(candidate=candidate, keep=side(candidate, coffee), actor=ACTOR)
    assert Memory.objects.get(pk=nurse).superseded_by == coffee
    decided.refresh_from_db()
    open_pair.refresh_from_db()
    assert {decided.memory_a_id, decided.memory_b_id} == {coffee, nurse_again}
    assert decided.status == DuplicateStatus.KEPT_BOTH
    assert {open_pair.memory_a_id, open_pair.memory_b_id} == {coffee, nurse}
    assert open_pair.memory_a_id < open_pair.memory_b_id


def test_a_reviewed_or_vanished_pair_is_not_merged_again(bucket):
    coffee, again = write(bucket, COFFEE, COFFEE_AGAIN, sequence=False)
    candidate = make_duplicate_candidate(bucket, coffee, again, similarity=0.95)
    duplicate_review.duplicate_keep_both(candidate=candidate, actor=ACTOR)
    with pytest.raises(Conflict):
        duplicate_review.duplicate_merge(candidate=candidate, keep="a", actor=ACTOR)
    assert Memory.objects.for_bucket(bucket).count() == 2
    DuplicateCandidate.objects.all().delete()
    with pytest.raises(NotFound):
        duplicate_review.duplicate_merge(candidate=candidate, keep="a", actor=ACTOR)


def test_keep_both_is_never_suggested_again(bucket):
    write(bucket, COFFEE, COFFEE_AGAIN, sequence=False)
    scan()
    candidate = DuplicateCandidate.objects.get()
    assert duplicate_review.duplicate_keep_both(candidate=candidate, actor=ACTOR)
    scan("--full")
    duplicates.near_duplicates_find_for(memory_ids=[candidate.memory_a_id, candidate.memory_b_id])
    candidate.refresh_from_db()
    assert candidate.status == DuplicateStatus.KEPT_BOTH
    assert not DuplicateCandidate.objects.undecided().exists()
    event = AuditEvent.objects.get(action="duplicate.keep_both")
    assert event.object_ids == [str(candidate.pk)]


def test_bulk_merge_keeps_the_older_memory_of_each_pair(bucket):
    coffee, again, nurse, nurse_again = write(bucket, COFFEE, COFFEE_AGAIN, NURSE, NURSE_AGAIN, sequence=False)
    make_duplicate_candidate(bucket, coffee, again, similarity=0.95)
    make_duplicate_candidate(bucket, nurse, nurse_again, similarity=0.95)
    result = duplicate_review.duplicates_merge(candidates=DuplicateCandidate.objects.all(), keep="older", actor=ACTOR)
    assert (result.done, result.skipped) == (2, 0)
    assert set(Memory.objects.for_bucket(bucket).values_list("id", flat=True)) == {coffee, nurse}
    assert AuditEvent.objects.filter(action="duplicate.merge").count() == 2


def test_bulk_merge_skips_pairs_an_earlier_merge_resolved(bucket):
    coffee, again, nurse = write(bucket, COFFEE, COFFEE_AGAIN, NURSE, sequence=False)
    make_duplicate_candidate(bucket, coffee, again, similarity=0.99)
    make_duplicate_candidate(bucket, again, nurse, similarity=0.91)
    make_duplicate_candidate(bucket, coffee, nurse, similarity=0.90)
    result = duplicate_review.duplicates_merge(candidates=DuplicateCandidate.objects.all(), keep="newer", actor=ACTOR)
    # The first merge makes the other two pairs the same pair: one is dropped, the other merged.
    assert result.done + result.skipped == 3
    assert Memory.objects.for_bucket(bucket).count() == 3 - result.done
    assert not DuplicateCandidate.objects.undecided().exists()


def test_bulk_keep_both_is_one_event_per_tenant(bucket, other_bucket):
    coffee, again = write(bucket, COFFEE, COFFEE_AGAIN, sequence=False)
    x, y = write(other_bucket, NURSE, NURSE_AGAIN, sequence=False)
    make_duplicate_candidate(bucket, coffee, again, similarity=0.95)
    make_duplicate_candidate(other_bucket, x, y, similarity=0.95)
    result = duplicate_review.duplicates_keep_both(candidates=DuplicateCandidate.objects.all(), actor=ACTOR)
    assert result.done == 2
    assert sorted(AuditEvent.objects.values_list("tenant_id", flat=True)) == sorted(
        [bucket.tenant_id, other_bucket.tenant_id]
    )
