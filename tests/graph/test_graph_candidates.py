"""The graph as a source of candidates for hybrid search (``graph_candidates: "entities"``): the
memories that name the question's entities or state their facts, and those naming their
one-hop neighbours."""

from __future__ import annotations

import pytest

from graph import retrieval
from memories.models import Memory
from tests.factories import search, write_extracted

pytestmark = pytest.mark.django_db

ENTITIES = {"graph_candidates": "entities", "weights": {"graph": 1}}


def graph_hits(body: dict) -> dict[str, dict]:
    return {r["content"]: r["explain"] for r in body["results"] if "graph" in r["explain"]["signals"]}


def test_a_neighbour_of_a_named_entity_brings_in_its_memories(api, bucket):
    write_extracted(
        bucket,
        "Alice works at Initech.",
        "Initech is headquartered in Austin.",
        "The weather was lovely on Sunday.",
        "I prefer tea over coffee.",
    )
    body = search(api, bucket, "Tell me about Alice", explain=True, limit=4, ranking=ENTITIES)
    found = graph_hits(body)
    assert set(found) == {"Alice works at Initech.", "Initech is headquartered in Austin."}
    assert found["Alice works at Initech."]["graph_path"] == "Alice —works_at→ Initech"
    assert found["Initech is headquartered in Austin."]["graph_path"] == "Initech (mentioned)"
    # The fact about Alice (an edge of the seed, and a mention of it) outranks the neighbour's memory.
    scores = {c: e["signals"]["graph"]["score"] for c, e in found.items()}
    assert scores["Alice works at Initech."] > scores["Initech is headquartered in Austin."]


def test_a_fact_the_question_asks_about_counts_double(api, bucket):
    write_extracted(bucket, "Maya moved to Porto in March.", "Maya adopted a cat named Miso.", "Porto has great tiles.")
    body = search(api, bucket, "Where does Maya live?", explain=True, limit=5, ranking=ENTITIES)
    scores = {c: e["signals"]["graph"]["score"] for c, e in graph_hits(body).items()}
    assert max(scores, key=scores.get) == "Maya moved to Porto in March."
    assert scores["Maya moved to Porto in March."] > scores["Maya adopted a cat named Miso."]


def test_a_hub_counts_only_beside_another_entity_or_in_a_fact(api, bucket, monkeypatch):
    monkeypatch.setattr(retrieval, "SPECIFIC_MENTIONS", 2)
    write_extracted(
        bucket,
        "Alice works at Initech.",
        "Alice said hello at breakfast.",
        "Alice laughed on Monday.",
        "Bob met Alice in the park.",
    )
    found = graph_hits(search(api, bucket, "What about Alice and Bob?", explain=True, limit=10, ranking=ENTITIES))
    assert "Alice works at Initech." in found  # a fact of the hub
    assert "Bob met Alice in the park." in found  # the hub beside another seed
    assert "Alice said hello at breakfast." not in found, found["Alice said hello at breakfast."]["graph_path"]
    assert "Alice laughed on Monday." not in found


def test_the_entity_candidates_respect_the_filters(api, bucket):
    ids = write_extracted(
        bucket,
        {"content": "Alice works at Initech.", "agent_id": "a1"},
        {"content": "Initech is headquartered in Austin.", "agent_id": "a2"},
    )
    body = search(api, bucket, "Tell me about Alice", explain=True, filters={"agent_id": "a1"}, ranking=ENTITIES)
    assert [r["id"] for r in body["results"]] == [str(ids[0])]


def test_graph_mode_walks_whatever_the_option(api, bucket):
    write_extracted(bucket, "Alice works at Initech.", "Initech is headquartered in Austin.", "Austin is hot in July.")
    walked = search(api, bucket, "Tell me about Alice", mode="graph", explain=True)
    asked = search(api, bucket, "Tell me about Alice", mode="graph", explain=True, ranking=ENTITIES)
    assert [(r["id"], r["explain"]["graph_path"]) for r in asked["results"]] == [
        (r["id"], r["explain"]["graph_path"]) for r in walked["results"]
    ]
    assert Memory.objects.filter(bucket=bucket).count() == 3
