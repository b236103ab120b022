"""scan_near_duplicates: pairs above a cosine threshold become pending review candidates."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from engram_site.models import JobRun
from maintenance.models import DuplicateCandidate, DuplicateStatus, ScanCursor
from maintenance.services import duplicates
from memories.models import Memory
from memories.services import buckets as memory_buckets
from memories.services import memories_enrich_all_pending, memory_delete
from memories.services.buckets import bucket_create
from tests.factories import write

pytestmark = pytest.mark.django_db

COFFEE = "I prefer dark roast coffee in the morning."
COFFEE_AGAIN = "In the morning I prefer a dark roast coffee."
NURSE = "My sister Anna works as a nurse in Boston."
NURSE_AGAIN = "My sister Anna is a nurse in Boston."
UNRELATED = ["I am learning to play the cello.", "Our flat has a south-facing balcony.", "The car needs new tyres."]


def scan(*args) -> dict:
    out = io.StringIO()
    call_command("scan_near_duplicates", *args, stdout=out, stderr=io.StringIO())
    return json.loads(out.getvalue())["counts"]


def pairs(bucket) -> set[frozenset]:
    return {frozenset([c.memory_a_id, c.memory_b_id]) for c in DuplicateCandidate.objects.for_bucket(bucket)}


def test_near_duplicates_become_one_pending_candidate_per_pair(bucket):
    coffee, coffee_again, *_ = write(bucket, COFFEE, COFFEE_AGAIN, *UNRELATED)
    counts = scan()
    assert counts["candidates"] == 1 and counts["scanned"] == 5
    [candidate] = DuplicateCandidate.objects.for_bucket(bucket)
    assert {candidate.memory_a_id, candidate.memory_b_id} == {coffee, coffee_again}
    assert candidate.memory_a_id < candidate.memory_b_id
    assert candidate.status == DuplicateStatus.PENDING and candidate.similarity >= 0.9
    assert (candidate.tenant_id, candidate.bucket_id) == (bucket.tenant_id, bucket.pk)
    # Both memories found the pair; a full rescan finds it again: still one row.
    scan("--full")
    assert DuplicateCandidate.objects.for_bucket(bucket).count() == 1
    assert JobRun.objects.filter(name="scan_near_duplicates").count() == 2


def test_the_scan_only_looks_at_memories_added_since_the_last_one(bucket):
    write(bucket, COFFEE, NURSE, *UNRELATED)
    assert scan()["scanned"] == 5
    cursor = ScanCursor.objects.get(bucket=bucket, job="near_duplicates")
    assert cursor.position_at is not None
    nurse_again = write(bucket, NURSE_AGAIN)[0]
    counts = scan()
    assert counts["scanned"] == 1 and counts["candidates"] == 1
    assert any(nurse_again in pair for pair in pairs(bucket))
    # Nothing new: the scheduled run finds nothing to do and keeps no run record.
    from maintenance import tasks

    before = JobRun.objects.count()
    assert tasks.scan_near_duplicates.apply().get()["status"] == "succeeded"
    assert JobRun.objects.count() == before


def test_pairs_never_cross_buckets_or_tenants(bucket, other_bucket):
    second = bucket_create(tenant=bucket.tenant, name="second")
    write(bucket, COFFEE)
    write(second, COFFEE_AGAIN)
    write(other_bucket, COFFEE_AGAIN, NURSE)
    scan()
    assert DuplicateCandidate.objects.count() == 0


def test_a_memory_still_waiting_for_its_embedding_is_not_skipped(bucket, settings):
    write(bucket, COFFEE)
    settings.ENGRAM_EMBEDDINGS_ENABLED = False
    late = write(bucket, COFFEE_AGAIN)[0]  # the model was down for this one
    settings.ENGRAM_EMBEDDINGS_ENABLED = True
    write(bucket, *UNRELATED)
    scan()
    assert not DuplicateCandidate.objects.exists()
    cursor = ScanCursor.objects.get(bucket=bucket, job="near_duplicates")
    assert cursor.position_at < Memory.objects.get(pk=late).created_at  # it waits before the unembedded row
    memories_enrich_all_pending()
    scan()
    assert any(late in pair for pair in pairs(bucket))


def test_the_per_write_hint_compares_new_memories_with_their_bucket(bucket):
    write(bucket, COFFEE, *UNRELATED)
    new = write(bucket, COFFEE_AGAIN)
    assert duplicates.near_duplicates_find_for(memory_ids=new) == {"scanned": 1, "candidates": 1}
    assert duplicates.near_duplicates_find_for(memory_ids=new)["candidates"] == 0  # idempotent


def test_candidates_go_with_their_memories(bucket, other_bucket):
    ids = write(bucket, COFFEE, COFFEE_AGAIN)
    write(other_bucket, NURSE, NURSE_AGAIN)
    scan()
    assert DuplicateCandidate.objects.count() == 2
    memory_delete(memory=Memory.objects.get(pk=ids[0]))
    assert not DuplicateCandidate.objects.for_bucket(bucket).exists()
    memory_buckets.bucket_delete(bucket=other_bucket)  # the database cascades, in one statement
    assert not DuplicateCandidate.objects.exists()


def test_operators_review_candidates_in_the_admin(bucket, admin_client):
    write(bucket, COFFEE, COFFEE_AGAIN)
    scan()
    candidate = DuplicateCandidate.objects.get()
    page = admin_client.get("/admin/maintenance/duplicatecandidate/?status__exact=pending").content.decode()
    assert COFFEE in page and COFFEE_AGAIN in page
    response = admin_client.post(
        "/admin/maintenance/duplicatecandidate/", {"action": "keep_both", "_selected_action": [candidate.pk]}
    )
    assert response.status_code == 302
    candidate.refresh_from_db()
    assert candidate.status == DuplicateStatus.KEPT_BOTH and candidate.reviewed_at is not None
