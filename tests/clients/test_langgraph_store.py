"""LangGraph's store on Engram (``engram_client.langgraph.EngramStore``) against a live server:
gunicorn on the test database with the embedding model, so ``search(query=...)`` is Engram's
hybrid search. What is checked is LangGraph's documented ``BaseStore`` semantics (put, get,
overwrite, delete, search with and without a query, filter, limit, offset, namespace listing,
TTL), the mapping of namespaces to buckets, and the refusals of the tokens that may not.
"""

from __future__ import annotations

import asyncio

import pytest
from engram_client import Engram, PermissionDenied
from engram_client.langgraph import EngramStore
from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, SearchOp

from tests.support import ROOT, wait_for
from tests.support.adapters import adapter_server, run_python
from tests.support.snippets import code_blocks

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


@pytest.fixture(scope="module")
def live(django_db_setup, django_db_blocker, tmp_path_factory):
    with adapter_server(django_db_blocker, tmp_path_factory.mktemp("langgraph") / "server.log", "LangGraph") as live:
        yield live


def store(live, token=None, **options) -> EngramStore:
    return EngramStore(url=live.base, token=token or live.tokens.rw, **options)


def test_items_are_put_read_overwritten_and_deleted_by_namespace_and_key(live):
    lg = store(live)
    lg.put(("users", "ana"), "food", {"memory": "Ana is vegetarian.", "since": 2019})
    lg.put(("users", "ana"), "twin", {"memory": "Ana is vegetarian.", "since": 2019})  # same text, other key
    lg.put(("users", "bo"), "food", {"memory": "Bo eats everything."})

    first = lg.get(("users", "ana"), "food")
    assert (first.namespace, first.key, first.value) == (("users", "ana"), "food",
                                                         {"memory": "Ana is vegetarian.", "since": 2019})  # fmt: skip
    assert lg.get(("users", "ana"), "twin").value == first.value  # two items, though one text
    assert lg.get(("users", "bo"), "food").value == {"memory": "Bo eats everything."}
    assert lg.get(("users", "ana"), "nothing") is None
    assert lg.get(("nobucket",), "food") is None

    lg.put(("users", "ana"), "food", {"memory": "Ana became vegan."})
    now = lg.get(("users", "ana"), "food")
    assert now.value == {"memory": "Ana became vegan."}
    assert now.created_at == first.created_at and now.updated_at > first.updated_at

    lg.delete(("users", "ana"), "food")
    assert lg.get(("users", "ana"), "food") is None
    assert lg.get(("users", "ana"), "twin") is not None
    lg.delete(("users", "ana"), "food")  # deleting what is gone is no error

    # The first label named the bucket; the memory holds the item's text, searchable.
    with Engram(live.base, live.tokens.rw) as engram:
        users = [b for b in engram.list_buckets() if b.name == "users"]
        assert len(users) == 1
        contents = {m.content for m in engram.list_memories(users[0].id)}
        (deleted,) = engram.list_deleted_memories(users[0].id)  # the overwritten, then deleted, item
        history = engram.get_memory_history(deleted.id)
    assert "Bo eats everything." in contents
    assert (deleted.content, history.state) == ("Ana became vegan.", "deleted")
    (edit,) = [v for v in history.versions if v.kind == "edited"]  # the overwrite kept the earlier value
    assert edit.previous["content"] == "memory: Ana is vegetarian.\nsince: 2019"  # the whole value, as text
    assert edit.previous["metadata"]["langgraph"]["value"] == {"memory": "Ana is vegetarian.", "since": 2019}


def test_search_by_meaning_within_a_namespace_prefix_with_filter_limit_and_offset(live):
    lg = store(live, bucket="notes")
    facts = {
        "allergy": {"text": "The user is allergic to peanuts and cashews.", "kind": "health", "rank": 3},
        "colour": {"text": "The user's favourite colour is dark green.", "kind": "taste", "rank": 2},
        "job": {"text": "The user works night shifts as a nurse.", "kind": "work", "rank": 1},
    }
    for key, value in facts.items():
        lg.put(("prefs", "u1"), key, value)
    lg.put(("prefs", "u2"), "allergy", {"text": "The user is allergic to shellfish.", "kind": "health", "rank": 5})
    lg.put(("prefs", "u1"), "hidden", {"text": "Peanut butter is on the shopping list.", "kind": "health"}, index=False)

    hits = lg.search(("prefs", "u1"), query="which foods could make them ill?")
    assert hits[0].key == "allergy" and hits[0].score > 0
    assert {h.namespace for h in hits} == {("prefs", "u1")}  # the prefix holds the search
    assert "hidden" not in {h.key for h in hits}  # index=False: not found by a query
    vector_only = store(live, bucket="notes", mode="vector")
    assert vector_only.search(("prefs", "u1"), query="which foods could make them ill?", limit=1)[0].key == "allergy"

    assert {h.namespace for h in lg.search(("prefs",), query="allergic")} >= {("prefs", "u1"), ("prefs", "u2")}
    healthy = lg.search(("prefs",), query="allergic", filter={"kind": "health"})
    assert {(h.namespace[1], h.key) for h in healthy} == {("u1", "allergy"), ("u2", "allergy")}
    assert [h.key for h in lg.search(("prefs", "u1"), filter={"rank": {"$gte": 2}})] == ["colour", "allergy"]
    assert {h.key for h in lg.search(("prefs", "u1"), filter={"kind": {"$ne": "health"}})} == {"colour", "job"}
    assert lg.search(("prefs", "u1"), filter={"kind": "sports"}) == []

    everything = lg.search(("prefs", "u1"))  # no query: newest first
    assert [h.key for h in everything] == ["hidden", "job", "colour", "allergy"]
    assert [h.key for h in lg.search(("prefs", "u1"), limit=2, offset=1)] == ["job", "colour"]
    assert len(lg.search(("prefs", "u1"), query="user", limit=2)) == 2


def test_a_filter_finds_its_items_beyond_the_querys_first_hundred_hits(live):
    """Exact values of a filter go to the server as a metadata filter: the matching items are
    found even when more than 100 others answer the query better."""
    lg = store(live, bucket="many")
    lg.batch([PutOp(("weather",), f"day-{i}", {"text": f"Weather on day {i}: rain and {i} mm of it.", "kind": "log"})
              for i in range(110)])  # fmt: skip
    lg.put(("weather",), "pills", {"text": "Take the blue pill at breakfast.", "kind": "health", "rank": 1})
    lg.put(("weather",), "knee", {"text": "The left knee hurts after running.", "kind": "health", "rank": 3})
    found = lg.search(("weather",), query="how much rain fell", filter={"kind": "health"}, limit=5)
    assert {item.key for item in found} == {"pills", "knee"}
    ranked = lg.search(("weather",), query="how much rain fell", filter={"kind": {"$eq": "health"}, "rank": {"$gt": 2}})
    assert [item.key for item in ranked] == ["knee"]
    assert [item.key for item in lg.search(("weather",), filter={"kind": "health", "rank": 1})] == ["pills"]


def test_the_part_of_a_filter_sent_to_the_server_never_excludes_a_match():
    from engram_client.langgraph import _contained

    assert _contained({"kind": "health", "rank": {"$gte": 2}}) == {"kind": "health"}
    assert _contained({"kind": {"$eq": "health"}, "tags": ["a", "b"]}) == {"kind": "health", "tags": ["a", "b"]}
    assert _contained({"rank": {"$ne": 1}}) is None
    assert _contained({"owner": {"name": "Ana", "age": {"$lt": 40}}}) == {"owner": {"name": "Ana"}}


def test_namespaces_are_listed_by_prefix_suffix_and_depth(live):
    lg = store(live, bucket="notes")
    for namespace in [("tree", "a", "x"), ("tree", "a", "y"), ("tree", "b", "x"), ("other", "x")]:
        lg.put(namespace, "k", {"n": 1})
    listed = lg.list_namespaces(prefix=("tree",))
    assert listed == [("tree", "a", "x"), ("tree", "a", "y"), ("tree", "b", "x")]
    assert lg.list_namespaces(prefix=("tree",), suffix=("x",)) == [("tree", "a", "x"), ("tree", "b", "x")]
    assert lg.list_namespaces(prefix=("tree", "*", "y")) == [("tree", "a", "y")]
    assert lg.list_namespaces(prefix=("tree",), max_depth=2) == [("tree", "a"), ("tree", "b")]
    assert lg.list_namespaces(prefix=("tree",), limit=1, offset=1) == [("tree", "a", "y")]
    assert ("other", "x") in lg.list_namespaces()


def test_a_ttl_becomes_the_memorys_expiry_and_reads_move_it_on(live):
    lg = store(live, bucket="notes")
    lg.put(("ttl",), "short", {"v": "gone soon"}, ttl=1 / 60)  # one second
    lg.put(("ttl",), "long", {"v": "kept a while"}, ttl=60)
    with Engram(live.base, live.tokens.rw) as engram:
        (row,) = [
            m for m in engram.list_memories(live.notes) if (m.metadata or {}).get("langgraph", {}).get("key") == "long"
        ]
        first_expiry = row.expires_at
        assert first_expiry is not None
        assert lg.get(("ttl",), "long", refresh_ttl=False) is not None
        assert engram.get_memory(row.id).expires_at == first_expiry
        assert lg.get(("ttl",), "long") is not None
        assert engram.get_memory(row.id).expires_at > first_expiry
    wait_for(lambda: lg.get(("ttl",), "short", refresh_ttl=False) is None, timeout=20, what="the item's expiry")
    assert lg.search(("ttl",)) and "short" not in {h.key for h in lg.search(("ttl",))}
    lg.put(("ttl",), "short", {"v": "back"})  # the expired item's memory is reused, without expiry
    assert lg.get(("ttl",), "short").value == {"v": "back"}


def test_abatch_runs_mixed_operations_in_order(live):
    lg = store(live, bucket="notes")

    async def run():
        return await lg.abatch([
            PutOp(("batch",), "a", {"text": "alpha"}),
            GetOp(("batch",), "a"),
            PutOp(("batch",), "a", None),
            GetOp(("batch",), "a"),
            PutOp(("batch",), "b", {"text": "beta"}),
            SearchOp(("batch",)),
            ListNamespacesOp(),
        ])  # fmt: skip

    results = asyncio.run(run())
    assert results[0] is None and results[1].value == {"text": "alpha"}
    assert results[3] is None
    assert [h.key for h in results[5]] == ["b"]
    assert ("batch",) in results[6]
    assert asyncio.run(lg.aget(("batch",), "b")).value == {"text": "beta"}


def test_namespace_labels_name_the_memorys_agent_and_run(live):
    store(live, bucket="notes", agent_position=1, run_position=2).put(("chats", "helper", "r-7"), "k", {"text": "hi"})
    with Engram(live.base, live.tokens.rw) as engram:
        (row,) = engram.list_memories(live.notes, run_id="r-7")
    assert (row.agent_id, row.run_id, row.content) == ("helper", "r-7", "hi")


def test_another_tenants_store_sees_nothing(live):
    store(live, bucket="notes").put(("secret",), "k", {"text": "The launch code is 1234."})
    theirs = store(live, live.tokens.outsider)
    assert theirs.get(("secret",), "k") is None
    assert theirs.search(("secret",), query="launch code") == []
    assert theirs.search((), query="launch code") == []
    assert theirs.list_namespaces() == []
    assert store(live, live.tokens.outsider, bucket="notes").get(("secret",), "k") is None


def test_restricted_tokens_are_refused_clearly(live):
    store(live, bucket="notes").put(("shared",), "k", {"text": "Readable by a read-only token."})
    reader = store(live, live.tokens.read_only, bucket="notes")
    assert reader.get(("shared",), "k").value == {"text": "Readable by a read-only token."}
    with pytest.raises(PermissionDenied):
        reader.put(("shared",), "k", {"text": "changed"})
    with pytest.raises(PermissionDenied):
        store(live, live.tokens.read_only).put(("newbucket",), "k", {"text": "x"})

    # A token restricted to one bucket works there, and cannot make another.
    held = store(live, live.tokens.notes_only, bucket="notes")
    held.put(("mine",), "k", {"text": "in notes"})
    assert held.get(("mine",), "k").value == {"text": "in notes"}
    with pytest.raises(PermissionDenied):
        store(live, live.tokens.notes_only).put(("elsewhere",), "k", {"text": "x"})

    # A token held to agent alfa writes as alfa, and is refused another agent's namespace.
    agents = store(live, live.tokens.alfa_only, bucket="notes", agent_position=1)
    agents.put(("agents", "alfa"), "plan", {"text": "Ship on Friday."})
    assert agents.get(("agents", "alfa"), "plan").value == {"text": "Ship on Friday."}
    with pytest.raises(PermissionDenied) as refused:
        agents.put(("agents", "beta"), "plan", {"text": "Ship on Monday."})
    assert refused.value.code == "agent_forbidden"


def test_the_example_remembers_a_preference_across_threads(live):
    out = run_python(live, str(ROOT / "examples" / "langgraph" / "agent.py"))
    assert "thread 2 recalled: Ana prefers window seats." in out


def test_the_documented_start_runs(live):
    (start,) = code_blocks(ROOT / "docs" / "INTEGRATIONS.md", "LangGraph")
    out = run_python(live, "-c", start).splitlines()
    assert out == [
        "Ana is vegetarian and allergic to peanuts.",
        "diet Ana is vegetarian and allergic to peanuts.",
        "[('users', 'ana')]",
    ]
