"""LangChain on Engram (``engram_client.langchain``): the retriever and the ``remember`` /
``recall`` tools against a live server with the embedding model, the refusals of the tokens that
may not, the example and the documented start."""

from __future__ import annotations

import asyncio

import pytest
from engram_client import Engram, NotFound, PermissionDenied
from engram_client.langchain import EngramRetriever, engram_tools

from tests.support import ROOT
from tests.support.adapters import adapter_server, run_python
from tests.support.snippets import code_blocks

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


@pytest.fixture(scope="module")
def live(django_db_setup, django_db_blocker, tmp_path_factory):
    with adapter_server(django_db_blocker, tmp_path_factory.mktemp("langchain") / "server.log", "LangChain") as live:
        with Engram(live.base, live.tokens.rw) as engram:
            engram.add_memories(live.notes, [
                {"content": "The user is allergic to peanuts and cashews.", "hint_tags": ["health"]},
                {"content": "The user's favourite colour is dark green.", "hint_tags": ["taste"]},
                {"content": "The user works night shifts as a nurse.", "agent_id": "alfa"},
            ], sequence=False)  # fmt: skip
            live.team = engram.create_bucket("team").id
            engram.add_memory(live.team, "The team ships billing changes on Tuesdays only.")
        yield live


def tools(live, token=None, **options) -> dict:
    return {t.name: t for t in engram_tools(url=live.base, token=token or live.tokens.rw, **options)}


def test_the_retriever_returns_documents_by_meaning_within_budget_and_filters(live):
    retriever = EngramRetriever(url=live.base, token=live.tokens.rw, bucket="notes", mode="vector", limit=1)
    (doc,) = retriever.invoke("which foods could make them ill?")
    assert doc.page_content == "The user is allergic to peanuts and cashews."
    assert doc.metadata["bucket_id"] == live.notes and doc.metadata["score"] > 0 and doc.id == doc.metadata["id"]
    assert doc.metadata["hint_tags"] == ["health"]

    by_tag = EngramRetriever(url=live.base, token=live.tokens.rw, bucket=live.notes, filters={"hint_tags": ["taste"]})
    assert [d.page_content for d in by_tag.invoke("what does the user like?")] == [
        "The user's favourite colour is dark green."
    ]
    tiny = EngramRetriever(url=live.base, token=live.tokens.rw, bucket="notes", token_budget=12)
    assert sum(d.metadata["token_count"] for d in tiny.invoke("the user")) <= 12

    both = EngramRetriever(url=live.base, token=live.tokens.rw, buckets=["notes", "team"])
    found = asyncio.run(both.ainvoke("when do billing changes ship?"))
    assert found[0].page_content == "The team ships billing changes on Tuesdays only."
    assert found[0].metadata["bucket_id"] == live.team
    everywhere = EngramRetriever(url=live.base, token=live.tokens.rw)  # every bucket the token reads
    assert {d.metadata["bucket_id"] for d in everywhere.invoke("user billing")} == {live.notes, live.team}


def test_remember_then_recall_in_sync_and_async_agents(live):
    mine = tools(live, bucket="assistant", agent_id="planner", run_id="chat-1")
    assert mine["remember"].invoke({"fact": "The user's dog is called Biscuit.", "tags": ["pets"]}) == (
        "Remembered: The user's dog is called Biscuit."
    )
    assert mine["remember"].invoke({"fact": "the user's dog is called biscuit"}).startswith("Already remembered")
    assert "- The user's dog is called Biscuit." in mine["recall"].invoke({"query": "what is my pet's name?"})
    asyncio.run(mine["remember"].ainvoke({"fact": "The user takes the 7:40 train to work."}))
    assert "7:40 train" in asyncio.run(mine["recall"].ainvoke({"query": "how does the user commute?"}))

    # remember wrote as the agent, in the run; recall reads only that agent's memories.
    with Engram(live.base, live.tokens.rw) as engram:
        (bucket,) = [b for b in engram.list_buckets() if b.name == "assistant"]
        rows = list(engram.list_memories(bucket.id))
        assert {(m.agent_id, m.run_id) for m in rows} == {("planner", "chat-1")}
        engram.add_memory(bucket.id, "The user's cat is called Pixel.", agent_id="other")
    assert "Pixel" not in mine["recall"].invoke({"query": "what pets does the user have?"})


def test_another_tenant_sees_nothing(live):
    theirs = EngramRetriever(url=live.base, token=live.tokens.outsider)
    assert theirs.invoke("allergic peanuts") == []
    with pytest.raises(NotFound):
        EngramRetriever(url=live.base, token=live.tokens.outsider, bucket=live.notes).invoke("peanuts")
    answer = tools(live, live.tokens.outsider, bucket=live.notes)["recall"].invoke({"query": "peanuts"})
    assert answer.startswith("Engram refused:") and "not_found" in answer


def test_restricted_tokens_are_refused_clearly(live):
    read_only = tools(live, live.tokens.read_only, bucket="notes")
    assert "peanuts" in read_only["recall"].invoke({"query": "allergies"})
    refusal = read_only["remember"].invoke({"fact": "The user moved to Lisbon."})
    assert refusal.startswith("Engram refused:") and "HTTP 403" in refusal

    held = tools(live, live.tokens.notes_only, bucket="elsewhere")  # restricted to notes
    assert "HTTP 403" in held["remember"].invoke({"fact": "A fact for another bucket."})
    with pytest.raises(NotFound):
        EngramRetriever(url=live.base, token=live.tokens.notes_only, bucket="team").invoke("billing")
    assert EngramRetriever(url=live.base, token=live.tokens.notes_only, bucket="notes").invoke("peanuts")

    # A token held to agent alfa reads alfa's memories only, and is refused writing as another.
    alfa = EngramRetriever(url=live.base, token=live.tokens.alfa_only, bucket="notes")
    assert [d.page_content for d in alfa.invoke("the user's work")] == ["The user works night shifts as a nurse."]
    refusal = tools(live, live.tokens.alfa_only, bucket="notes", agent_id="beta")["remember"].invoke({"fact": "x y"})
    assert "agent_forbidden" in refusal
    with pytest.raises(PermissionDenied):
        Engram(live.base, live.tokens.read_only).add_memory(live.notes, "direct write")


def test_the_example_recalls_a_fact_from_an_earlier_conversation(live):
    out = run_python(live, str(ROOT / "examples" / "langchain" / "agent.py"))
    assert "recall -> - The user's dog is called Biscuit." in out
    assert "retrieved: The user's dog is called Biscuit." in out


def test_the_documented_start_runs(live):
    (start,) = code_blocks(ROOT / "docs" / "INTEGRATIONS.md", "LangChain")
    out = run_python(live, "-c", start)
    assert "Ana's sister lives in Porto." in out
