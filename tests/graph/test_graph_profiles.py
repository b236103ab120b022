"""Entity profiles (GET /api/v1/buckets/{id}/entities/{entity_id}/profile and
GET /api/v1/buckets/{id}/profile?name=): a person written about over years — moves, jobs,
relations — read back as current facts, history, as of a past time, and a digest within a
token budget; extracted by the real spaCy pipeline, counted by the real tokenizer."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engram_site.providers import embedding, llm, nlp
from graph.models import Entity
from memories.models import Memory
from memories.services.buckets import bucket_create
from tests.factories import make_client, write_extracted

pytestmark = pytest.mark.django_db


def at(year, month=1, day=1):
    return datetime(year, month, day, tzinfo=UTC)


MAYA = [
    ("Maya Patel lives in Porto.", at(2019, 3)),
    ("Maya works at Farfetch as a designer.", at(2019, 6)),
    ("Maya's brother Leo is a chef.", at(2020, 1)),
    ("Maya moved to Lisbon.", at(2021, 5)),
    ("Maya joined Stripe.", at(2022, 9)),
    ("Maya is married to Tomas.", at(2023, 2)),
    ("Maya likes surfing.", at(2023, 4)),
    ("Maya moved to Berlin in 2024.", at(2024, 3)),
    ("Maya's manager is Priya.", at(2024, 4)),
]


@pytest.fixture
def maya(bucket) -> dict[str, str]:
    """Maya's memories, extracted as the worker extracts them: content -> memory id."""
    ids = write_extracted(bucket, *({"content": c, "created_at": when} for c, when in MAYA))
    return {content: str(pk) for (content, _), pk in zip(MAYA, ids, strict=True)}


def profile(api, bucket, **params) -> dict:
    response = api.get(f"/api/v1/buckets/{bucket.pk}/profile", params)
    assert response.status_code == 200, response.content
    return response.json()


def facts(listed: list[dict]) -> list[tuple]:
    return [
        (f["direction"], f["relation"], f["value"], f["valid_from"][:10], (f["valid_to"] or "")[:10]) for f in listed
    ]


def test_a_person_written_about_over_years_has_current_facts_and_history(api, bucket, maya):
    body = profile(api, bucket, name="Maya")
    assert (body["entity"]["name"], body["entity"]["type"]) == ("Maya Patel", "PERSON")
    assert body["as_of"] is None and body["truncated"] is False and "digest" not in body
    # Newest first; Priya is Maya's manager (an edge onto Maya), her brother a symmetric relation.
    assert facts(body["current"]) == [
        ("in", "manager_of", "Priya", "2024-04-01", ""),
        ("out", "lives_in", "Berlin", "2024-01-01", ""),
        ("out", "likes", "surfing", "2023-04-01", ""),
        ("out", "married_to", "Tomas", "2023-02-01", ""),
        ("out", "works_at", "Stripe", "2022-09-01", ""),
        ("out", "sibling_of", "Leo", "2020-01-01", ""),
        ("out", "role", "designer", "2019-06-01", ""),
    ]
    # What a newer value ended, with the interval it held.
    assert facts(body["history"]) == [
        ("out", "lives_in", "Lisbon", "2021-05-01", "2024-01-01"),
        ("out", "works_at", "Farfetch", "2019-06-01", "2022-09-01"),
        ("out", "lives_in", "Porto", "2019-03-01", "2021-05-01"),
    ]
    # Each fact with the memories that state it.
    berlin = body["current"][1]
    assert [m["id"] for m in berlin["memories"]] == [maya["Maya moved to Berlin in 2024."]]
    assert berlin["memories"][0]["content"] == "Maya moved to Berlin in 2024." and berlin["memory_count"] == 1
    assert berlin["entity"]["name"] == "Berlin" and berlin["current"] and berlin["functional"]
    assert [m["id"] for m in body["history"][2]["memories"]] == [maya["Maya Patel lives in Porto."]]
    assert body["current"][2]["entity"] is None  # surfing is a text, not an entity
    related = {r["name"]: (r["current"], r["relations"]) for r in body["related"]}
    assert related["Leo"] == (True, ["sibling_of"]) and related["Priya"] == (True, ["manager_of"])
    assert related["Lisbon"] == (False, ["lives_in"]) and related["Farfetch"] == (False, ["works_at"])
    assert [r["current"] for r in body["related"]] == sorted((r["current"] for r in body["related"]), reverse=True)
    # The same profile by the entity's id.
    by_id = api.get(f"/api/v1/buckets/{bucket.pk}/entities/{body['entity']['id']}/profile")
    assert by_id.status_code == 200 and by_id.json() == body


def test_as_of_gives_the_profile_at_a_past_time_from_what_was_written_by_then(api, bucket, maya):
    early = profile(api, bucket, name="Maya", as_of="2020-06-01T00:00:00Z")
    assert early["as_of"].startswith("2020-06-01")
    assert facts(early["current"]) == [
        ("out", "sibling_of", "Leo", "2020-01-01", ""),
        ("out", "works_at", "Farfetch", "2019-06-01", ""),
        ("out", "role", "designer", "2019-06-01", ""),
        ("out", "lives_in", "Porto", "2019-03-01", ""),
    ]
    assert early["history"] == []
    assert {r["name"] for r in early["related"]} == {"Leo", "Farfetch", "Porto"}

    # Early 2022: in Lisbon, still at Farfetch; Porto is history. What was written later is
    # not known yet: Farfetch was still her employer as of then.
    middle = profile(api, bucket, name="Maya", as_of="2022-01-01T00:00:00Z")
    assert [f[1:3] for f in facts(middle["current"])] == [
        ("lives_in", "Lisbon"), ("sibling_of", "Leo"), ("works_at", "Farfetch"), ("role", "designer"),
    ]  # fmt: skip
    assert facts(middle["history"]) == [("out", "lives_in", "Porto", "2019-03-01", "2021-05-01")]

    # Mid 2024, before Priya was mentioned: Berlin has started (the sentence dates it to 2024).
    late = profile(api, bucket, name="Maya", as_of="2024-03-15T00:00:00Z")
    assert ("lives_in", "Berlin") in [f[1:3] for f in facts(late["current"])]
    assert "Priya" not in str(late)
    assert [f[2] for f in facts(late["history"])] == ["Lisbon", "Farfetch", "Porto"]


def test_a_memory_written_later_about_an_earlier_time_does_not_change_what_was_known_then(api, bucket):
    write_extracted(
        bucket,
        {"content": "Ines lives in Madrid.", "created_at": at(2018)},
        {"content": "Ines moved to Seville in 2019.", "created_at": at(2023)},
    )
    # Today the move is known: Madrid ended in 2019.
    now = profile(api, bucket, name="Ines")
    assert [f[2:] for f in facts(now["current"])] == [("Seville", "2019-01-01", "")]
    assert [f[2:] for f in facts(now["history"])] == [("Madrid", "2018-01-01", "2019-01-01")]
    # As of 2020 nothing had been written about it yet: Madrid was all the memories said.
    then = profile(api, bucket, name="Ines", as_of="2020-01-01T00:00:00Z")
    assert [f[2:] for f in facts(then["current"])] == [("Madrid", "2018-01-01", "")]
    assert then["history"] == []


def test_the_digest_fits_its_budget_and_takes_what_matters_first(api, bucket, maya):
    full = profile(api, bucket, name="Maya", budget=1000)
    digest = full["digest"]
    assert digest.splitlines()[0] == "Maya Patel (person)."
    assert embedding.count_tokens([digest])[0] == full["digest_tokens"] <= 1000
    assert digest.splitlines()[1:5] == [
        "Now:",
        # One value at a time first (where she lives, works, her role), most recent first …
        "- lives in Berlin (since 2024-01-01)",
        "- works at Stripe (since 2022-09-01)",
        "- role: designer (since 2019-06-01)",
    ]
    # … then relations to people, then the rest; then what ended, the most recently ended first.
    assert digest.splitlines()[5:] == [
        "- manager: Priya (since 2024-04-01)",
        "- married to Tomas (since 2023-02-01)",
        "- sibling of Leo (since 2020-01-01)",
        "- likes surfing (since 2023-04-01)",
        "Before:",
        "- lives in Lisbon (2021-05-01 to 2024-01-01)",
        "- works at Farfetch (2019-06-01 to 2022-09-01)",
        "- lives in Porto (2019-03-01 to 2021-05-01)",
    ]
    for budget in (1, 8, 20, 35, 60, 90):
        small = profile(api, bucket, name="Maya", budget=budget)
        counted = embedding.count_tokens([small["digest"]])[0] if small["digest"] else 0
        assert counted == small["digest_tokens"] <= budget, small["digest"]
        lines = small["digest"].splitlines()
        # Whatever fits, in the order of the full digest.
        assert [line for line in digest.splitlines() if line in lines] == lines
    assert profile(api, bucket, name="Maya", budget=1)["digest"] == ""  # not even the name fits
    assert profile(api, bucket, name="Maya", budget=1)["digest_tokens"] == 0
    assert len(profile(api, bucket, name="Maya", budget=35)["digest"].splitlines()) >= 3
    # The digest of a past time says so, and holds what was valid then.
    past = profile(api, bucket, name="Maya", as_of="2020-06-01T00:00:00Z", budget=200)["digest"]
    assert past.splitlines()[0] == "Maya Patel (person), as of 2020-06-01." and "Porto (since" in past
    assert "Before:" not in past and "Berlin" not in past


def test_a_profile_calls_no_model(api, bucket, maya, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a profile must not run a model")

    for module, name in ((embedding, "get_model"), (embedding, "embed_texts"), (embedding, "embed_query"),
                         (nlp, "get_pipeline"), (llm, "chat")):  # fmt: skip
        monkeypatch.setattr(module, name, refuse)
    body = profile(api, bucket, name="Maya", budget=100)
    assert body["digest"] and body["current"]


def test_names_resolve_as_extraction_resolves_them(api, bucket):
    write_extracted(
        bucket,
        "My sister Anna lives in Boston.",
        "Robert Smith works at Initech.",
        "Alex Kim lives in Oslo.",
        "Alex Moreno works at Acme.",
        "My sister Beth lives in Denver.",
    )
    # A lone first name (or a nickname), or a surname, is the bucket's one person of that name.
    assert profile(api, bucket, name="Bob")["entity"]["name"] == "Robert Smith"
    assert profile(api, bucket, name="Smith")["entity"]["name"] == "Robert Smith"
    assert profile(api, bucket, name="robert smith")["entity"]["name"] == "Robert Smith"
    # An alias; the user (the speaker) has a profile too.
    assert profile(api, bucket, name="Anna")["entity"]["aliases"] == ["user sister"]
    user = profile(api, bucket, name="the user")
    assert user["entity"]["type"] == "SPEAKER"
    assert {(f["relation"], f["value"]) for f in user["current"]} >= {("sibling_of", "Anna"), ("sibling_of", "Beth")}
    # Two Alexes; two people known as the user's sister: 409 with the candidates.
    for name, expected in (("Alex", {"Alex Kim", "Alex Moreno"}), ("user sister", {"Anna", "Beth"})):
        response = api.get(f"/api/v1/buckets/{bucket.pk}/profile", {"name": name})
        assert response.status_code == 409, response.content
        body = response.json()
        assert body["code"] == "ambiguous_name" and {c["name"] for c in body["candidates"]} == expected
        assert all(set(c) == {"id", "name", "type", "aliases", "mention_count"} for c in body["candidates"])
    # type narrows the candidates.
    assert profile(api, bucket, name="Alex Kim", type="person")["entity"]["name"] == "Alex Kim"
    for missing in ({"name": "Zelda"}, {"name": "!!!"}, {"name": "the"}, {"name": "Anna", "type": "PLACE"}):
        response = api.get(f"/api/v1/buckets/{bucket.pk}/profile", missing)
        assert (response.status_code, response.json()["code"]) == (404, "not_found"), missing


def test_a_one_word_name_is_the_person_of_that_first_name_but_a_pet_keeps_its_own(api, bucket):
    write_extracted(bucket, "Max Weber lives in Munich.", "My dog Max likes the park.")
    assert profile(api, bucket, name="Max")["entity"]["type"] == "ANIMAL"
    assert profile(api, bucket, name="Weber")["entity"]["name"] == "Max Weber"
    # A one-word person is the one full name of it (as extraction reads "Priya" once it knows hers).
    for name, kind in (("Priya", "PERSON"), ("Priya Natarajan", "PERSON")):
        Entity.objects.create(
            tenant_id=bucket.tenant_id, bucket_id=bucket.pk, name=name, normalized_name=name.lower(), type=kind,
            mention_count=1,
        )  # fmt: skip
    assert profile(api, bucket, name="Priya")["entity"]["name"] == "Priya Natarajan"


def test_a_short_form_names_the_one_person_whose_first_name_it_begins(api, bucket):
    write_extracted(
        bucket, "Melanie: I painted a lake.", "Danielle Ford lives in Leeds.", "Daniela Costa works at Acme."
    )
    assert profile(api, bucket, name="Mel")["entity"]["name"] == "Melanie"
    # "Dan" begins two first names: neither of them.
    response = api.get(f"/api/v1/buckets/{bucket.pk}/profile", {"name": "Dan"})
    assert (response.status_code, response.json()["code"]) == (404, "not_found")


def test_bad_parameters_are_400(api, bucket, maya):
    entity = Entity.objects.for_bucket(bucket).get(normalized_name="maya patel")
    url = f"/api/v1/buckets/{bucket.pk}/entities/{entity.pk}/profile"
    for params in ({"budget": "0"}, {"budget": "ten"}, {"budget": "１０"}, {"limit": "501"}, {"as_of": "yesterday"},
                   {"name": "Maya"}, {"surprise": "1"}):  # fmt: skip
        response = api.get(url, params)
        assert (response.status_code, response.json()["code"]) == (400, "invalid"), params
    named = f"/api/v1/buckets/{bucket.pk}/profile"
    for params in ({}, {"name": ""}, {"name": "x" * 201}, {"name": "Maya\x00"}, {"name": "Maya", "budget": "-1"}):
        response = api.get(named, params)
        assert (response.status_code, response.json()["code"]) == (400, "invalid"), params
    assert api.get(named + "?name=Maya&name=Leo").status_code == 400


def test_limit_cuts_the_lists_and_says_so(api, bucket, maya):
    body = profile(api, bucket, name="Maya", limit=2, budget=1000)
    assert len(body["current"]) == 2 and len(body["history"]) == 2 and body["truncated"] is True
    assert "- likes surfing" in body["digest"]  # the digest still chooses from every fact


def test_expired_memories_state_nothing(api, bucket, maya):
    Memory.objects.filter(pk=maya["Maya moved to Berlin in 2024."]).update(expires_at=at(2025))
    body = profile(api, bucket, name="Maya")
    assert "Berlin" not in str(body)
    assert [f[2:] for f in facts(body["current"]) if f[1] == "lives_in"] == [("Lisbon", "2021-05-01", "")]


def test_outsiders_get_404(bucket, maya, outsider_api, tenant):
    entity = Entity.objects.for_bucket(bucket).get(normalized_name="maya patel")
    elsewhere = make_client(tenant, scopes=("read",), bucket=bucket_create(tenant=tenant, name="other"))
    for client in (outsider_api, elsewhere):
        for url, params in ((f"/api/v1/buckets/{bucket.pk}/profile", {"name": "Maya"}),
                            (f"/api/v1/buckets/{bucket.pk}/entities/{entity.pk}/profile", {})):  # fmt: skip
            response = client.get(url, params)
            assert (response.status_code, response.json()["code"]) == (404, "not_found")
    # An entity of another bucket of the same tenant, through this bucket's address.
    other = bucket_create(tenant=tenant, name="third")
    write_extracted(other, "Maya Patel lives in Faro.")
    faro = Entity.objects.for_bucket(other).get(normalized_name="maya patel")
    response = make_client(tenant, scopes=("read",)).get(f"/api/v1/buckets/{bucket.pk}/entities/{faro.pk}/profile")
    assert response.status_code == 404


def test_a_token_held_to_an_agent_sees_only_what_its_agents_memories_say(tenant, bucket):
    write_extracted(
        bucket,
        {"content": "Maya Patel lives in Porto.", "created_at": at(2019), "agent_id": "alfa"},
        {"content": "Maya works at Farfetch.", "created_at": at(2020), "agent_id": "alfa"},
        {"content": "Maya moved to Berlin.", "created_at": at(2022), "agent_id": "beta"},
        {"content": "Maya likes chess.", "created_at": at(2022), "agent_id": "beta"},
        {"content": "Gustav Berg lives in Oslo.", "created_at": at(2022), "agent_id": "beta"},
        {"content": "I live in Faro.", "created_at": at(2019), "agent_id": "alfa", "attributed_to": "user"},
        {"content": "I moved to Oslo.", "created_at": at(2022), "agent_id": "beta", "attributed_to": "user"},
    )
    alfa = make_client(tenant, scopes=("read",), agent_ids=["alfa"])
    body = profile(alfa, bucket, name="Maya", budget=500)
    shown = str(body)
    assert "Berlin" not in shown and "chess" not in shown and "beta" not in shown
    # Porto is current for alfa: the move that ended it is only in beta's memory.
    assert {f[1:3] for f in facts(body["current"])} == {("lives_in", "Porto"), ("works_at", "Farfetch")}
    assert body["history"] == [] and body["entity"]["mention_count"] == 2
    # Beta's own people are missing to alfa, by name and by id.
    gustav = Entity.objects.for_bucket(bucket).get(normalized_name="gustav berg")
    assert alfa.get(f"/api/v1/buckets/{bucket.pk}/profile", {"name": "Gustav"}).status_code == 404
    assert alfa.get(f"/api/v1/buckets/{bucket.pk}/entities/{gustav.pk}/profile").status_code == 404
    # The user, whom no memory mentions (only the speaker's facts are about them), has a profile
    # for alfa too, of alfa's memories.
    user = profile(alfa, bucket, name="user")
    assert [f[1:3] for f in facts(user["current"])] == [("lives_in", "Faro")] and user["history"] == []
    assert "Oslo" not in str(user)
    # A token not held to agents sees it all.
    everything = profile(make_client(tenant, scopes=("read",)), bucket, name="Maya")
    assert [f[2] for f in facts(everything["current"]) if f[1] == "lives_in"] == ["Berlin"]
