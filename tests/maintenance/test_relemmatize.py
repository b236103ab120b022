"""``relemmatize``: documents stored by an earlier lemmatizer are made again, once."""

from __future__ import annotations

import io
import json

from django.core.management import call_command
from django.db import connection

from memories.models import Memory
from memories.retrieval.search import memories_search
from tests.factories import write


def _keyword_hits(bucket, query: str) -> list:
    return [hit.id for hit in memories_search(bucket=bucket, query=query, mode="keyword", record_access=False).hits]


def _relemmatize(*args) -> dict:
    out = io.StringIO()
    call_command("relemmatize", *args, "--no-progress", stdout=out, stderr=io.StringIO())
    return json.loads(out.getvalue())


def test_documents_an_earlier_lemmatizer_stored_are_rewritten_and_found(bucket, other_bucket):
    glued, plain = write(
        bucket, "Maya keeps $$peanuts$$ away from the kitchen.", "The standup is at 9:30.", sequence=False
    )
    [elsewhere] = write(other_bucket, "Leo hid the $$peanuts$$ in a drawer.", sequence=False)
    # What the lemmatizer before 2026-11-28 stored: the glued word as it was written, unlemmatised.
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE memories SET text_lemmatized = replace(text_lemmatized, 'peanut', 'peanuts') WHERE id = ANY(%s)",
            [[glued, elsewhere]],
        )
    before = Memory.objects.for_bucket(bucket).get(pk=glued).text_lemmatized
    assert "peanuts" in before.split()
    assert _keyword_hits(bucket, "peanuts") == []  # the question's term is "peanut"

    summary = _relemmatize("--bucket", str(bucket.pk))
    assert summary["status"] == "succeeded"
    assert (summary["counts"]["scanned"], summary["counts"]["rewritten"]) == (2, 1)
    assert _keyword_hits(bucket, "peanuts") == [glued]
    # Only the bucket named: the other bucket's document is as it was.
    assert "peanuts" in Memory.objects.for_bucket(other_bucket).get(pk=elsewhere).text_lemmatized.split()

    # A second run reads everything again and rewrites nothing.
    again = _relemmatize()
    assert again["counts"]["rewritten"] == 1  # the other bucket's row, now that every bucket is walked
    assert _relemmatize()["counts"]["rewritten"] == 0
    assert Memory.objects.for_bucket(bucket).get(pk=plain).text_lemmatized  # untouched rows keep theirs
