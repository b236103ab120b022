"""Contradictions: the detector, the background check that stores pairs, and the three
resolutions (keep both, supersede, merge) over the API, each with its history and audit."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from audit.models import AuditEvent
from maintenance import conflict_detector
from maintenance.models import ConflictCandidate, ConflictStatus, DuplicateCandidate
from maintenance.services import conflicts
from memories.models import DeletedMemory, Memory, MemoryVersion, VersionKind
from memories.services.buckets import bucket_create
from memories.services.merge import memories_absorb
from tests.factories import make_client, write

pytestmark = pytest.mark.django_db

VEGETARIAN = "I'm vegetarian."
STEAK = "I had steak again last night, love it."
UNRELATED = ["Our flat has a south-facing balcony.", "The car needs new tyres before winter."]


def scan(*args) -> dict:
    out = io.StringIO()
    call_command("scan_conflicts", *args, stdout=out, stderr=io.StringIO())
    return json.loads(out.getvalue())["counts"]


def url(bucket, suffix=""):
    return f"/api/v1/buckets/{bucket.pk}/conflicts{suffix}"


@pytest.fixture
def found(bucket):
    """A bucket with one contradiction (vegetarian / steak) among unrelated memories, found."""
    vegetarian, steak, *_ = write(bucket, VEGETARIAN, STEAK, *UNRELATED)
    counts = conflicts.conflicts_find_for(memory_ids=[steak])
    assert counts == {"scanned": 1, "conflicts": 1}
    [candidate] = ConflictCandidate.objects.for_bucket(bucket)
    return candidate, vegetarian, steak


# --- the detector ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "code"),
    [
        ("I'm vegetarian.", "I had steak again, love it.", "diet"),
        ("My sister is Anna.", "My only sister Maria is visiting.", "one_value"),
        ("I don't drink coffee.", "I drink coffee.", "negation"),
        ("I love jazz.", "I hate jazz.", "antonym"),
        # A habit that changed, an age that changed, never owned against sold, single against
        # married, opening days: each found whichever memory came first.
        ("I don't drink coffee at all, it gives me headaches.", "I drink two cups of coffee every morning now.",
         "negation"),
        ("I quit smoking two years ago.", "I smoke about ten cigarettes a day.", "negation"),
        ("I'm 34.", "I just turned 35.", "one_value"),
        ("I have never owned a car.", "I sold my car last month.", "negation"),
        ("I'm single.", "I got married in June.", "one_value"),
        ("I'm single and not looking.", "My husband and I just bought a house.", "one_value"),
        ("The bakery is open Monday to Friday.", "The bakery is closed on Mondays.", "schedule"),
        ("The gym is open every day.", "The gym is closed on Sundays.", "schedule"),
        ("The museum opens at 9.", "The museum opens at 10 am.", "schedule"),
        ("I drink two cups of coffee a day.", "I drink five cups of coffee a day.", "quantity"),
        ("I have two kids.", "I have three kids.", "quantity"),
        ("I go to the pool twice a week.", "I stopped going to the pool.", "negation"),  # a place, not the future
        ("My commute takes 45 minutes.", "My commute takes an hour.", "quantity"),  # minutes and hours
    ],
)  # fmt: skip
def test_the_detector_names_the_cue_of_a_contradiction_in_either_order(a, b, code):
    for older, newer in ((a, b), (b, a)):
        finding = conflict_detector.detect(older, newer)
        assert finding is not None and finding.code == code and finding.reason, (older, newer)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("I'm vegetarian.", "I had a veggie burger, love it."),  # compatible
        ("My sister is Anna.", "My sister Maria is visiting."),  # two sisters is possible
        ("I like tea.", "I don't like coffee."),  # different objects
        ("I'm vegetarian.", "My husband had steak."),  # another subject
        ("I love jazz.", "I really love jazz music."),  # a paraphrase
        ("I might go vegan next year.", "I had a steak yesterday."),  # hedged
        ("I don't drink coffee after 4 pm.", "I drink coffee every morning."),  # a narrower negation
        ("I don't drink coffee.", "I drink tea instead of coffee."),
        ("I don't drink coffee.", "My wife drinks coffee every morning."),  # another subject
        ("I sold my car last month.", "I don't have a car anymore."),  # a change both tell
        ("I've never owned a car.", "I drive my dad's car on weekends."),
        ("I've never tried sushi.", "I tried sushi for the first time last night."),
        ("I smoked in my twenties.", "I don't smoke."),  # a past period
        ("I'm 34.", "I'll be 35 next month."),  # the future
        ("I was 25 when I moved to Berlin.", "I'm 32."),
        ("I'm 34 years old.", "I am thirty-four."),
        ("I'm single.", "My best friend just got married."),
        ("The bakery is open Monday to Friday.", "The bakery is closed on Sundays."),
        ("The bakery is open on Sundays.", "The butcher is closed on Sundays."),
        ("The café closes at 6 pm.", "The café closes at 4 pm on Sundays."),
        ("I run 5 km every morning.", "I ran 21 km in the half marathon on Sunday."),
        ("I have two kids.", "My brother has three kids."),
        ("I can't drive.", "My husband drove me to the station."),  # "my husband", not "my drove"
    ],
)
def test_the_detector_leaves_compatible_statements_alone(a, b):
    assert conflict_detector.detect(a, b) is None
    assert conflict_detector.detect(b, a) is None


# --- finding pairs in the background ---------------------------------------------------------------


def test_a_contradiction_is_stored_once_with_its_reason_and_found_again_by_no_scan(found, bucket):
    candidate, vegetarian, steak = found
    assert {candidate.memory_a_id, candidate.memory_b_id} == {vegetarian, steak}
    assert candidate.memory_a_id < candidate.memory_b_id
    assert (candidate.code, candidate.status) == ("diet", ConflictStatus.OPEN)
    assert "vegetarian" in candidate.reason and "steak" in candidate.reason
    assert candidate.found_at is not None and candidate.similarity is not None
    # The hourly scan sees every memory (both sides find the pair): still one row, nothing else raised.
    assert scan("--full")["scanned"] == 4
    assert ConflictCandidate.objects.for_bucket(bucket).count() == 1


def test_the_check_runs_in_the_worker_after_enrichment_not_in_the_write(
    bucket, settings, celery_eager, django_capture_on_commit_callbacks
):
    settings.ENGRAM_EMBEDDINGS_ENABLED = False
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        write(bucket, VEGETARIAN, STEAK)
    assert not ConflictCandidate.objects.exists()  # the write itself found nothing
    settings.ENGRAM_EMBEDDINGS_ENABLED = True
    for callback in callbacks:  # the commit: enrichment, then the bucket's checks (eagerly, here)
        callback()
    assert ConflictCandidate.objects.for_bucket(bucket).get().code == "diet"


def test_a_diet_pair_is_found_by_full_text_even_without_a_near_neighbour(bucket):
    """ "vegetarian" and "steak" are far apart in meaning: the diet probe finds the pair by its words."""
    vegetarian, steak, *others = write(bucket, VEGETARIAN, STEAK, *UNRELATED)
    assert conflicts._lexical_partners(
        tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory_id=steak, content=STEAK
    ) == [vegetarian]
    stored = conflicts._store_conflicts(tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory_id=steak, found=[])
    assert stored == 1
    assert ConflictCandidate.objects.get().similarity is None  # not found by meaning


def test_pairs_never_cross_buckets(bucket, other_bucket):

    second = bucket_create(tenant=bucket.tenant, name="second")
    write(bucket, VEGETARIAN)
    write(second, STEAK)
    write(other_bucket, STEAK)
    assert scan()["conflicts"] == 0
    assert ConflictCandidate.objects.count() == 0


def test_finding_a_pair_changes_no_memory(bucket):
    ids = write(bucket, VEGETARIAN, STEAK)
    before = list(Memory.objects.filter(pk__in=ids).order_by("pk").values())
    versions = MemoryVersion.objects.count()
    scan()
    assert ConflictCandidate.objects.count() == 1
    assert list(Memory.objects.filter(pk__in=ids).order_by("pk").values()) == before
    assert MemoryVersion.objects.count() == versions


def test_finding_pairs_leaves_search_results_unchanged(bucket):
    """Only an operator's resolution changes ranking: finding pairs must not (recall is unchanged)."""
    from datetime import UTC, datetime

    from memories.retrieval import memories_search

    write(bucket, VEGETARIAN, STEAK, "I don't drink coffee.", "I drink coffee.", *UNRELATED)
    now = datetime(2030, 1, 1, tzinfo=UTC)

    def ranked(mode):
        hits = memories_search(bucket=bucket, query="what do I eat and drink", mode=mode, now=now, record_access=False)
        return [(hit.row["id"], round(hit.score, 9)) for hit in hits.hits]

    before = {mode: ranked(mode) for mode in ("hybrid", "keyword", "vector")}
    assert scan()["conflicts"] == 2
    assert {mode: ranked(mode) for mode in ("hybrid", "keyword", "vector")} == before


# --- the API: list and the three resolutions ------------------------------------------------------


def test_the_list_shows_open_pairs_with_both_memories(found, bucket, api):
    candidate, vegetarian, steak = found
    body = api.get(url(bucket)).json()
    assert body["count"] == 1
    [item] = body["results"]
    assert item["id"] == candidate.pk and item["code"] == "diet" and item["status"] == "open"
    contents = {
        item["memory_a"]["id"]: item["memory_a"]["content"],
        item["memory_b"]["id"]: item["memory_b"]["content"],
    }
    assert contents == {str(vegetarian): VEGETARIAN, str(steak): STEAK}
    assert item["found_at"] and item["reason"]
    assert api.get(url(bucket), {"status": "kept_both"}).json()["count"] == 0
    bad = api.get(url(bucket), {"status": "maybe"})
    assert bad.status_code == 400 and "status" in bad.json()["errors"]


def _side(candidate, memory_id) -> str:
    return "a" if candidate.memory_a_id == memory_id else "b"


def test_keep_both_closes_the_pair_for_good(found, bucket, api):
    candidate, vegetarian, steak = found
    response = api.post(url(bucket, f"/{candidate.pk}/resolve"), {"action": "keep_both"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "kept_both"
    candidate.refresh_from_db()
    assert candidate.status == ConflictStatus.KEPT_BOTH and candidate.resolved_at and candidate.resolved_by
    assert not Memory.objects.filter(pk__in=[vegetarian, steak], superseded_by__isnull=False).exists()
    assert AuditEvent.objects.filter(action="conflict.keep_both").count() == 1
    # Never raised again, and the open list is empty.
    scan("--full")
    assert ConflictCandidate.objects.get().status == ConflictStatus.KEPT_BOTH
    assert api.get(url(bucket)).json()["count"] == 0
    again = api.post(url(bucket, f"/{candidate.pk}/resolve"), {"action": "keep_both"}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "already_resolved"


def test_supersede_marks_the_other_memory_with_history_and_search_demotes_it(found, bucket, api):
    candidate, vegetarian, steak = found
    response = api.post(
        url(bucket, f"/{candidate.pk}/resolve"), {"action": "supersede", "keep": _side(candidate, steak)},
        format="json",
    )  # fmt: skip
    assert response.status_code == 200, response.content
    assert response.json() | {} == {
        "id": candidate.pk, "action": "supersede", "status": "superseded", "kept_id": str(steak),
        "other_id": str(vegetarian),
    }  # fmt: skip
    old = Memory.objects.get(pk=vegetarian)
    assert old.superseded_by == steak and old.superseded_at is not None
    [version] = MemoryVersion.objects.filter(memory_id=vegetarian, kind=VersionKind.SUPERSEDED)
    assert version.previous == {"superseded_at": None, "superseded_by": None}
    assert version.actor_kind == "token"  # the token that resolved it, not Engram
    history = api.get(f"/api/v1/memories/{vegetarian}/history").json()
    assert "superseded" in json.dumps(history)
    event = AuditEvent.objects.get(action="conflict.supersede")
    assert event.details["superseded_id"] == str(vegetarian)
    hits = api.post(f"/api/v1/buckets/{bucket.pk}/search", {"query": "vegetarian", "explain": True}, format="json")
    flagged = {h["id"]: h["superseded"] for h in hits.json()["results"]}
    assert flagged.get(str(vegetarian)) is True


def test_the_graphs_recomputation_does_not_undo_a_persons_supersession(found, bucket, api):
    from memories.services.supersession import memory_supersede

    candidate, vegetarian, steak = found
    api.post(url(bucket, f"/{candidate.pk}/resolve"), {"action": "supersede", "keep": _side(candidate, steak)},
             format="json")  # fmt: skip
    # What the graph's pass does for a memory none of its timelines closes (actor None: Engram).
    memory_supersede(memory_id=vegetarian, at=None, by=None, previous_by=steak)
    assert Memory.objects.get(pk=vegetarian).superseded_by == steak
    assert MemoryVersion.objects.filter(memory_id=vegetarian, kind=VersionKind.SUPERSEDED).count() == 1


def test_a_supersede_is_undone_the_memory_current_and_the_pair_open_again(found, bucket, api, outsider_api):
    candidate, vegetarian, steak = found
    resolve, undo = url(bucket, f"/{candidate.pk}/resolve"), url(bucket, f"/{candidate.pk}/undo")
    assert api.post(undo, {}, format="json").status_code == 409  # nothing to undo on an open pair
    api.post(resolve, {"action": "supersede", "keep": _side(candidate, steak)}, format="json")
    assert outsider_api.post(undo, {}, format="json").status_code == 404
    assert Memory.objects.get(pk=vegetarian).superseded_by == steak
    response = api.post(undo, {}, format="json")
    assert response.status_code == 200, response.content
    assert response.json() == {"id": candidate.pk, "action": "undo", "status": "open", "kept_id": str(steak),
                               "other_id": str(vegetarian)}  # fmt: skip
    old = Memory.objects.get(pk=vegetarian)
    assert (old.superseded_at, old.superseded_by) == (None, None)
    assert str(vegetarian) not in Memory.objects.get(pk=steak).linked_memory_ids
    versions = MemoryVersion.objects.filter(memory_id=vegetarian, kind=VersionKind.SUPERSEDED).order_by("id")
    assert [v.actor_kind for v in versions] == ["token", "token"]  # the undo is in the history, by its token
    event = AuditEvent.objects.get(action="conflict.undo")
    assert event.details["superseded_id"] == str(vegetarian) and event.actor_id == str(api.token.pk)
    candidate.refresh_from_db()
    assert (candidate.status, candidate.kept_memory_id, candidate.resolved_at) == (ConflictStatus.OPEN, None, None)
    assert api.post(undo, {}, format="json").json()["code"] == "not_superseded"
    # Open again: it can be decided anew.
    assert api.post(resolve, {"action": "keep_both"}, format="json").status_code == 200


def test_merge_keeps_one_memory_with_new_content_and_history(found, bucket, api):
    candidate, vegetarian, steak = found
    response = api.post(
        url(bucket, f"/{candidate.pk}/resolve"),
        {"action": "merge", "keep": _side(candidate, steak), "content": "I used to be vegetarian; I eat meat now."},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert not Memory.objects.filter(pk=vegetarian).exists()
    assert DeletedMemory.objects.filter(pk=vegetarian).exists()  # restorable until the purge
    assert Memory.objects.get(pk=steak).content == "I used to be vegetarian; I eat meat now."
    kinds = set(MemoryVersion.objects.filter(memory_id__in=[vegetarian, steak]).values_list("kind", flat=True))
    assert {VersionKind.MERGED, VersionKind.EDITED} <= kinds
    # The pair went with the absorbed memory; the audit event keeps the decision and the removed text.
    assert not ConflictCandidate.objects.exists()
    event = AuditEvent.objects.get(action="conflict.merge")
    assert event.details["removed"]["content"] == VEGETARIAN and event.details["content_replaced"] is True


def test_bad_resolutions_are_400_and_change_nothing(found, bucket, api):
    candidate, vegetarian, steak = found
    resolve = url(bucket, f"/{candidate.pk}/resolve")
    for body in (
        {"action": "delete"},
        {"action": "supersede"},  # which one stays?
        {"action": "supersede", "keep": "c"},
        {"action": "keep_both", "keep": "a"},
        {"action": "supersede", "keep": "a", "content": "x"},
        {"action": "merge", "keep": "a", "content": "   "},
        {"action": "merge", "keep": "a", "extra": 1},
        {},
    ):
        response = api.post(resolve, body, format="json")
        assert response.status_code == 400, (body, response.content)
    assert ConflictCandidate.objects.get().status == ConflictStatus.OPEN
    assert Memory.objects.filter(pk__in=[vegetarian, steak], superseded_by__isnull=True).count() == 2
    assert api.post(url(bucket, "/999999/resolve"), {"action": "keep_both"}, format="json").status_code == 404
    assert api.post(url(bucket, "/x/resolve"), {"action": "keep_both"}, format="json").status_code == 404
    assert api.post(url(bucket, f"/{10**30}/resolve"), {"action": "keep_both"}, format="json").status_code == 404


def test_a_read_token_lists_but_cannot_resolve(found, bucket, tenant):
    candidate, *_ = found
    reader = make_client(tenant, scopes=("read",))
    assert reader.get(url(bucket)).status_code == 200
    response = reader.post(url(bucket, f"/{candidate.pk}/resolve"), {"action": "keep_both"}, format="json")
    assert response.status_code == 403
    assert ConflictCandidate.objects.get().status == ConflictStatus.OPEN


def test_an_outsider_gets_404_and_changes_nothing(found, bucket, outsider_api):
    candidate, *_ = found
    assert outsider_api.get(url(bucket)).status_code == 404
    response = outsider_api.post(url(bucket, f"/{candidate.pk}/resolve"), {"action": "keep_both"}, format="json")
    assert response.status_code == 404
    assert ConflictCandidate.objects.get().status == ConflictStatus.OPEN


# --- following merges and erasures -------------------------------------------------------------------


def test_a_merge_elsewhere_repoints_the_pair_to_the_survivor(found, bucket):
    candidate, vegetarian, steak = found
    [again] = write(bucket, "I am a vegetarian, for years now.")
    DuplicateCandidate.objects.all().delete()
    memories_absorb(mapping={vegetarian: again})
    candidate.refresh_from_db()
    assert {candidate.memory_a_id, candidate.memory_b_id} == {again, steak}
    assert candidate.status == ConflictStatus.OPEN


def test_a_bucket_merge_moves_the_pairs_and_the_scan_compares_the_moved_memories(bucket):
    from audit.services import Actor
    from memories.services.buckets import bucket_merge

    source = bucket_create(tenant=bucket.tenant, name="source")
    write(bucket, VEGETARIAN)
    scan()
    write(source, STEAK, "I don't drink coffee.", "I drink coffee.")
    scan()
    assert ConflictCandidate.objects.for_bucket(source).count() == 1  # coffee, inside the source
    bucket_merge(source=source, target=bucket, remove_source=True, actor=Actor.system("test"))
    assert ConflictCandidate.objects.for_bucket(bucket).count() == 1
    # The target's cursor went back to the oldest moved memory: the steak meets the vegetarian.
    scan()
    assert sorted(ConflictCandidate.objects.for_bucket(bucket).values_list("code", flat=True)) == ["diet", "negation"]


def test_an_erasure_counts_and_deletes_the_pairs(found, bucket, tenant):
    from audit.services import Actor
    from memories.services.erasure import memories_erase

    candidate, vegetarian, steak = found
    Memory.objects.filter(pk=steak).update(agent_id="agent-erase")
    report = memories_erase(tenant=tenant, fields={"agent_id": "agent-erase"}, actor=Actor.system("test"))
    assert report.conflict_candidates == 1
    assert not ConflictCandidate.objects.exists()
