"""Switching a bucket's embedding model while it is searched and written: real PostgreSQL,
both real models (all-MiniLM-L6-v2 and all-MiniLM-L6-v2-int8)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from audit.services import Actor
from engram_site.jobs import runner
from engram_site.models import JobRun
from engram_site.providers import embedding
from engram_site.scoping import in_this_context
from maintenance.services.embedding_switch import embedding_switch
from memories.models import Memory, NextEmbedding
from memories.retrieval.search import memories_search
from memories.services import MemoryInput, memories_ingest
from memories.services.buckets import bucket_create
from memories.services.embedding_switch import embedding_switch_run, embedding_switch_start, embedding_switch_status
from memories.services.ingest.derived import join_context
from memories.text import embedding_text
from tenants.models import Bucket

OLD, NEW = "all-MiniLM-L6-v2", "all-MiniLM-L6-v2-int8"
SUBJECTS = ["dog", "sister", "coffee", "laptop", "trip", "report", "gym", "garden", "piano", "car"]
FACTS = [
    "My {} is the thing I think about most on Mondays.",
    "Last spring we talked for hours about the {}.",
    "The {} needs attention before the end of the month.",
    "Anna asked about the {} again yesterday.",
    "I wrote a long note about the {} in my journal.",
]
ROWS = 24
QUERIES = ["What do I know about the dog?", "plans for the trip", "Who asked about the piano?", "journal notes"]


def corpus(n: int) -> list[str]:
    return [FACTS[i % len(FACTS)].format(SUBJECTS[i // len(FACTS) % len(SUBJECTS)]) + f" ({i})" for i in range(n)]


@pytest.fixture
def live_bucket(tenant):
    bucket = bucket_create(tenant=tenant, name="switching")
    # Sequences: most rows get a context vector too, which switches along.
    memories_ingest(bucket=bucket, items=[MemoryInput(content=text) for text in corpus(ROWS)], sequence=True)
    return Bucket.objects.get(pk=bucket.pk)


def vectors(bucket: Bucket) -> dict:
    return {
        m.pk: (
            m.embedding_model,
            np.asarray(m.embedding),
            None if m.context_embedding is None else np.asarray(m.context_embedding),
        )
        for m in Memory.objects.for_bucket(bucket)
    }


def test_a_switch_with_searches_running_answers_each_search_from_one_models_vectors(transactional_db, live_bucket):
    bucket = live_bucket
    before = vectors(bucket)
    assert {model for model, _, _ in before.values()} == {OLD}
    answers: list = []
    errors: list = []
    switched = threading.Event()

    def search_until_switched():
        try:
            extra = 0
            while extra < 3:  # and three more once the switch is over
                for query in QUERIES:
                    current = Bucket.objects.get(pk=bucket.pk)
                    result = memories_search(
                        bucket=current, query=query, mode="vector", explain=True, record_access=False
                    )
                    answers.append((query, result))
                if switched.is_set():
                    extra += 1
        except Exception as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            connection.close()

    embedding_switch_start(bucket=bucket, model=NEW)
    searcher = threading.Thread(target=in_this_context(search_until_switched))
    searcher.start()
    written: list = []

    def write_during_the_switch(done: int) -> None:
        if not written:  # a write lands in rows the first pass has gone past: caught up before the swap
            written.extend(
                memories_ingest(
                    bucket=Bucket.objects.get(pk=bucket.pk),
                    items=[MemoryInput(content="A new fact about the piano and the dog.")],
                )
            )

    try:
        outcome = embedding_switch_run(bucket=bucket, batch_size=4, on_batch=write_during_the_switch)
    finally:
        switched.set()
        searcher.join(timeout=120)
    assert not errors, errors
    assert outcome["status"] == "switched"

    after = vectors(bucket)
    assert Bucket.objects.get(pk=bucket.pk).embedding_model == NEW
    assert {model for model, _, _ in after.values()} == {NEW}
    assert written[0].id in after and not NextEmbedding.objects.exists()
    # Every row holds the new model's vectors of its own texts.
    rows = {m.pk: m for m in Memory.objects.for_bucket(bucket)}
    ids = list(rows)
    expected = embedding.embed_texts([embedding_text(rows[i].content, rows[i].attributed_to) for i in ids], model=NEW)
    assert np.abs(np.vstack([after[i][1] for i in ids]) - expected).max() < 1e-4
    with_context = [i for i in ids if rows[i].context_text]
    assert with_context
    expected_context = embedding.embed_texts(
        [join_context(rows[i].context_text, rows[i].content) for i in with_context], model=NEW
    )
    assert np.abs(np.vstack([after[i][2] for i in with_context]) - expected_context).max() < 1e-4

    # Each answer compared its question's vector by one model with stored vectors of the same
    # model: its similarities are those dot products, and not the mixed ones.
    stored = {OLD: before, NEW: after}
    models_seen = set()
    mixed_differs = 0
    for query, result in answers:
        model = result.embedding_model
        models_seen.add(model)
        other = NEW if model == OLD else OLD
        question = embedding.embed_query(query, model=model)
        assert result.hits
        for hit in result.hits:
            signal = hit.explain["signals"].get("vector")
            if signal is None or hit.id not in stored[model]:
                continue
            same = float(question @ stored[model][hit.id][1])
            assert abs(signal["score"] - same) < 1e-5, (query, model)
            if hit.id in stored[other]:
                mixed_differs += abs(signal["score"] - float(question @ stored[other][hit.id][1])) > 1e-5
    assert models_seen == {OLD, NEW}  # searches ran before and after the swap
    assert mixed_differs > 0  # the check above can tell the models' vectors apart


def test_an_interrupted_switch_goes_on_from_where_it_stopped(db, live_bucket, monkeypatch):
    bucket = live_bucket
    embedding_switch_start(bucket=bucket, model=NEW)
    stops = iter([False, True])

    def crash(done: int) -> None:
        if next(stops):
            raise KeyboardInterrupt  # the process is stopped after its second batch

    with pytest.raises(KeyboardInterrupt):
        embedding_switch_run(bucket=bucket, batch_size=8, on_batch=crash)
    status = embedding_switch_status(bucket=bucket)
    assert (status.staged, status.memories, status.next_model) == (16, ROWS, NEW)
    assert Bucket.objects.get(pk=bucket.pk).embedding_model == OLD

    embedded: list[str] = []
    real = embedding.embed_texts

    def spy(texts, **kwargs):
        if kwargs.get("model") == NEW:
            embedded.extend(texts)
        return real(texts, **kwargs)

    monkeypatch.setattr(embedding, "embed_texts", spy)
    outcome = runner.run_job("switch_embedding_model", embedding_switch, bucket=bucket)
    assert outcome.status == "succeeded" and outcome.counts["staged"] == ROWS - 16
    run = JobRun.objects.get(pk=outcome.run_id)
    assert run.progress == 1.0 and run.counts["next_model"] == NEW
    # Only the rows the first run had not staged met the model (each once, with its context).
    contents = {m.content for m in Memory.objects.for_bucket(bucket)}
    assert len([t for t in embedded if t in contents]) == ROWS - 16
    assert set(Memory.objects.for_bucket(bucket).values_list("embedding_model", flat=True)) == {NEW}


def test_switches_that_cannot_be_made_are_refused_and_change_nothing(bucket, monkeypatch):
    with pytest.raises(CommandError, match="unknown embedding model"):
        call_command("switch_embedding_model", bucket=str(bucket.pk), model="no-such-model", no_progress=True)
    with pytest.raises(CommandError, match="already uses"):
        call_command("switch_embedding_model", bucket=str(bucket.pk), model=OLD, no_progress=True)
    wide = embedding.ModelSpec("wide", 768, 512, "none", ("onnx",))
    monkeypatch.setitem(embedding.MODELS, "wide", wide)
    with pytest.raises(CommandError, match="384 dimensions"):
        call_command("switch_embedding_model", bucket=str(bucket.pk), model="wide", no_progress=True)
    fresh = Bucket.objects.get(pk=bucket.pk)
    assert (fresh.embedding_model, fresh.embedding_model_next) == (OLD, "")
    assert not NextEmbedding.objects.exists()


def test_a_switch_in_progress_shows_in_the_bucket_and_a_cancelled_one_leaves_its_model(db, live_bucket, api):
    bucket = live_bucket
    detail = api.get(f"/api/v1/buckets/{bucket.pk}").json()
    assert (detail["embedding_model"], detail["embedding_switch"]) == (OLD, None)
    call_command("switch_embedding_model", bucket=str(bucket.pk), model=NEW, stop_after=8, no_progress=True)
    detail = api.get(f"/api/v1/buckets/{bucket.pk}").json()
    assert detail["embedding_model"] == OLD
    assert detail["embedding_switch"] == {"model": NEW, "staged": 8, "memories": ROWS}
    call_command("switch_embedding_model", bucket=str(bucket.pk), cancel=True)
    assert api.get(f"/api/v1/buckets/{bucket.pk}").json()["embedding_switch"] is None
    assert embedding_switch_run(bucket=bucket)["status"] == "idle"
    fresh = Bucket.objects.get(pk=bucket.pk)
    assert (fresh.embedding_model, fresh.embedding_model_next) == (OLD, "")
    assert not NextEmbedding.objects.exists()
    assert set(Memory.objects.for_bucket(bucket).values_list("embedding_model", flat=True)) == {OLD}


def test_merging_buckets_of_different_models_keeps_no_vectors_of_the_wrong_model(db, live_bucket, tenant):
    from memories.services.buckets import bucket_merge

    target = bucket_create(tenant=tenant, name="int8")
    embedding_switch_start(bucket=target, model=NEW)
    assert embedding_switch_run(bucket=target)["status"] == "switched"
    target = Bucket.objects.get(pk=target.pk)
    bucket_merge(source=live_bucket, target=target, remove_source=True, actor=Actor.system())
    moved = Memory.objects.for_bucket(target)
    assert moved.count() == ROWS
    assert set(moved.values_list("embedding_model", flat=True)) == {NEW}
    assert not moved.filter(embedding__isnull=False).exists()  # the enrichment sweep embeds them by NEW
