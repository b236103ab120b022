"""Enrichment failures in sight: a row a stage keeps failing on is recorded with its error and a
retry time that backs off, the rest of its batch is enriched, the console's health page lists it,
and an operator's retry makes the next attempt come now.

The model, the lemmatizer, the extractor and the classifier are made to fail on one text (their
call is patched); the database is real.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEvent
from audit.services import Actor
from engram_site.providers import embedding, lemmatizer
from graph import extract as extraction
from graph.models import Processed
from graph.services.extraction import graph_extract_pending
from maintenance.classifier import Classification
from maintenance.services.classification import memories_classify
from memories.models import EnrichmentFailure, EnrichmentStage, Memory
from memories.services import (
    memories_enrich_all_pending,
    memories_erase,
    memory_delete,
    memory_update,
)
from memories.services.buckets import bucket_create, bucket_merge
from memories.services.enrichment_failures import (
    RETRY_BASE_SECONDS,
    RETRY_MAX_SECONDS,
    failures_record,
    retry_delay_seconds,
)
from tests.factories import make_operator, write

POISON = "This note carries the POISON marker that the stage cannot handle."
CONTENTS = [
    "Maria bought a second-hand cello in Lisbon.",
    "The team moved the weekly sync to Thursday mornings.",
    POISON,
    "Oskar is allergic to peanuts and to shellfish.",
    "The garden shed needs a new roof before winter.",
]


def by_content(bucket, contents=CONTENTS, **fields) -> dict[str, Memory]:
    """``contents`` written, as their rows by content."""
    found = Memory.objects.in_bulk(write(bucket, *contents, sequence=False, **fields))
    return {row.content: row for row in found.values()}


def ingest_without_vectors(bucket, settings, contents=CONTENTS) -> dict[str, Memory]:
    settings.ENGRAM_EMBEDDINGS_ENABLED = False  # written while the model was off
    rows = by_content(bucket, contents)
    settings.ENGRAM_EMBEDDINGS_ENABLED = True
    assert not Memory.objects.filter(embedding__isnull=False).exists()
    return rows


@pytest.fixture
def model():
    return embedding.get_model()


def poisoned_encode(real):
    def encode(texts, **kwargs):
        if any("POISON" in t for t in texts):
            raise RuntimeError("the model cannot encode this input")
        return real(texts, **kwargs)

    return encode


def failure(memory, stage) -> EnrichmentFailure:
    return EnrichmentFailure.objects.get(memory_id=memory.pk, stage=stage)


def make_due(memory, stage) -> None:
    """As if its retry time had passed (a test's transaction has one clock)."""
    EnrichmentFailure.objects.filter(memory_id=memory.pk, stage=stage).update(
        next_retry_at=timezone.now() - timedelta(hours=1)
    )


def test_the_wait_doubles_with_each_attempt_up_to_the_cap():
    assert [retry_delay_seconds(n) for n in (1, 2, 3, 4)] == [RETRY_BASE_SECONDS * k for k in (1, 2, 4, 8)]
    assert retry_delay_seconds(60) == retry_delay_seconds(10_000) == RETRY_MAX_SECONDS


@pytest.mark.django_db
def test_a_poison_row_is_recorded_with_its_error_while_the_rest_of_its_batch_is_embedded(
    bucket, settings, model, monkeypatch
):
    rows = ingest_without_vectors(bucket, settings)
    monkeypatch.setattr(model, "encode", poisoned_encode(model.encode))

    report = memories_enrich_all_pending(batch_size=len(CONTENTS))  # one batch holds them all

    poison = rows[POISON]
    embedded = set(Memory.objects.filter(embedding__isnull=False).values_list("pk", flat=True))
    assert embedded == {m.pk for c, m in rows.items() if c != POISON}
    assert (report.embedded, report.failures_recorded, report.failed) == (len(CONTENTS) - 1, 1, 0)
    first = failure(poison, EnrichmentStage.EMBEDDING)
    assert first.attempts == 1 and "cannot encode this input" in first.last_error
    assert (first.tenant_id, first.bucket_id) == (bucket.tenant_id, bucket.pk)
    assert first.next_retry_at - first.last_failed_at == timedelta(seconds=RETRY_BASE_SECONDS)
    assert first.next_retry_at > timezone.now()
    assert not EnrichmentFailure.objects.exclude(pk=first.pk).exists()

    # Until its retry time the sweeps leave it alone.
    assert memories_enrich_all_pending().scanned == 0
    # At its retry time it is tried again, fails again, and waits twice as long.
    make_due(poison, EnrichmentStage.EMBEDDING)
    again = memories_enrich_all_pending()
    assert (again.scanned, again.failures_recorded) == (1, 1)
    second = failure(poison, EnrichmentStage.EMBEDDING)
    assert second.attempts == 2 and second.first_failed_at == first.first_failed_at
    assert second.next_retry_at - second.last_failed_at == timedelta(seconds=2 * RETRY_BASE_SECONDS)

    # The model recovers: the next try embeds it and the record goes.
    monkeypatch.undo()
    make_due(poison, EnrichmentStage.EMBEDDING)
    assert memories_enrich_all_pending().embedded == 1
    assert Memory.objects.get(pk=poison.pk).embedding is not None
    assert not EnrichmentFailure.objects.exists()


@pytest.mark.django_db
def test_a_model_failing_on_every_text_blames_no_row(bucket, settings, model, monkeypatch):
    ingest_without_vectors(bucket, settings, CONTENTS[:2])

    def broken(texts, **kwargs):
        raise RuntimeError("the model process ran out of memory")

    monkeypatch.setattr(model, "encode", broken)
    report = memories_enrich_all_pending()
    assert (report.embedded, report.failed, report.failures_recorded) == (0, 2, 0)
    assert "ran out of memory" in report.errors[0]
    assert not EnrichmentFailure.objects.exists()


@pytest.mark.django_db
def test_a_row_the_lemmatizer_fails_on_is_recorded_and_the_others_get_their_lemmas(bucket, monkeypatch):
    real = lemmatizer.lemmatize_many

    def unavailable(texts):
        raise lemmatizer.LemmatizerUnavailable("spaCy is not installed")

    monkeypatch.setattr(lemmatizer, "lemmatize_many", unavailable)
    rows = by_content(bucket)  # stored without lemmas
    assert not Memory.objects.filter(text_lemmatized__isnull=False).exists()

    def poisoned(texts):
        if any("POISON" in t for t in texts):
            raise ValueError("a token the lemmatizer trips over")
        return real(texts)

    monkeypatch.setattr(lemmatizer, "lemmatize_many", poisoned)
    report = memories_enrich_all_pending(kind="lemmas")
    assert (report.lemmatized, report.failures_recorded) == (len(CONTENTS) - 1, 1)
    assert set(Memory.objects.filter(text_lemmatized__isnull=True).values_list("pk", flat=True)) == {rows[POISON].pk}
    recorded = failure(rows[POISON], EnrichmentStage.LEMMAS)
    assert "ValueError: a token the lemmatizer trips over" in recorded.last_error


@pytest.mark.django_db
def test_the_health_page_lists_the_failure_and_its_retry_action_queues_the_work(
    admin_client, bucket, settings, model, monkeypatch, celery_eager, django_capture_on_commit_callbacks
):
    rows = ingest_without_vectors(bucket, settings)
    monkeypatch.setattr(model, "encode", poisoned_encode(model.encode))
    memories_enrich_all_pending()
    poison = rows[POISON]
    recorded = failure(poison, EnrichmentStage.EMBEDDING)

    page = admin_client.get(reverse("admin:console_health")).content.decode()
    assert f'id="failure-{recorded.pk}"' in page and str(poison.pk) in page
    assert "the model cannot encode this input" in page and "embedding" in page

    # The model works again; the operator retries: the work is queued (and, eager, done) at commit.
    monkeypatch.undo()
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(reverse("admin:console_enrichment_retry"), {"failures": [recorded.pk]})
    assert response.status_code == 302
    assert Memory.objects.get(pk=poison.pk).embedding is not None
    assert not EnrichmentFailure.objects.exists()
    event = AuditEvent.objects.get(action="enrichment.retry")
    assert event.tenant_id == bucket.tenant_id and event.object_ids == [str(poison.pk)]
    assert event.details["stages"] == ["embedding"]


@pytest.mark.django_db
def test_a_retry_brings_the_next_sweep_forward(admin_client, bucket, settings, model, monkeypatch):
    rows = ingest_without_vectors(bucket, settings)
    monkeypatch.setattr(model, "encode", poisoned_encode(model.encode))
    memories_enrich_all_pending()
    recorded = failure(rows[POISON], EnrichmentStage.EMBEDDING)
    assert memories_enrich_all_pending().scanned == 0

    # No worker here: the sweep takes it, now rather than at its retry time.
    admin_client.post(reverse("admin:console_enrichment_retry"), {"failures": [recorded.pk]})
    assert failure(rows[POISON], EnrichmentStage.EMBEDDING).next_retry_at <= timezone.now()
    monkeypatch.undo()
    assert memories_enrich_all_pending().embedded == 1
    assert not EnrichmentFailure.objects.exists()


@pytest.mark.django_db
def test_an_operator_sees_and_retries_only_failures_of_their_tenants(client, bucket, other_bucket, settings):
    ingest_without_vectors(bucket, settings, CONTENTS[:1])
    theirs = by_content(other_bucket, CONTENTS[1:2])[CONTENTS[1]]
    failures_record(stage=EnrichmentStage.GRAPH, errors={theirs.pk: "an error of the other tenant"})
    outsider = failure(theirs, EnrichmentStage.GRAPH)
    before = (outsider.next_retry_at, outsider.attempts)
    client.force_login(make_operator("ops", bucket.tenant))

    page = client.get(reverse("admin:console_health")).content.decode()
    assert "an error of the other tenant" not in page and f"failure-{outsider.pk}" not in page
    response = client.post(reverse("admin:console_enrichment_retry"), {"failures": [outsider.pk]})
    assert response.status_code == 404
    outsider.refresh_from_db()
    assert (outsider.next_retry_at, outsider.attempts) == before
    assert not AuditEvent.objects.filter(action="enrichment.retry").exists()
    assert client.get(reverse("admin:console_enrichment_retry")).status_code == 405


@pytest.mark.django_db
def test_a_memory_the_extractor_fails_on_is_recorded_and_the_others_reach_the_graph(bucket, monkeypatch):
    rows = by_content(bucket)
    real = extraction.extract

    def poisoned(doc, **kwargs):
        if "POISON" in doc.text:
            raise RuntimeError("the extractor cannot read this text")
        return real(doc, **kwargs)

    monkeypatch.setattr(extraction, "extract", poisoned)
    report = graph_extract_pending()
    poison = rows[POISON]
    assert report.memories == len(CONTENTS) - 1 and report.failures_recorded == 1
    processed = set(Processed.objects.values_list("memory_id", flat=True))
    assert processed == {m.pk for c, m in rows.items() if c != POISON}  # not marked as seen
    recorded = failure(poison, EnrichmentStage.GRAPH)
    assert "cannot read this text" in recorded.last_error and recorded.next_retry_at > timezone.now()
    assert graph_extract_pending().memories == 0  # waits for its retry time

    make_due(poison, EnrichmentStage.GRAPH)
    graph_extract_pending()
    assert failure(poison, EnrichmentStage.GRAPH).attempts == 2

    monkeypatch.undo()
    make_due(poison, EnrichmentStage.GRAPH)
    assert graph_extract_pending().memories == 1
    assert Processed.objects.filter(memory_id=poison.pk).exists()
    assert not EnrichmentFailure.objects.exists()


class PoisonedClassifier:
    """Labels everything "general/notes", and fails on a batch holding the poison text."""

    name = "poisoned"

    def classify(self, items):
        if any("POISON" in item.content for item in items):
            raise RuntimeError("the classifier cannot label this text")
        return [Classification(scope="general", topic="notes", by=self.name) for _ in items]


@pytest.mark.django_db
def test_a_memory_the_classifier_fails_on_is_recorded_and_the_others_are_labelled(bucket):
    rows = by_content(bucket)
    assert not Memory.objects.filter(embedding__isnull=True).exists()

    counts = memories_classify(classifier=PoisonedClassifier(), batch_size=len(CONTENTS))
    assert (counts["classified"], counts["failures_recorded"]) == (len(CONTENTS) - 1, 1)
    unlabelled = set(Memory.objects.filter(classified_topic__isnull=True).values_list("pk", flat=True))
    assert unlabelled == {rows[POISON].pk}
    assert "cannot label this text" in failure(rows[POISON], EnrichmentStage.CLASSIFICATION).last_error
    # The scheduled job leaves it until its retry time.
    assert memories_classify(classifier=PoisonedClassifier())["classified"] == 0
    assert failure(rows[POISON], EnrichmentStage.CLASSIFICATION).attempts == 1


@pytest.mark.django_db
def test_failure_records_go_with_a_deleted_or_erased_memory(bucket, settings, model, monkeypatch):
    deleted = ingest_without_vectors(bucket, settings, [POISON])[POISON]
    settings.ENGRAM_EMBEDDINGS_ENABLED = False
    erased = by_content(bucket, ["POISON again, said by agent 7"], agent_id="agent-7")["POISON again, said by agent 7"]
    settings.ENGRAM_EMBEDDINGS_ENABLED = True
    monkeypatch.setattr(model, "encode", poisoned_encode(model.encode))
    memories_enrich_all_pending()
    assert EnrichmentFailure.objects.count() == 2

    memory_delete(memory=deleted, actor=Actor.system("test"))
    assert not EnrichmentFailure.objects.filter(memory_id=deleted.pk).exists()

    report = memories_erase(tenant=bucket.tenant, fields={"agent_id": "agent-7"}, actor=Actor.system("test"))
    assert (report.memories, report.enrichment_failures) == (1, 1)
    assert not EnrichmentFailure.objects.filter(memory_id=erased.pk).exists()


@pytest.mark.django_db
def test_new_content_forgets_the_failures_of_the_old(bucket):
    memory = by_content(bucket, [POISON])[POISON]
    failures_record(stage=EnrichmentStage.GRAPH, errors={memory.pk: "the extractor tripped"})
    memory_update(memory=memory, metadata={"note": "kept"})
    assert EnrichmentFailure.objects.filter(memory_id=memory.pk).exists()  # same text, same failure
    memory_update(memory=memory, content="A plain sentence about the weekly sync.")
    assert not EnrichmentFailure.objects.filter(memory_id=memory.pk).exists()


@pytest.mark.django_db
def test_the_api_lists_a_buckets_failures_and_refuses_a_bad_filter(api, bucket):
    rows = by_content(bucket, CONTENTS[:3])
    failures_record(stage=EnrichmentStage.GRAPH, errors={rows[POISON].pk: "the extractor tripped"})
    failures_record(stage=EnrichmentStage.EMBEDDING, errors={rows[CONTENTS[0]].pk: "an unusable vector"})
    url = f"/api/v1/buckets/{bucket.pk}/enrichment-failures"

    listed = api.get(url).json()["results"]
    assert {(f["memory_id"], f["stage"]) for f in listed} == {
        (str(rows[POISON].pk), "graph"),
        (str(rows[CONTENTS[0]].pk), "embedding"),
    }
    graph = api.get(url, {"stage": "graph"}).json()["results"]
    assert len(graph) == 1 and graph[0]["last_error"] == "the extractor tripped" and graph[0]["attempts"] == 1
    assert graph[0]["next_retry_at"] > graph[0]["last_failed_at"]
    for bad in ({"stage": "spelling"}, {"page_size": 0}, {"colour": "red"}):
        response = api.get(url, bad)
        assert response.status_code == 400 and response.json()["code"] == "invalid", bad
    assert api.get(url, {"page_size": 1}).json()["next"]


@pytest.mark.django_db
def test_a_bucket_merge_takes_the_failures_along(tenant, bucket):
    source = bucket_create(tenant=tenant, name="source")
    memory = by_content(source, [POISON])[POISON]
    failures_record(stage=EnrichmentStage.GRAPH, errors={memory.pk: "the extractor tripped"})
    bucket_merge(source=source, target=bucket, remove_source=True, actor=Actor.system("test"))
    moved = failure(memory, EnrichmentStage.GRAPH)
    assert moved.bucket_id == bucket.pk and moved.last_error == "the extractor tripped"
