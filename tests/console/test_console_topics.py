"""Topics of a bucket: groups with counts and samples, rename, merge, classify a selection again."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent
from audit.services import Actor
from engram_site.exceptions import DomainError
from maintenance.classifier import Classification
from maintenance.services.topics import topics_reclassify
from memories.models import Memory
from memories.services.topics import topic_rename, topics_merge
from memories.topics import topic_groups
from tests.factories import write

pytestmark = pytest.mark.django_db
ACTOR = Actor.system("test")


def in_topic(bucket, topic, *contents) -> list:
    """Memories written and labelled ``topic`` (as classification would)."""
    ids = write(bucket, *contents, sequence=False)
    Memory.objects.filter(pk__in=ids).update(classified_topic=topic)
    return ids


class FixedClassifier:
    name = "fixed-1"

    def __init__(self, topic):
        self.topic = topic

    def classify(self, items):
        return [Classification(scope="specific", topic=self.topic, by=self.name) for _ in items]


@pytest.fixture
def topics(bucket):
    return {
        "food": in_topic(
            bucket, "food", "I like ramen.", "We had lasagna on Sunday.", "I drink green tea.", "Pizza night"
        ),
        "pets": in_topic(bucket, "pets", "Our cat Miso is twelve."),
        None: in_topic(bucket, None, "The car needs new tyres.", "I am learning the cello."),
    }


def test_groups_have_counts_newest_samples_and_an_unlabelled_group(bucket, topics, other_bucket):
    in_topic(other_bucket, "food", "Not ours.")
    groups = topic_groups(bucket=bucket)
    assert [(g.topic, g.count) for g in groups] == [("food", 4), ("pets", 1), (None, 2)]
    food = groups[0]
    assert len(food.samples) == 3 and food.samples[0]["content"] == "Pizza night"  # newest first
    assert groups[-1].label == "(unlabelled)"


def test_rename_relabels_the_bucket_only_and_marks_the_operator(bucket, topics, other_bucket):
    [theirs] = in_topic(other_bucket, "food", "Not ours.")
    assert topic_rename(bucket=bucket, topic="food", new_name=" cooking ", actor=ACTOR) == 4
    assert set(Memory.objects.filter(pk__in=topics["food"]).values_list("classified_topic", flat=True)) == {"cooking"}
    assert all(m.metadata["classified_by"] == "operator" for m in Memory.objects.filter(pk__in=topics["food"]))
    assert Memory.objects.get(pk=theirs).classified_topic == "food"
    event = AuditEvent.objects.get(action="topic.rename")
    assert event.object_count == 4 and event.details["to"] == "cooking"


def test_merge_puts_several_topics_into_one(bucket, topics):
    assert topics_merge(bucket=bucket, topics=["food", "pets"], into="home", actor=ACTOR) == 5
    assert [(g.topic, g.count) for g in topic_groups(bucket=bucket)] == [("home", 5), (None, 2)]
    assert AuditEvent.objects.get(action="topic.merge").details["from"] == ["food", "pets"]


def test_empty_topic_names_are_refused(bucket, topics):
    with pytest.raises(DomainError):
        topic_rename(bucket=bucket, topic="food", new_name="  ", actor=ACTOR)
    with pytest.raises(DomainError):
        topics_merge(bucket=bucket, topics=["food"], into="x" * 101, actor=ACTOR)
    assert not AuditEvent.objects.exists()


def test_reclassify_a_selection_of_topics_including_the_unlabelled(bucket, topics):
    counts = topics_reclassify(bucket=bucket, topics=[None, "pets"], actor=ACTOR, classifier=FixedClassifier("hobbies"))
    assert counts["selected"] == 3 and counts["classified"] == 3
    relabelled = Memory.objects.filter(pk__in=topics[None] + topics["pets"])
    assert set(relabelled.values_list("classified_topic", flat=True)) == {"hobbies"}
    assert set(Memory.objects.filter(pk__in=topics["food"]).values_list("classified_topic", flat=True)) == {"food"}
    assert AuditEvent.objects.get(action="topic.reclassify").object_count == 3


def test_reclassify_selected_memories_keeps_labels_a_client_set(bucket, topics):
    ramen, lasagna, *_ = topics["food"]
    # Ramen's labels came from a client (no classified_by); lasagna's from a classifier.
    Memory.objects.filter(pk=ramen).update(classified_scope="general")
    Memory.objects.filter(pk=lasagna).update(classified_scope="specific", metadata={"classified_by": "local-1"})
    topics_reclassify(bucket=bucket, memory_ids=[ramen, lasagna], actor=ACTOR, classifier=FixedClassifier("travel"))
    assert Memory.objects.get(pk=ramen).classified_topic == "food"
    assert Memory.objects.get(pk=lasagna).classified_topic == "travel"


def test_reclassify_ignores_other_buckets_memories(bucket, other_bucket, topics):
    [theirs] = in_topic(other_bucket, "food", "Not ours.")
    counts = topics_reclassify(bucket=bucket, memory_ids=[theirs], actor=ACTOR, classifier=FixedClassifier("x"))
    assert counts["selected"] == 0
    assert Memory.objects.get(pk=theirs).classified_topic == "food"
