"""POST /api/v1/search — one search over several buckets (real PostgreSQL, real model)."""

from __future__ import annotations

import uuid

import pytest

from memories.models import Memory
from memories.services.buckets import bucket_create
from tests.factories import make_client, write

pytestmark = pytest.mark.django_db

NOW = "2026-01-01T00:00:00Z"

# Three buckets a multi-agent product reads together: the agent's own, its team's, the user's.
MINE = [
    "The deploy pipeline for the billing service runs every night at two.",
    "I rolled back the billing deploy on Tuesday after the invoice totals drifted.",
    "My notes say the staging database for billing is called ledger-staging.",
]
TEAM = [
    "The team agreed that billing deploys need a second reviewer.",
    "Priya owns the invoice rendering code in the billing service.",
    "The team's on-call rotation changes every Monday morning.",
    "Lunch on Fridays is at the noodle place across the street.",
]
USER = [
    "The user asked for invoices to show totals in euros.",
    "The user prefers short answers without bullet points.",
    "The user's company moved its billing day to the fifth of each month.",
]


def dated(contents, *, day: int = 1) -> list[dict]:
    """``contents`` as memories of month ``day`` of 2025, one a day at 10:00."""
    return [{"content": c, "created_at": f"2025-{day:02d}-{i + 1:02d}T10:00:00Z"} for i, c in enumerate(contents)]


def search_across(api, query, expect=200, **params):
    response = api.post("/api/v1/search", {"query": query, "now": NOW, **params}, format="json")
    assert response.status_code == expect, response.content
    return response.json()


@pytest.fixture
def three(tenant, api):
    mine = bucket_create(tenant=tenant, name="agent")
    team = bucket_create(tenant=tenant, name="team")
    user = bucket_create(tenant=tenant, name="user")
    write(mine, *dated(MINE, day=1), api=api, sequence=False)
    write(team, *dated(TEAM, day=2), api=api, sequence=False)
    write(user, *dated(USER, day=3), api=api, sequence=False)
    return mine, team, user


def _bucket_of(ids) -> dict[str, str]:
    return {str(m.pk): str(m.bucket_id) for m in Memory.objects.filter(pk__in=ids)}


def test_one_fused_budgeted_answer_over_three_buckets(api, three):
    mine, team, user = three
    asked = [str(b.pk) for b in three]
    full = search_across(api, "billing invoice totals", buckets=asked, limit=10)
    assert [b["id"] for b in full["buckets"]] == asked
    assert [b["name"] for b in full["buckets"]] == ["agent", "team", "user"]
    # Every result names the bucket it is really in, and the answer draws on several of them.
    truth = _bucket_of([r["id"] for r in full["results"]])
    assert all(r["bucket_id"] == truth[r["id"]] for r in full["results"])
    assert len({r["bucket_id"] for r in full["results"][:5]}) >= 2
    assert {r["bucket_id"] for r in full["results"]} == {str(mine.pk), str(team.pk), str(user.pk)}
    # One ranking: scores fall monotonically over the whole list, whichever bucket a hit is from.
    scores = [r["score"] for r in full["results"]]
    assert scores == sorted(scores, reverse=True)
    # One limit over the fused list, not one per bucket.
    assert len(search_across(api, "billing invoice totals", buckets=asked, limit=4)["results"]) == 4
    # One token budget over the fused list: the best hits that fit, in the same order.
    costs = [r["token_count"] for r in full["results"]]
    budget = costs[0] + costs[1] + costs[2]
    cut = search_across(api, "billing invoice totals", buckets=asked, token_budget=budget)
    assert cut["total_tokens"] <= budget
    assert [r["id"] for r in cut["results"]] == [r["id"] for r in full["results"][:3]]


def test_buckets_searched_together_rank_as_one_bucket_holding_their_memories(tenant, api, three):
    """BM25 statistics (document count, frequencies, average length) are those of the buckets
    taken together, and the vectors are one walk: the same memories written into one bucket
    get the same scores in the same order. Per-bucket IDF would score "billing" (in every
    bucket) and "noodle" (in one) differently here than over the whole collection."""
    whole = bucket_create(tenant=tenant, name="whole")
    write(whole, *dated(MINE, day=1), api=api, sequence=False)
    write(whole, *dated(TEAM, day=2), api=api, sequence=False)
    write(whole, *dated(USER, day=3), api=api, sequence=False)
    asked = [str(b.pk) for b in three]
    for mode in ("keyword", "hybrid", "vector"):
        for query in ("billing invoice totals", "where is lunch on Fridays", "who owns invoice rendering"):
            body = {"query": query, "mode": mode, "now": NOW, "limit": 20}
            alone = api.post(f"/api/v1/buckets/{whole.pk}/search", body, format="json").json()["results"]
            together = search_across(api, query, mode=mode, buckets=asked, limit=20)["results"]
            assert [(r["content"], r["score"]) for r in together] == [(r["content"], r["score"]) for r in alone], (
                mode,
                query,
            )


def test_a_bucket_searched_alone_answers_as_the_bucket_search(api, three):
    mine, team, _user = three
    for bucket in (mine, team):
        for body in (
            {"query": "billing deploy reviewer", "mode": "hybrid", "explain": True},
            {"query": "billing deploy reviewer", "mode": "keyword", "token_budget": 40},
            {"query": "who owns the invoice code", "mode": "vector", "filters": {"created_after": "2025-01-02T00:00Z"}},
            {"query": "billing", "mode": "graph"},
        ):
            body = {**body, "now": NOW}
            expected = api.post(f"/api/v1/buckets/{bucket.pk}/search", body, format="json").json()
            got = search_across(api, **body, buckets=[str(bucket.pk)])
            assert got.pop("buckets") == [{"id": str(bucket.pk), "name": bucket.name}]
            assert all(hit.pop("bucket_id") == str(bucket.pk) for hit in got["results"])
            assert got == expected, body


def test_the_default_is_every_bucket_the_token_can_read(tenant, other_tenant, api, three):
    outsider = bucket_create(tenant=other_tenant, name="elsewhere")
    write(
        outsider,
        *dated(["The billing invoice totals of another company entirely."]),
        api=make_client(other_tenant),
        sequence=False,
    )
    body = search_across(api, "billing invoice totals")
    assert [b["name"] for b in body["buckets"]] == ["agent", "team", "user"]
    assert {r["bucket_id"] for r in body["results"]} <= {str(b.pk) for b in three}
    assert "another company" not in str(body)


def test_a_token_narrowed_to_one_bucket_searches_that_bucket_only(tenant, three):
    mine, team, _user = three
    narrowed = make_client(tenant, scopes=("read",), bucket=team)
    body = search_across(narrowed, "billing invoice totals")
    assert body["buckets"] == [{"id": str(team.pk), "name": "team"}]
    assert body["results"] and {r["bucket_id"] for r in body["results"]} == {str(team.pk)}
    # Naming another bucket of the tenant is naming a missing one.
    refused = search_across(narrowed, "billing", expect=404, buckets=[str(team.pk), str(mine.pk)])
    assert refused["code"] == "not_found"


def test_a_bucket_the_token_cannot_read_answers_404_and_shows_nothing(tenant, other_tenant, three):
    mine, _team, _user = three
    outsider = make_client(other_tenant, scopes=("admin",))
    own = bucket_create(tenant=other_tenant, name="own")
    control = search_across(outsider, "billing", expect=404, buckets=[str(own.pk), str(uuid.uuid4())])
    for asked in ([str(mine.pk)], [str(own.pk), str(mine.pk)], [str(mine.pk).upper()], ["not-an-id"]):
        refused = search_across(outsider, "billing", expect=404, buckets=asked)
        assert refused == control
    # A token that reads every bucket of its tenant: A's buckets do not exist for it.
    assert search_across(outsider, "billing invoice totals")["results"] == []


@pytest.mark.parametrize(
    "buckets, field",
    [
        ([], "buckets"),
        ("one", "buckets"),
        ([None], "buckets"),
        ("dup", "buckets"),
        ("too many", "buckets"),
    ],
)
def test_a_malformed_bucket_list_answers_400(tenant, api, three, buckets, field):
    ids = [str(b.pk) for b in three]
    if buckets == "dup":
        buckets = [ids[0], ids[1], ids[0]]
    elif buckets == "too many":
        buckets = [str(uuid.uuid4()) for _ in range(101)]
    elif buckets == "one":
        buckets = ids[0]
    body = search_across(api, "billing", expect=400, buckets=buckets)
    assert field in body["errors"]


def test_searching_needs_the_read_scope(tenant, three):
    writer = make_client(tenant, scopes=("write",))
    response = writer.post("/api/v1/search", {"query": "billing"}, format="json")
    assert response.status_code == 403


def test_a_tenant_without_buckets_gets_an_empty_answer(other_tenant):
    body = search_across(make_client(other_tenant, scopes=("read",)), "billing")
    assert body == {"mode_used": "hybrid", "results": [], "warnings": [], "total_tokens": 0, "buckets": []}


def test_document_frequencies_across_buckets_are_each_buckets_added_up(three, django_assert_num_queries):
    from memories.retrieval.stats import bucket_stats

    lexemes = ["invoice", "noodle", "zzzunheard"]
    bucket_stats.clear()
    together = bucket_stats.frequencies_of(list(three), "lemmatized_tsv", lexemes)
    # Counted once for all three buckets, then kept in each bucket's own cache.
    with django_assert_num_queries(0):
        apart = [bucket_stats.document_frequencies(b, "lemmatized_tsv", lexemes) for b in three]
    bucket_stats.clear()
    assert apart == [bucket_stats.document_frequencies(b, "lemmatized_tsv", lexemes) for b in three]
    assert together == {lx: sum(a[lx] for a in apart) for lx in lexemes}
    assert together["noodle"] == 1 and together["zzzunheard"] == 0 and together["invoice"] >= 3


def test_more_readable_buckets_than_the_bound_must_be_named(api, three, monkeypatch):
    from memories.apis import search as apis

    monkeypatch.setattr(apis, "MAX_SEARCH_BUCKETS", 2)
    body = search_across(api, "billing", expect=400)
    assert "name the ones to search" in body["errors"]["buckets"][0]
    assert search_across(api, "billing", buckets=[str(three[0].pk), str(three[1].pk)])["results"]
