"""The compare stage reads a turn of memories at once (maintenance.services.comparisons): the
neighbours of all of them in one statement, their probes' full-text searches in one, the rows they
are compared with in one. Each batched read answers what the read per memory answered."""

from __future__ import annotations

import re

import pytest
from django.db import connection

from engram_site.providers import lemmatizer
from maintenance import conflict_detector, nearest
from maintenance.models import ConflictCandidate
from maintenance.services import conflicts, links
from memories.links import LINKS_KEY
from memories.models import Memory
from tests.factories import write

pytestmark = pytest.mark.django_db

TEXTS = [
    "I prefer dark roast coffee in the morning.",
    "In the morning I prefer a dark roast coffee.",
    "My sister Anna works as a nurse in Boston.",
    "My sister Anna is a nurse in Boston.",
    "Anna moved from Boston to Denver last spring.",
    "I am vegetarian and never eat meat.",
    "I had a steak for dinner with Anna.",
    "I am not vegetarian any more.",
    "I am learning to play the cello.",
    "Our flat has a south-facing balcony.",
    "The car needs new tyres before winter.",
    "My sister Anna works as a nurse in Boston and loves her night shifts at the hospital.",
]


@pytest.mark.parametrize("exact", [True, False])
def test_prefetched_neighbours_are_those_of_one_query_per_memory(bucket, exact):
    ids = write(bucket, *TEXTS)
    one_by_one = {
        memory_id: nearest._nearest(
            tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory_id=memory_id, k=10, exact=exact
        )
        for memory_id in ids
    }
    with nearest.shared(10):
        nearest.prefetch(tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory_ids=ids, exact=exact)
        for memory_id in ids:
            with_floor = nearest.nearest(
                tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory_id=memory_id, k=5, min_similarity=0.5,
                exact=exact,
            )  # fmt: skip
            assert with_floor == [n for n in one_by_one[memory_id] if n.similarity >= 0.5][:5]
            assert [n.id for n in nearest._shared.get()[(memory_id, exact)]] == [n.id for n in one_by_one[memory_id]]
    assert all(len(found) == 10 for found in one_by_one.values())  # k of the 11 others: something to compare


def _one_probe(bucket, memory_id, words: list[str]) -> list:
    """One probe's search, as the check ran it before the turn's were batched."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT id FROM memories WHERE tenant_id = %s AND bucket_id = %s AND id <> %s"
            " AND lemmatized_tsv @@ to_tsquery('simple', %s)"
            " ORDER BY ts_rank_cd(lemmatized_tsv, to_tsquery('simple', %s), 2) DESC, created_at DESC LIMIT %s",
            [bucket.tenant_id, bucket.pk, memory_id, " | ".join(words), " | ".join(words),
             conflict_detector.PROBE_LIMIT],
        )  # fmt: skip
        return [row[0] for row in cur.fetchall()]


def test_batched_probes_find_the_partners_of_one_search_per_probe(bucket):
    ids = write(bucket, *TEXTS)
    contents = dict(Memory.objects.filter(pk__in=ids).values_list("id", "content"))
    batched = conflicts._lexical_partners_many(tenant_id=bucket.tenant_id, bucket_id=bucket.pk, contents=contents)
    for memory_id, content in contents.items():
        alone: list = []
        for group in conflict_detector.probes(content):
            words = sorted({w for w in [*group, *lemmatizer.lemmatize_many([" ".join(sorted(group))])[0].split()]
                            if re.fullmatch(r"[a-z]+", w)})  # fmt: skip
            if words:
                alone += [i for i in _one_probe(bucket, memory_id, words) if i not in alone]
        assert set(batched[memory_id]) == set(alone) and len(batched[memory_id]) == len(alone)
    assert any(batched.values())


def _forget_checks(bucket, ids) -> None:
    ConflictCandidate.objects.for_bucket(bucket).delete()
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE memories SET linked_memory_ids = '[]'::jsonb, metadata = metadata - %s WHERE id = ANY(%s::uuid[])",
            [LINKS_KEY, [str(i) for i in ids]],
        )


def _checked(bucket, ids) -> tuple[set, dict]:
    pairs = set(
        ConflictCandidate.objects.for_bucket(bucket).values_list("memory_a_id", "memory_b_id", "code", "reason")
    )
    linked = {i: sorted(v or []) for i, v in Memory.objects.filter(pk__in=ids).values_list("id", "linked_memory_ids")}
    return pairs, linked


def test_a_turn_finds_the_conflicts_and_links_of_each_memory_alone(bucket):
    """The checks of a turn (rows, probes and terms read once) store what the checks of each
    memory on its own store."""
    ids = write(bucket, *TEXTS)
    _forget_checks(bucket, ids)
    with nearest.shared(10):
        nearest.prefetch(tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory_ids=ids, exact=True)
        found = conflicts.conflicts_find_for(memory_ids=ids, exact=True)
        linked = links.links_find_for(memory_ids=ids, exact=True)
    turn = _checked(bucket, ids)
    _forget_checks(bucket, ids)
    alone = {"conflicts": 0, "refines": 0, "cites": 0}
    for memory_id in ids:
        alone["conflicts"] += conflicts.conflicts_find_for(memory_ids=[memory_id], exact=True)["conflicts"]
        one = links.links_find_for(memory_ids=[memory_id], exact=True)
        alone["refines"] += one["refines"]
        alone["cites"] += one["cites"]
    assert turn == _checked(bucket, ids)
    assert turn[0] and any(turn[1].values())  # something to compare: conflicts and links were found
    assert {"conflicts": found["conflicts"], "refines": linked["refines"], "cites": linked["cites"]} == alone
