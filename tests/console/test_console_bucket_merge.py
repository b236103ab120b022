"""Bucket merges: preview, the one-transaction merge, no orphans, rollback, the API endpoint."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from audit.models import AuditEvent
from audit.services import Actor
from engram_site.exceptions import DomainError
from graph.models import Edge, Entity, Mention
from graph.services.extraction import graph_extract_memories
from maintenance.models import DuplicateCandidate, DuplicateStatus, ScanCursor
from memories.links import LINKS_KEY
from memories.models import Memory
from memories.services import buckets as memory_buckets
from memories.services.buckets import bucket_create
from memories.services.links import links_add
from sources.models import Source, SourceChunk, SourceChunkMemory
from tenants import services as tenant_services
from tenants.models import ApiToken, Bucket
from tests.factories import make_client, write

pytestmark = pytest.mark.django_db

SYSTEM = Actor.system("test")


def at(year, month=1, day=1):
    return datetime(year, month, day, tzinfo=UTC)


def entity(bucket, name, type="PERSON", aliases=()):
    return Entity.objects.create(
        tenant_id=bucket.tenant_id, bucket_id=bucket.pk, name=name, normalized_name=name.lower(), type=type,
        aliases=list(aliases), mention_count=0,
    )  # fmt: skip


def mention(memory_id, ent):
    return Mention.objects.create(tenant_id=ent.tenant_id, bucket_id=ent.bucket_id, memory_id=memory_id, entity=ent)


def edge(memory_id, subject, predicate, obj=None, literal=None, functional_key=None, valid_from=None):
    return Edge.objects.create(
        tenant_id=subject.tenant_id, bucket_id=subject.bucket_id, subject=subject, predicate=predicate,
        object_entity=obj, object_literal=literal, functional_key=functional_key,
        valid_from=valid_from or at(2024), source_memory_id=memory_id,
    )  # fmt: skip


def rows_in(bucket_id) -> list[str]:
    """Tables with rows in this bucket (every table with a bucket_id column)."""
    return memory_buckets._rows_left_in(Bucket(pk=bucket_id))


@pytest.fixture
def second(tenant) -> Bucket:
    return bucket_create(tenant=tenant, name="second")


def test_preview_counts_what_will_move_dedup_and_merge_and_changes_nothing(bucket, second):
    write(bucket, "I live in Lisbon.", "My cat is called Miso.", "I prefer tea.", sequence=False)
    write(second, "I prefer tea.", "I work at Acme.", sequence=False)
    entity(bucket, "Miso", "ANIMAL")
    entity(bucket, "Acme", "ORG")
    entity(second, "Acme", "ORG")
    plan = memory_buckets.bucket_merge_preview(source=bucket, target=second)
    assert (plan.memories, plan.memories_to_move, plan.memories_to_dedup) == (3, 2, 1)
    assert (plan.entities, plan.entities_to_merge) == (2, 1)
    assert Memory.objects.for_bucket(bucket).count() == 3 and Memory.objects.for_bucket(second).count() == 2
    assert not AuditEvent.objects.exists()


def test_merge_moves_every_row_and_removes_the_source(bucket, second):
    source_id = bucket.pk
    ids = write(bucket, "I live in Lisbon.", "My cat is called Miso.", sequence=False)
    miso = entity(bucket, "Miso", "ANIMAL")
    mention(ids[1], miso)
    token = tenant_services.token_issue(tenant=bucket.tenant, name="agent", scopes=["read"], bucket=bucket).token
    assert {"memories", "graph_entities", "graph_mentions", "api_tokens"} <= set(rows_in(source_id))
    result = memory_buckets.bucket_merge(source=bucket, target=second, remove_source=True, actor=SYSTEM)
    assert result.moved == 2 and result.deduplicated == 0 and result.source_removed
    assert not Bucket.objects.filter(pk=bucket.pk).exists()
    assert set(Memory.objects.for_bucket(second).values_list("id", flat=True)) == set(ids)
    assert Entity.objects.get(pk=miso.pk).bucket_id == second.pk
    assert Mention.objects.get(entity=miso).bucket_id == second.pk
    # A token restricted to the source follows its memories.
    token.refresh_from_db()
    assert token.bucket_id == second.pk
    assert rows_in(source_id) == []


def test_merge_can_leave_the_source_empty(bucket, second):
    source_id = bucket.pk
    write(bucket, "I live in Lisbon.", sequence=False)
    memory_buckets.bucket_merge(source=bucket, target=second, remove_source=False, actor=SYSTEM)
    assert Bucket.objects.filter(pk=bucket.pk).exists()
    assert Memory.objects.for_bucket(bucket).count() == 0 and Memory.objects.for_bucket(second).count() == 1
    assert rows_in(source_id) == []


def test_a_hash_collision_dedups_onto_the_target_row_with_tags_links_and_graph(bucket, second):
    source_id = bucket.pk
    # Source: "tea" (collides with the target's), a memory citing it, and graph rows on it.
    tea_src, citing = write(
        bucket, "I prefer TEA!", 'As I said: "I prefer tea", always.', hint_tags=["drinks", "src"], sequence=False
    )
    [tea_tgt] = write(second, "I prefer tea.", hint_tags=["drinks", "tgt"], sequence=False)
    links_add(memory_id=citing, links=[(tea_src, "cites")])
    user_src, user_tgt = entity(bucket, "user", "SPEAKER"), entity(second, "user", "SPEAKER")
    tea = entity(bucket, "tea", "THING")
    mention(tea_src, user_src)
    mention(tea_src, tea)
    mention(tea_tgt, user_tgt)
    src_edge = edge(tea_src, user_src, "prefers", obj=tea)

    result = memory_buckets.bucket_merge(source=bucket, target=second, remove_source=True, actor=SYSTEM)

    assert result.deduplicated == 1 and result.moved == 1 and result.entities_merged == 1
    assert not Memory.objects.filter(pk=tea_src).exists()
    survivor = Memory.objects.get(pk=tea_tgt)
    assert survivor.content == "I prefer tea." and survivor.bucket_id == second.pk
    assert survivor.hint_tags == ["drinks", "tgt", "src"]
    # The memory that cited the dropped row cites the survivor, in both link fields.
    citer = Memory.objects.get(pk=citing)
    assert citer.bucket_id == second.pk and citer.linked_memory_ids == [str(tea_tgt)]
    assert citer.metadata[LINKS_KEY] == [{"id": str(tea_tgt), "kind": "cites"}]
    # Graph: the source's "user" merged into the target's; mentions and the edge re-pointed.
    assert not Entity.objects.filter(pk=user_src.pk).exists()
    assert set(Mention.objects.filter(memory_id=tea_tgt).values_list("entity_id", flat=True)) == {user_tgt.pk, tea.pk}
    moved_edge = Edge.objects.get(pk=src_edge.pk)
    assert (moved_edge.source_memory_id, moved_edge.subject_id, moved_edge.bucket_id) == (
        tea_tgt,
        user_tgt.pk,
        second.pk,
    )
    assert Entity.objects.get(pk=user_tgt.pk).mention_count == 1
    assert Entity.objects.get(pk=tea.pk).bucket_id == second.pk
    assert rows_in(source_id) == []


def test_entities_merge_and_timelines_are_recomputed_across_the_merged_buckets(bucket, second):
    [boston] = write(bucket, "Alice lives in Boston.", created_at=at(2021, 3), sequence=False)
    [seattle] = write(second, "Alice moved to Seattle.", created_at=at(2024, 2), sequence=False)
    graph_extract_memories(memory_ids=[boston, seattle])
    assert Memory.objects.get(pk=boston).superseded_at is None  # different buckets: no timeline yet
    memory_buckets.bucket_merge(source=bucket, target=second, remove_source=True, actor=SYSTEM)
    alices = Entity.objects.for_bucket(second).filter(normalized_name="alice")
    assert alices.count() == 1
    old = Memory.objects.get(pk=boston)
    assert old.superseded_by == seattle and old.superseded_at == at(2024, 2)
    assert str(boston) in Memory.objects.get(pk=seattle).linked_memory_ids


def test_review_candidates_follow_and_the_scans_revisit_the_moved_memories(bucket, second):
    a, b = write(
        bucket,
        "I prefer dark roast coffee in the morning.",
        "In the morning I prefer a dark roast coffee.",
        sequence=False,
    )
    write(second, "I work at Acme.", sequence=False)
    first, other = sorted([a, b])
    DuplicateCandidate.objects.create(
        tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory_a_id=first, memory_b_id=other, similarity=0.98
    )
    for job in ("near_duplicates", "links"):
        ScanCursor.objects.create(tenant_id=bucket.tenant_id, bucket_id=bucket.pk, job=job, position_at=at(2030))
        ScanCursor.objects.create(tenant_id=second.tenant_id, bucket_id=second.pk, job=job, position_at=at(2030))
    memory_buckets.bucket_merge(source=bucket, target=second, remove_source=False, actor=SYSTEM)
    candidate = DuplicateCandidate.objects.get()
    assert candidate.bucket_id == second.pk and candidate.status == DuplicateStatus.PENDING
    assert not ScanCursor.objects.filter(bucket_id=bucket.pk).exists()
    oldest = min(Memory.objects.filter(pk__in=[a, b]).values_list("created_at", flat=True))
    assert set(ScanCursor.objects.filter(bucket_id=second.pk).values_list("position_at", flat=True)) == {oldest}


def test_a_merge_is_audited(bucket, second):
    write(bucket, "I live in Lisbon.", sequence=False)
    source_id = str(bucket.pk)
    memory_buckets.bucket_merge(source=bucket, target=second, remove_source=True, actor=SYSTEM)
    event = AuditEvent.objects.get(action="bucket.merge")
    assert event.tenant_id == second.tenant_id and event.object_ids == [source_id, str(second.pk)]
    assert event.details["source_id"] == source_id and event.details["source_name"] == "main"
    assert event.details["moved"] == 1 and event.details["source_removed"] is True
    assert (event.actor_kind, event.actor_label) == ("system", "test")


def test_buckets_of_two_tenants_are_never_merged(bucket, other_bucket):
    write(bucket, "I live in Lisbon.", sequence=False)
    with pytest.raises(DomainError):
        memory_buckets.bucket_merge_preview(source=bucket, target=other_bucket)
    with pytest.raises(DomainError):
        memory_buckets.bucket_merge(source=bucket, target=other_bucket, remove_source=True, actor=SYSTEM)
    assert Memory.objects.for_bucket(bucket).count() == 1 and Bucket.objects.filter(pk=bucket.pk).exists()
    with pytest.raises(DomainError):
        memory_buckets.bucket_merge(source=bucket, target=bucket, remove_source=False, actor=SYSTEM)


def _state():
    return (
        sorted(Memory.objects.values_list("id", "bucket_id", "hint_tags", "linked_memory_ids")),
        sorted(Entity.objects.values_list("id", "bucket_id", "aliases")),
        sorted(Mention.objects.values_list("id", "memory_id", "entity_id", "bucket_id")),
        sorted(Edge.objects.values_list("id", "source_memory_id", "subject_id", "bucket_id")),
        sorted(DuplicateCandidate.objects.values_list("id", "bucket_id", "memory_a_id", "memory_b_id")),
        sorted(ApiToken.objects.values_list("id", "bucket_id")),
        sorted(Bucket.objects.values_list("id", flat=True)),
        AuditEvent.objects.count(),
    )


@pytest.mark.parametrize(
    "step",
    [
        "memories.services.buckets.memories_move_bucket",
        "maintenance.participants.maintenance_bucket_merge",
        "graph.participants.graph_recompute",
    ],
)
def test_a_failure_midway_rolls_everything_back(bucket, second, monkeypatch, step):
    tea_src, citing = write(bucket, "I prefer TEA!", "My cat is called Miso.", hint_tags=["src"], sequence=False)
    [tea_tgt] = write(second, "I prefer tea.", hint_tags=["tgt"], sequence=False)
    links_add(memory_id=citing, links=[(tea_src, "cites")])
    user_src = entity(bucket, "user", "SPEAKER")
    entity(second, "user", "SPEAKER")  # merged with the source's "user"
    mention(tea_src, user_src)
    edge(tea_src, user_src, "prefers", literal="tea")
    tenant_services.token_issue(tenant=bucket.tenant, name="agent", scopes=["read"], bucket=bucket)
    before = _state()

    module, name = step.rsplit(".", 1)

    def boom(**kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(f"{module}.{name}", boom)
    with pytest.raises(RuntimeError):
        memory_buckets.bucket_merge(source=bucket, target=second, remove_source=True, actor=SYSTEM)
    assert _state() == before


def test_rows_the_merge_does_not_know_how_to_move_abort_it(bucket, second, monkeypatch):
    write(bucket, "I live in Lisbon.", sequence=False)
    monkeypatch.setattr(memory_buckets, "_rows_left_in", lambda bucket: ["some_new_table"])
    with pytest.raises(DomainError, match="some_new_table"):
        memory_buckets.bucket_merge(source=bucket, target=second, remove_source=True, actor=SYSTEM)
    assert Memory.objects.for_bucket(bucket).count() == 1


# --- POST /api/v1/buckets/{id}/merge ------------------------------------------------------------


def merge_url(bucket) -> str:
    return f"/api/v1/buckets/{bucket.pk}/merge"


def test_api_dry_run_previews_and_changes_nothing(admin_api, bucket, second):
    write(bucket, "I prefer tea.", "I live in Lisbon.", sequence=False)
    write(second, "I prefer tea.", sequence=False)
    response = admin_api.post(merge_url(bucket), {"target_bucket_id": str(second.pk), "dry_run": True}, format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["dry_run"] is True
    assert (body["memories"], body["memories_to_move"], body["memories_to_dedup"]) == (2, 1, 1)
    assert Memory.objects.for_bucket(bucket).count() == 2 and not AuditEvent.objects.exists()


def test_api_merge_moves_dedups_and_is_audited_as_the_token(admin_api, bucket, second):
    write(bucket, "I prefer tea.", "I live in Lisbon.", sequence=False)
    write(second, "I prefer tea.", sequence=False)
    response = admin_api.post(
        merge_url(bucket), {"target_bucket_id": str(second.pk), "remove_source": True}, format="json"
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["dry_run"], body["moved"], body["deduplicated"], body["source_removed"]) == (False, 1, 1, True)
    assert not Bucket.objects.filter(pk=bucket.pk).exists()
    assert Memory.objects.for_bucket(second).count() == 2
    event = AuditEvent.objects.get(action="bucket.merge")
    assert (event.actor_kind, event.actor_label) == ("token", admin_api.token.prefix)


def test_api_merge_keeps_the_source_by_default(admin_api, bucket, second):
    write(bucket, "I live in Lisbon.", sequence=False)
    response = admin_api.post(merge_url(bucket), {"target_bucket_id": str(second.pk)}, format="json")
    assert response.status_code == 200 and response.json()["source_removed"] is False
    assert Bucket.objects.filter(pk=bucket.pk).exists() and Memory.objects.for_bucket(bucket).count() == 0


def test_api_merge_into_another_tenants_bucket_is_404_and_changes_nothing(admin_api, bucket, other_bucket):
    write(bucket, "I live in Lisbon.", sequence=False)
    response = admin_api.post(merge_url(bucket), {"target_bucket_id": str(other_bucket.pk)}, format="json")
    assert response.status_code == 404
    assert Memory.objects.for_bucket(bucket).count() == 1 and Memory.objects.for_bucket(other_bucket).count() == 0


def test_api_the_outsider_cannot_merge_our_bucket(outsider_api, bucket, other_bucket):
    write(bucket, "I live in Lisbon.", sequence=False)
    for source, target in [(bucket, other_bucket), (other_bucket, bucket)]:
        response = outsider_api.post(merge_url(source), {"target_bucket_id": str(target.pk)}, format="json")
        assert response.status_code == 404
    assert Memory.objects.for_bucket(bucket).count() == 1 and Bucket.objects.filter(pk=bucket.pk).exists()


def test_api_merge_needs_the_admin_scope(tenant, bucket, second):
    [lisbon] = write(bucket, "I live in Lisbon.", sequence=False)
    writer = make_client(tenant, scopes=("read", "write"))
    for body in ({"dry_run": True}, {"remove_source": True}):
        response = writer.post(merge_url(bucket), {"target_bucket_id": str(second.pk), **body}, format="json")
        assert response.status_code == 403, body
    assert Memory.objects.get(pk=lisbon).bucket_id == bucket.pk and Bucket.objects.filter(pk=bucket.pk).exists()
    assert not Memory.objects.for_bucket(second).exists()


def test_api_a_bucket_restricted_token_cannot_reach_another_bucket(tenant, bucket, second):
    restricted = make_client(tenant, scopes=("admin",), bucket=bucket)
    response = restricted.post(merge_url(bucket), {"target_bucket_id": str(second.pk)}, format="json")
    assert response.status_code == 404
    assert Bucket.objects.filter(pk=bucket.pk).exists()


def test_api_merge_into_itself_or_nowhere_is_refused(admin_api, bucket):
    [lisbon] = write(bucket, "I live in Lisbon.", sequence=False)
    same = admin_api.post(merge_url(bucket), {"target_bucket_id": str(bucket.pk)}, format="json")
    assert same.status_code == 400 and same.json()["code"] == "same_bucket"
    missing = admin_api.post(merge_url(bucket), {}, format="json")
    assert missing.status_code == 400 and "target_bucket_id" in missing.json()["errors"]
    bogus = admin_api.post(merge_url(bucket), {"target_bucket_id": "not-a-uuid"}, format="json")
    assert bogus.status_code == 404
    assert Memory.objects.get(pk=lisbon).bucket_id == bucket.pk and Bucket.objects.filter(pk=bucket.pk).exists()


def test_documents_follow_and_their_provenance_points_at_the_survivor(bucket, second):
    """The sources app's rows move with the memories; an identical document already in the
    target is kept once; chunk links of an absorbed memory name its survivor."""
    tea_src, lisbon = write(bucket, "I prefer TEA!", "I live in Lisbon.", sequence=False)
    [tea_tgt] = write(second, "I prefer tea.", sequence=False)

    def document(b, digest):
        return Source.objects.create(tenant_id=b.tenant_id, bucket_id=b.pk, kind="document", content_hash=digest)

    mine, same = document(bucket, "a" * 64), document(bucket, "b" * 64)
    theirs = document(second, "b" * 64)
    chunk = SourceChunk.objects.create(source=mine, ordinal=0, text="I prefer TEA! I live in Lisbon.")
    for position, memory_id in enumerate([tea_src, lisbon]):
        SourceChunkMemory.objects.create(source=mine, chunk=chunk, memory_id=memory_id, created=True, position=position)

    plan = memory_buckets.bucket_merge_preview(source=bucket, target=second)
    assert (plan.sources, plan.sources_to_dedup) == (2, 1)
    memory_buckets.bucket_merge(source=bucket, target=second, remove_source=True, actor=SYSTEM)

    assert Source.objects.get(pk=mine.pk).bucket_id == second.pk
    assert not Source.objects.filter(pk=same.pk).exists() and Source.objects.filter(pk=theirs.pk).exists()
    assert set(SourceChunkMemory.objects.filter(chunk=chunk).values_list("memory_id", flat=True)) == {tea_tgt, lisbon}
