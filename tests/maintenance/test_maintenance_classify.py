"""Scope/topic classification: the local classifier, the optional LLM one, the tenant flag."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.core.management import call_command

from engram_site.models import JobRun, JobStatus
from maintenance import classifier as classifiers
from maintenance import tasks
from maintenance.services import classification
from memories.models import Memory
from memories.services import memory_update
from tests.factories import write
from tests.support import FakeLLM

pytestmark = pytest.mark.django_db

EXAMPLES = {
    "I prefer aisle seats on long flights.": ("general", "travel"),
    "My sister Lena had a baby boy in March.": ("specific", "family"),
    "I drive a blue 2016 Honda Civic.": ("specific", "transport"),
    "I usually listen to jazz while cooking dinner.": ("general", None),
    "The vet said our beagle Rufus needs his teeth cleaned next Tuesday.": ("specific", "pets"),
}


def labels(ids):
    rows = Memory.objects.in_bulk(ids)
    return [(rows[i].classified_scope, rows[i].classified_topic) for i in ids]


def test_local_classifier_labels_scope_and_topic():
    results = classifiers.get_classifier("local").classify([classifiers.ClassifyInput(content=c) for c in EXAMPLES])
    for (content, (scope, topic)), result in zip(EXAMPLES.items(), results, strict=True):
        assert result.scope == scope, content
        if topic:
            assert result.topic == topic, content
        assert result.topic in classifiers.TOPIC_SLUGS + (classifiers.OTHER,)
        assert result.by == classifiers.LOCAL_VERSION


def test_vocabulary_file_gives_each_topic_its_keywords_and_examples():
    topics = {t.slug: t for t in classifiers.TOPICS}
    assert len(topics) == len(classifiers.TOPICS) == 17  # slugs are unique
    assert classifiers.OTHER not in topics
    for topic in topics.values():
        assert topic.description and topic.prototypes
        re.compile(topic.keywords)
    # A topic's keyword pieces are joined as written: the first piece's words and the last's both match.
    family = re.compile(rf"\b({topics['family'].keywords})\b", re.IGNORECASE)
    assert family.search("my Mom called") and family.search("the in-laws visit")
    assert set(classifiers.SCOPE_PROTOTYPES) == set(classifiers.SCOPES)
    assert all(classifiers.SCOPE_PROTOTYPES[scope] for scope in classifiers.SCOPES)


def test_classify_fills_missing_labels_and_keeps_labels_a_client_set(bucket):
    ids = write(bucket, *EXAMPLES)
    memory_update(memory=Memory.objects.get(pk=ids[1]), classified_scope="general")  # a client's own label
    call_command("classify", stdout=(out := io.StringIO()), stderr=io.StringIO())
    assert json.loads(out.getvalue())["counts"]["classified"] == len(ids)
    got = labels(ids)
    assert got[0] == ("general", "travel")
    assert got[1] == ("general", "family")  # scope kept, the missing topic filled
    assert all(scope and topic for scope, topic in got)
    metadata = Memory.objects.get(pk=ids[0]).metadata
    assert metadata["classified_by"] == classifiers.LOCAL_VERSION
    run = JobRun.objects.get(name="classify")
    assert run.status == JobStatus.SUCCEEDED and run.counts["classified"] == len(ids)
    # Nothing left: a second run classifies nothing.
    assert classification.memories_classify()["classified"] == 0


def test_force_relabels_what_a_classifier_labelled_but_not_client_labels(bucket):
    ids = write(bucket, "I prefer tea in the afternoon.", "I bought a kettle on Monday.")
    Memory.objects.filter(pk=ids[0]).update(classified_scope="specific", classified_topic="work")  # by hand
    Memory.objects.filter(pk=ids[1]).update(
        classified_scope="general", classified_topic="work", metadata={"classified_by": "old-model"}
    )
    classification.memories_classify(force=True)
    assert labels(ids)[0] == ("specific", "work")
    assert labels(ids)[1][0] == "specific" and labels(ids)[1][1] != "work"


def test_tenants_with_classification_off_are_not_classified(bucket, other_bucket):
    tenant = bucket.tenant
    tenant.settings = {"classification_enabled": False}
    tenant.save()
    assert tenant.classification_enabled is False
    mine = write(bucket, "I prefer aisle seats on long flights.")
    theirs = write(other_bucket, "I prefer aisle seats on long flights.")
    classification.memories_classify()
    classification.memories_classify(memory_ids=mine)  # the per-write hint respects the flag too
    assert labels(mine) == [(None, None)]
    assert labels(theirs) == [("general", "travel")]
    assert "classified_by" not in Memory.objects.get(pk=mine[0]).metadata


def test_memories_without_an_embedding_wait_for_the_sweep(bucket, settings):
    settings.ENGRAM_EMBEDDINGS_ENABLED = False
    ids = write(bucket, "I prefer aisle seats on long flights.")
    assert classification.memories_classify()["classified"] == 0
    settings.ENGRAM_EMBEDDINGS_ENABLED = True
    from memories.services import memories_enrich_all_pending

    memories_enrich_all_pending()
    assert classification.memories_classify()["classified"] == 1
    assert labels(ids) == [("general", "travel")]


def test_the_scheduled_task_records_a_run(bucket, celery_eager):
    write(bucket, *EXAMPLES)
    tasks.classify.delay()
    run = JobRun.objects.get(name="classify")
    assert run.trigger == "task" and run.counts["classified"] == len(EXAMPLES)


# --- the optional LLM classifier, against a local fake of an OpenAI-compatible endpoint -----------------


@pytest.fixture
def llm_settings(settings):
    def configure(base_url):
        settings.ENGRAM_CLASSIFIER = "llm"
        settings.ENGRAM_LLM_BASE_URL = base_url
        settings.ENGRAM_LLM_MODEL = "fake-model"
        settings.ENGRAM_LLM_API_KEY = "sk-test"
        settings.ENGRAM_LLM_TIMEOUT = 5

    return configure


def test_llm_classifier_labels_memories_through_an_openai_compatible_endpoint(bucket, llm_settings):
    def reply(body):
        count = body["messages"][-1]["content"].count("\n")
        results = [{"i": i + 1, "scope": "general", "topic": "hobbies"} for i in range(count)]
        return 200, "```json\n" + json.dumps({"results": results}) + "\n```"

    with FakeLLM(reply) as fake:
        llm_settings(fake.base_url)
        ids = write(bucket, "I restore old radios.", "I sketch birds in the park.")
        call_command("classify", stdout=io.StringIO(), stderr=io.StringIO())
    assert labels(ids) == [("general", "hobbies"), ("general", "hobbies")]
    assert Memory.objects.get(pk=ids[0]).metadata["classified_by"] == "llm:fake-model"
    [request] = fake.requests
    assert request["path"] == "/v1/chat/completions" and request["auth"] == "Bearer sk-test"
    assert request["body"]["model"] == "fake-model" and request["body"]["temperature"] == 0
    assert "I restore old radios." in request["body"]["messages"][-1]["content"]


def test_llm_answers_that_are_unusable_fall_back_to_the_local_classifier(bucket, llm_settings):
    answers = iter([(500, "overloaded"), (200, "I think these are about travel!")])

    with FakeLLM(lambda body: next(answers)) as fake:
        llm_settings(fake.base_url)
        first = write(bucket, "I prefer aisle seats on long flights.")
        classification.memories_classify(classifier=classifiers.get_classifier())
        second = write(bucket, "My sister Lena had a baby boy in March.")
        call_command("classify", stdout=io.StringIO(), stderr=io.StringIO())
    assert labels(first) == [("general", "travel")]
    assert labels(second) == [("specific", "family")]
    assert Memory.objects.get(pk=first[0]).metadata["classified_by"] == classifiers.LOCAL_VERSION
    assert JobRun.objects.get(name="classify").counts["llm_fallbacks"] == 1


def test_llm_is_off_by_default_and_without_an_endpoint(settings):
    assert settings.ENGRAM_CLASSIFIER == "local"
    assert classifiers.get_classifier().name == classifiers.LOCAL_VERSION
    settings.ENGRAM_CLASSIFIER = "llm"
    settings.ENGRAM_LLM_BASE_URL = ""
    assert classifiers.get_classifier().name == classifiers.LOCAL_VERSION
