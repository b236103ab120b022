"""The console's pages through Django's test client: what they show, what they change, who may."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from audit.models import AuditEvent
from engram_site.models import JobRun, JobStatus
from maintenance.models import ConflictCandidate
from memories.models import Memory, MemoryAccess
from memories.services.buckets import bucket_create
from tenants.models import Bucket
from tests.factories import make_duplicate_candidate, make_graph_fact, write

pytestmark = pytest.mark.django_db

COFFEE = "I prefer dark roast coffee in the morning."
COFFEE_AGAIN = "In the morning I prefer a dark roast coffee."


def test_the_index_shows_pending_reviews_and_the_console_pages(admin_client, bucket):
    make_duplicate_candidate(bucket, *write(bucket, COFFEE, COFFEE_AGAIN, sequence=False))
    page = admin_client.get("/admin/").content.decode()
    assert 'id="pending-review-count" class="console-badge">1</span>' in page
    for url in ("/admin/console/review/", "/admin/console/topics/", "/admin/console/bucket-merge/",
                "/admin/console/playground/", "/admin/console/health/", "/admin/memories/deletedmemory/",
                "/admin/audit/auditevent/", "/admin/console/entities/"):  # fmt: skip
        assert url in page
        assert admin_client.get(url).status_code == 200, url


def test_health_shows_counts_waiting_rows_reviews_jobs_and_the_hnsw_index(admin_client, bucket, settings):
    write(bucket, COFFEE, COFFEE_AGAIN, sequence=False)
    settings.ENGRAM_EMBEDDINGS_ENABLED = False
    write(bucket, "The model was down for this one.", sequence=False)
    settings.ENGRAM_EMBEDDINGS_ENABLED = True
    make_duplicate_candidate(bucket, *Memory.objects.for_bucket(bucket).values_list("id", flat=True)[:2])
    now = timezone.now()
    JobRun.objects.create(
        name="reindex_hnsw", status=JobStatus.SUCCEEDED, started_at=now, finished_at=now,
        counts={"idx_memories_embedding_hnsw": {"size_before": 4096, "size_after": 2048, "seconds": 0.5}},
    )  # fmt: skip
    JobRun.objects.create(name="classify", status=JobStatus.FAILED, started_at=now, error="model exploded")
    response = admin_client.get("/admin/console/health/")
    report = response.context["report"]
    [row] = [t for t in report.tenants if t.tenant.pk == bucket.tenant_id]
    assert (row.buckets, row.memories, row.pending_embeddings, row.pending_lemmas, row.pending_reviews) == (
        1,
        3,
        1,
        0,
        1,
    )
    [hnsw] = [i for i in report.indexes if i.name == "idx_memories_embedding_hnsw"]
    assert hnsw.size_bytes > 0 and hnsw.valid and hnsw.last_reindex_result["seconds"] == 0.5
    assert {run.name: run.status for run in report.jobs} == {"reindex_hnsw": "succeeded", "classify": "failed"}
    page = response.content.decode()
    assert "idx_memories_embedding_hnsw" in page and "4.0\xa0KB → 2.0\xa0KB" in page and "model exploded" in page


def test_health_does_not_say_no_job_ran_when_the_runs_were_idle_and_lists_every_schedule(admin_client, bucket):
    """Issue 46, item 6: the page said "No job has run yet" while beat counted runs, because runs
    that find nothing to do are not kept; and it left out two of beat's schedules."""
    from engram_site.celery import app
    from maintenance.schedules import DEFAULT_SCHEDULES

    app.loader.import_default_modules()
    assert app.tasks["maintenance.enrichment_sweep"]()["status"] == JobStatus.SUCCEEDED  # nothing to do
    assert not JobRun.objects.exists()
    page = admin_client.get("/admin/console/health/").content.decode()
    assert "No job has run yet" not in page
    assert "No job run is recorded." in page and "found nothing to do are not recorded" in page
    for schedule in DEFAULT_SCHEDULES:
        assert schedule.name in page


def test_review_queue_shows_pairs_side_by_side_and_merges_only_after_confirmation(admin_client, bucket):
    coffee, again = write(bucket, COFFEE, COFFEE_AGAIN, hint_tags=["drinks"], sequence=False)
    pair = make_duplicate_candidate(bucket, coffee, again)
    page = admin_client.get("/admin/console/review/").content.decode()
    assert COFFEE in page and COFFEE_AGAIN in page and "0.970" in page and "drinks" in page
    keep = "a" if pair.memory_a_id == coffee else "b"
    confirm = admin_client.post("/admin/console/review/confirm/", {"pair": f"{pair.pk}:{keep}"})
    assert confirm.status_code == 200 and b"Yes, merge 1 pair" in confirm.content
    assert Memory.objects.filter(pk=again).exists()  # nothing yet
    done = admin_client.post(
        "/admin/console/review/confirm/",
        {"action": f"merge_{keep}", "candidates": [pair.pk], "confirm": "yes"},
    )
    assert done.status_code == 302
    assert list(Memory.objects.for_bucket(bucket).values_list("id", flat=True)) == [coffee]
    event = AuditEvent.objects.get(action="duplicate.merge")
    assert (event.actor_kind, event.actor_label) == ("operator", "admin")


def test_review_keep_both_acts_at_once_and_bulk_actions_work(admin_client, bucket):
    ids = write(bucket, COFFEE, COFFEE_AGAIN, "I drink coffee every morning.", sequence=False)
    first, second = (
        make_duplicate_candidate(bucket, ids[0], ids[1]),
        make_duplicate_candidate(bucket, ids[1], ids[2], similarity=0.91),
    )
    admin_client.post("/admin/console/review/confirm/", {"pair": f"{first.pk}:keep_both"})
    first.refresh_from_db()
    assert first.status == "kept_both"
    admin_client.post(
        "/admin/console/review/confirm/", {"action": "merge_older", "candidates": [second.pk], "confirm": "yes"}
    )
    assert set(Memory.objects.for_bucket(bucket).values_list("id", flat=True)) == {ids[0], ids[1]}


def test_bucket_merge_page_previews_then_merges(admin_client, bucket):
    target = bucket_create(tenant=bucket.tenant, name="archive")
    write(bucket, COFFEE, "I live in Lisbon.")
    write(target, COFFEE)
    form = {"source": bucket.pk, "target": target.pk, "remove_source": "on"}
    preview = admin_client.post("/admin/console/bucket-merge/", form)
    assert preview.status_code == 200
    plan = preview.context["plan"]
    assert (plan.memories_to_move, plan.memories_to_dedup) == (1, 1)
    assert Bucket.objects.filter(pk=bucket.pk).exists()
    done = admin_client.post("/admin/console/bucket-merge/", {**form, "confirm": "yes"})
    assert done.status_code == 302
    assert not Bucket.objects.filter(pk=bucket.pk).exists() and Memory.objects.for_bucket(target).count() == 2


def test_bucket_merge_page_refuses_buckets_of_two_tenants(admin_client, bucket, other_bucket):
    write(bucket, COFFEE, sequence=False)
    response = admin_client.post(
        "/admin/console/bucket-merge/", {"source": bucket.pk, "target": other_bucket.pk, "confirm": "yes"}
    )
    assert response.status_code == 200 and b"same tenant" in response.content
    assert Memory.objects.for_bucket(bucket).count() == 1


def test_the_bucket_admin_action_opens_the_merge_page(admin_client, bucket):
    response = admin_client.post(
        "/admin/tenants/bucket/", {"action": "merge_into_another", "_selected_action": [bucket.pk]}
    )
    assert response.status_code == 302 and response["Location"].endswith(
        f"/admin/console/bucket-merge/?source={bucket.pk}"
    )


def test_the_bucket_form_refuses_a_name_another_bucket_has_in_another_case(admin_client, bucket):
    second = bucket_create(tenant=bucket.tenant, name="Archive")
    response = admin_client.post("/admin/tenants/bucket/add/", {"tenant": bucket.tenant_id, "name": "MAIN"})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {
        "name": ["A bucket named 'main' already exists in Acme (bucket names are unique regardless of case)."]
    }
    url = f"/admin/tenants/bucket/{second.pk}/change/"
    response = admin_client.post(url, {"name": "mAIN", "description": "", "retention_days": 30})
    assert response.status_code == 200
    assert "'main' already exists" in response.context["adminform"].form.errors["name"][0]
    assert sorted(Bucket.objects.filter(tenant_id=bucket.tenant_id).values_list("name", flat=True)) == [
        "Archive", "main"]  # fmt: skip
    # Its own name in another case is no clash.
    assert admin_client.post(url, {"name": "ARCHIVE", "description": "", "retention_days": 30}).status_code == 302
    assert Bucket.objects.get(pk=second.pk).name == "ARCHIVE"


def test_topics_page_groups_renames_after_confirmation_and_reclassifies(admin_client, bucket, monkeypatch):
    ids = write(bucket, "I like ramen.", "Our cat Miso is twelve.", "The car needs new tyres.", sequence=False)
    Memory.objects.filter(pk=ids[0]).update(classified_topic="food")
    Memory.objects.filter(pk=ids[1]).update(classified_topic="pets")
    url = f"/admin/console/topics/{bucket.pk}/"
    page = admin_client.get(url).content.decode()
    assert "food" in page and "pets" in page and "(unlabelled)" in page and "I like ramen." in page
    confirm = admin_client.post(url, {"action": "rename", "rename_from": "food", "rename_to": "cooking"})
    assert confirm.status_code == 200 and confirm.context["count"] == 1
    assert Memory.objects.get(pk=ids[0]).classified_topic == "food"
    admin_client.post(url, {"action": "rename", "rename_from": "food", "rename_to": "cooking", "confirm": "yes"})
    assert Memory.objects.get(pk=ids[0]).classified_topic == "cooking"
    admin_client.post(url, {"action": "merge", "topics": ["cooking", "pets"], "merge_into": "home", "confirm": "yes"})
    assert set(Memory.objects.filter(pk__in=ids[:2]).values_list("classified_topic", flat=True)) == {"home"}
    calls = []

    def fake_reclassify(**kwargs):
        calls.append(kwargs)
        return {"selected": 1, "classified": 1}

    monkeypatch.setattr("maintenance.services.topics.topics_reclassify", fake_reclassify)
    admin_client.post(url, {"action": "reclassify", "topics": ["__unlabelled__"]})
    assert calls[0]["topics"] == [None] and calls[0]["bucket"] == bucket
    detail = admin_client.get(f"/admin/console/topics/{bucket.pk}/memories/?topic=__unlabelled__")
    assert "The car needs new tyres." in detail.content.decode()


def test_playground_explains_results_and_does_not_touch_last_accessed(admin_client, bucket):
    ids = write(bucket, COFFEE, "I live in Lisbon.", "My cat is called Miso.", sequence=False)
    response = admin_client.get(
        "/admin/console/playground/", {"bucket": bucket.pk, "query": "coffee in the morning", "mode": "hybrid",
                                       "limit": 5, "include_superseded": "on"},
    )  # fmt: skip
    assert response.status_code == 200
    result = response.context["result"]
    assert result.hits[0].id == ids[0] and result.hits[0].explain["signals"]
    page = response.content.decode()
    assert COFFEE in page and "keyword" in page and "recency" in page
    from memories import access

    access.flush()
    assert not MemoryAccess.objects.exists()
    assert not Memory.objects.filter(last_accessed_at__isnull=False).exists()


def test_staff_without_permissions_cannot_use_the_console(client, bucket):
    User.objects.create_user("viewer", password="pw-123456789", is_staff=True)
    client.login(username="viewer", password="pw-123456789")
    for url in ("/admin/console/health/", "/admin/console/review/", "/admin/console/bucket-merge/",
                f"/admin/console/topics/{bucket.pk}/", "/admin/console/playground/",
                "/admin/memories/deletedmemory/", f"/admin/console/entities/{bucket.pk}/"):  # fmt: skip
        assert client.get(url).status_code == 403, url


def test_the_console_needs_a_login(client):
    response = client.get("/admin/console/health/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_date_drill_down_answers_200_for_a_row_at_the_end_of_the_calendar(admin_client, bucket):
    # Stored before the API bounded created_at; the next year, month or day after it is past
    # the last date Python can represent.
    last = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
    write(bucket, COFFEE, created_at=last, sequence=False)
    write(bucket, "The oldest import.", created_at=datetime(1, 1, 1, tzinfo=UTC), sequence=False)
    url = "/admin/memories/memory/"
    for query in ("", "?created_at__year=9999", "?created_at__year=9999&created_at__month=12",
                  "?created_at__year=9999&created_at__month=12&created_at__day=31"):  # fmt: skip
        response = admin_client.get(url + query)
        assert response.status_code == 200, query
        assert COFFEE in response.content.decode(), query
        shown = {m.created_at for m in response.context["cl"].result_list}
        assert shown == ({last} if query else {last, datetime(1, 1, 1, tzinfo=UTC)}), query
    response = admin_client.get(url + "?created_at__year=1&created_at__month=1&created_at__day=1")
    assert response.status_code == 200 and "The oldest import." in response.content.decode()
    assert COFFEE not in response.content.decode()


@pytest.mark.parametrize("odd", ["²", "9" * 25, "0", "-1", "１２"])
@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/admin/console/review/confirm/", "pair"),
        ("/admin/console/review/confirm/", "candidates"),
        ("/admin/console/conflicts/resolve/", "pair"),
        ("/admin/console/health/retry/", "failures"),
    ],
)
def test_an_id_that_cannot_name_a_row_changes_nothing_and_is_not_a_server_error(admin_client, bucket, path, field, odd):
    coffee, again = write(bucket, COFFEE, COFFEE_AGAIN, sequence=False)
    pair = make_duplicate_candidate(bucket, coffee, again)
    value = f"{odd}:keep_both" if field == "pair" else odd
    response = admin_client.post(path, {field: value, "action": "keep_both"})
    assert response.status_code in (302, 404)
    pair.refresh_from_db()
    assert pair.status == "pending"


# --- issue 46, item 7: what a logged-in operator sends is never a server error ---------------------

HUGE = "99999999999999999999"


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/admin/memories/memory/", "created_at"),
        ("/admin/memories/deletedmemory/", "deleted_at"),
        ("/admin/audit/auditevent/", "created_at"),
        ("/admin/sources/source/", "created_at"),
        ("/admin/engram_site/jobrun/", "started_at"),
        ("/admin/webhooks/webhookdelivery/", "created_at"),
    ],
)
@pytest.mark.parametrize(
    "period",
    [{"year": HUGE}, {"year": "2024", "month": HUGE}, {"year": "2024", "month": "1", "day": HUGE}],
    ids=["year", "month", "day"],
)
def test_a_huge_date_in_a_drill_down_is_answered_like_any_bad_date(admin_client, bucket, url, field, period):
    query = {f"{field}__{part}": value for part, value in period.items()}
    bad = {f"{field}__{part}": "x" for part in period}
    response = admin_client.get(url, query)
    assert response.status_code == admin_client.get(url, bad).status_code == 302
    assert response["Location"].endswith("?e=1")


@pytest.fixture
def nul_targets(bucket):
    """The pages the probe found a NUL went through to PostgreSQL on: their ids."""
    [memory] = write(bucket, "Ana works at Globex in Lisbon.", sequence=False)
    person, edge = make_graph_fact(bucket, memory, "Nul")
    other = write(bucket, "Ana does not work at Globex.", sequence=False)[0]
    a, b = sorted([memory, other])
    conflict = ConflictCandidate.objects.create(
        tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory_a_id=a, memory_b_id=b, code="work", reason="work",
        score=0.9,
    )  # fmt: skip
    return SimpleNamespace(person=person, edge=edge, conflict=conflict)


NUL_REQUESTS = [
    ("get", "/admin/memories/memory/", lambda t, b: {"agent_id": "\x00"}),
    ("get", "/admin/memories/memory/", lambda t, b: {"q": "coffee\x00"}),
    ("get", "/admin/console/entities/{bucket}/", lambda t, b: {"type": "\x00"}),
    ("get", "/admin/console/topics/{bucket}/memories/", lambda t, b: {"topic": "\x00"}),
    ("get", "/admin/console/playground/", lambda t, b: {"bucket": str(b.pk), "query": "x\x00"}),
    ("post", "/admin/console/entities/{bucket}/{person}/", lambda t, b: {"action": "rename", "name": "Marta\x00"}),
    ("post", "/admin/console/entities/{bucket}/{person}/",
     lambda t, b: {"action": "edge_fix", "edge": t.edge.pk, "predicate": "lives_in", "object_kind": "text",
                   "object": "Porto\x00"}),
    ("post", "/admin/console/conflicts/resolve/",
     lambda t, b: {"pair": f"{t.conflict.pk}:merge_a", "confirm": "yes", "content": "Ana\x00"}),
    ("post", "/admin/console/topics/{bucket}/",
     lambda t, b: {"action": "rename", "rename_from": "work", "rename_to": "jobs\x00", "confirm": "yes"}),
]  # fmt: skip


@pytest.mark.parametrize(("method", "path", "data"), NUL_REQUESTS, ids=range(len(NUL_REQUESTS)))
def test_a_nul_in_any_console_input_is_a_400_and_changes_nothing(admin_client, bucket, nul_targets, method, path, data):
    before = (Memory.objects.count(), AuditEvent.objects.count(), nul_targets.person.name)
    url = path.format(bucket=bucket.pk, person=nul_targets.person.pk)
    response = getattr(admin_client, method)(url, data(nul_targets, bucket))
    assert response.status_code == 400, (url, response.status_code)
    nul_targets.person.refresh_from_db()
    assert (Memory.objects.count(), AuditEvent.objects.count(), nul_targets.person.name) == before


def test_a_nul_in_the_login_form_is_a_form_error(client, db):
    response = client.post("/admin/login/", {"username": "admin\x00", "password": "x\x00"})
    assert response.status_code == 200
    assert response.context["form"].errors
