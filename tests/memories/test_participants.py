"""The participants registry (memories/participants.py): the apps above memories change their own
rows inside operations on buckets and memories, in one declared order, with counts that cannot
overwrite each other, and a failure of any of them undoes the whole operation."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured

from audit.models import AuditEvent
from audit.services import Actor
from graph.participants import GraphParticipant
from maintenance.participants import MaintenanceParticipant
from memories import participants
from memories.models import DeletedMemory, Memory
from memories.participants import Participant, ParticipantError
from memories.services import memories_erase, memory_delete, memory_restore
from memories.services.buckets import bucket_create, bucket_delete, bucket_merge, bucket_merge_preview
from sources.participants import SourcesParticipant
from tenants.models import Bucket
from tests.factories import write

pytestmark = pytest.mark.django_db

SYSTEM = Actor.system("test")


class Spy(Participant):
    """Records each step it is called for, as (name, step); answers ``answers[step]``; raises in ``fails``."""

    def __init__(self, name, calls, answers=None, fails=()):
        self.name, self.calls, self.answers, self.fails = name, calls, answers or {}, fails

    def _called(self, step):
        self.calls.append((self.name, step))
        if step in self.fails:
            raise RuntimeError(f"{self.name} failed in {step}")
        return self.answers.get(step, {})

    def merge_plan(self, **kwargs):
        return self._called("merge_plan")

    def merge_before(self, **kwargs):
        return self._called("merge_before")

    def merge_after(self, **kwargs):
        self._called("merge_after")

    def bucket_delete(self, **kwargs):
        self._called("bucket_delete")

    def memory_delete(self, **kwargs):
        self._called("memory_delete")

    def memory_restore(self, **kwargs):
        self._called("memory_restore")

    def memories_absorb(self, **kwargs):
        self._called("memories_absorb")

    def erasure_lock(self, **kwargs):
        self._called("erasure_lock")

    def erase(self, **kwargs):
        return self._called("erase")


@pytest.fixture
def registry(monkeypatch):
    """The registry with the apps' participants, changed by a test for itself only."""
    monkeypatch.setattr(participants, "_registered", dict(participants._registered))
    return monkeypatch


@pytest.fixture
def second(tenant):
    return bucket_create(tenant=tenant, name="second")


def test_every_app_that_keeps_rows_about_buckets_or_memories_registers_its_participant():
    assert [type(p) for p in participants.participants()] == [
        GraphParticipant,
        MaintenanceParticipant,
        SourcesParticipant,
    ]
    assert [p.name for p in participants.participants()] == list(participants.ORDER)
    # An app whose models hold rows per bucket or per memory must be in ORDER: the merge, the
    # erasure and the deletes reach rows only through participants (and the database's cascades).
    keeping = {
        model._meta.app_label
        for model in apps.get_models()
        for field in model._meta.concrete_fields
        if field.column == "bucket_id" or field.column.endswith("memory_id")
    }
    assert keeping - {"memories", "tenants"} <= set(participants.ORDER), keeping


def test_participants_are_called_in_the_declared_order_whatever_order_they_registered_in(registry, bucket, second):
    calls = []
    registry.setattr(participants, "ORDER", ("first", *participants.ORDER, "last"))
    participants.register(Spy("last", calls))
    participants.register(Spy("first", calls))
    write(bucket, "I prefer tea.", "My cat is called Miso.", sequence=False)
    write(second, "I prefer tea.", sequence=False)
    bucket_merge(source=bucket, target=second, remove_source=True, actor=SYSTEM)
    assert calls == [
        ("first", "merge_plan"),
        ("last", "merge_plan"),
        ("first", "merge_before"),
        ("last", "merge_before"),
        ("first", "memories_absorb"),  # the source's "I prefer tea." is absorbed by the target's
        ("last", "memories_absorb"),
        ("first", "merge_after"),
        ("last", "merge_after"),
        ("first", "bucket_delete"),  # remove_source
        ("last", "bucket_delete"),
    ]


def test_each_memory_step_reaches_every_participant(registry, tenant, bucket):
    calls = []
    registry.setattr(participants, "ORDER", (*participants.ORDER, "spy"))
    participants.register(Spy("spy", calls))
    [memory_id] = write(bucket, "I live in Lisbon.", agent_id="agent-zed", sequence=False)
    memory_delete(memory=Memory.objects.get(pk=memory_id), actor=SYSTEM)
    memory_restore(deleted=DeletedMemory.objects.get(pk=memory_id), actor=SYSTEM)
    memories_erase(tenant=tenant, fields={"agent_id": "agent-zed"}, actor=SYSTEM)
    assert [step for _, step in calls] == ["memory_delete", "memory_restore", "erasure_lock", "erase"]


def test_a_count_two_participants_answer_is_refused_not_overwritten(registry, bucket, second):
    registry.setattr(participants, "ORDER", (*participants.ORDER, "spy"))
    # The graph answers "entities" too: the spy's count must not silently replace it.
    participants.register(Spy("spy", [], answers={"merge_plan": {"entities": 99}}))
    with pytest.raises(ParticipantError, match="spy.merge_plan and graph.merge_plan both answered 'entities'"):
        bucket_merge_preview(source=bucket, target=second)


def test_a_count_the_operation_does_not_report_is_refused(registry, tenant, bucket):
    registry.setattr(participants, "ORDER", (*participants.ORDER, "spy"))
    participants.register(Spy("spy", [], answers={"erase": {"spy_rows": 3}}))
    [memory_id] = write(bucket, "I live in Lisbon.", agent_id="agent-zed", sequence=False)
    with pytest.raises(ParticipantError, match="'spy_rows', which is not reported"):
        memories_erase(tenant=tenant, fields={"agent_id": "agent-zed"}, actor=SYSTEM)
    assert Memory.objects.filter(pk=memory_id).exists()  # and the erasure rolled back


def test_counts_of_different_participants_are_combined(registry, bucket, second):
    registry.setattr(participants, "ORDER", ("first", "last"))
    registry.setattr(participants, "_registered", {})
    participants.register(Spy("first", [], answers={"merge_plan": {"entities": 2, "sources": 1}}))
    participants.register(Spy("last", [], answers={"merge_plan": {"duplicate_candidates": 4}}))
    plan = bucket_merge_preview(source=bucket, target=second)
    assert (plan.entities, plan.sources, plan.duplicate_candidates, plan.sources_to_dedup) == (2, 1, 4, 0)


@pytest.mark.parametrize("step", ["merge_before", "merge_after", "memories_absorb", "bucket_delete"])
def test_a_participant_failing_at_any_merge_step_rolls_the_whole_merge_back(registry, bucket, second, step):
    calls = []
    registry.setattr(participants, "ORDER", (*participants.ORDER, "spy"))
    participants.register(Spy("spy", calls, fails={step}))
    write(bucket, "I prefer tea.", "My cat is called Miso.", sequence=False)
    write(second, "I prefer tea.", sequence=False)
    before = (
        sorted(Memory.objects.values_list("id", "bucket_id")),
        sorted(Bucket.objects.values_list("id", flat=True)),
        AuditEvent.objects.count(),
        DeletedMemory.objects.count(),
    )
    with pytest.raises(RuntimeError, match=f"spy failed in {step}"):
        bucket_merge(source=bucket, target=second, remove_source=True, actor=SYSTEM)
    assert (
        sorted(Memory.objects.values_list("id", "bucket_id")),
        sorted(Bucket.objects.values_list("id", flat=True)),
        AuditEvent.objects.count(),
        DeletedMemory.objects.count(),
    ) == before
    assert ("spy", step) in calls


def test_a_participant_failing_rolls_back_an_erasure_a_delete_and_a_bucket_delete(registry, tenant, bucket):
    registry.setattr(participants, "ORDER", (*participants.ORDER, "spy"))
    participants.register(Spy("spy", [], fails={"erase", "memory_delete", "bucket_delete"}))
    [memory_id] = write(bucket, "I live in Lisbon.", agent_id="agent-zed", sequence=False)
    with pytest.raises(RuntimeError, match="spy failed in erase"):
        memories_erase(tenant=tenant, fields={"agent_id": "agent-zed"}, actor=SYSTEM)
    with pytest.raises(RuntimeError, match="spy failed in memory_delete"):
        memory_delete(memory=Memory.objects.get(pk=memory_id), actor=SYSTEM)
    with pytest.raises(RuntimeError, match="spy failed in bucket_delete"):
        bucket_delete(bucket=bucket, actor=SYSTEM)
    assert Memory.objects.filter(pk=memory_id, bucket_id=bucket.pk).exists()
    assert not DeletedMemory.objects.exists()
    assert not AuditEvent.objects.filter(action__in=["memory.erase", "memory.delete", "bucket.delete"]).exists()


def test_a_participant_outside_the_order_or_under_a_taken_name_is_refused(registry):
    with pytest.raises(ImproperlyConfigured, match="not in memories.participants.ORDER"):
        participants.register(Spy("webhooks", []))
    with pytest.raises(ImproperlyConfigured, match="Two participants are named 'graph'"):
        participants.register(Spy("graph", []))
    participants.register(GraphParticipant())  # the app's own, again: harmless
    assert [p.name for p in participants.participants()] == list(participants.ORDER)
