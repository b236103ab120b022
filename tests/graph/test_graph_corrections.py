"""Operators correcting the graph: rename, merge, split, aliases, edges — recorded with who and
when, kept through a rebuild, and followed by later extraction."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from audit.models import AuditEvent
from audit.services import ERASED, Actor
from engram_site.exceptions import DomainError
from graph import corrections
from graph.models import Correction, Edge, Entity, Mention
from graph.rules import Target, edge_key, rules_replay
from maintenance.models import ConflictCandidate
from maintenance.services import conflict_review, conflicts
from memories.models import Memory
from memories.services import buckets as memory_buckets
from memories.services.buckets import bucket_create
from memories.services.edits import memory_update
from memories.services.erasure import memories_erase
from memories.services.merge import memories_absorb
from tests.factories import make_operator, write_extracted
from tests.support.db import graph_facts, graph_snapshot

pytestmark = pytest.mark.django_db

STORY = (
    "Robert Smith works at Initech.",
    "Bobby lives in Denver.",
    "Smitty moved to Austin.",
    "Alice Chen lives in Boston.",
    "Alice loves jazz.",
    "Bob lives in Paris.",
    "Carol works at Acme.",
)


@pytest.fixture
def operator(tenant):
    return make_operator("graph-operator", tenant)


@pytest.fixture
def actor(operator):
    return Actor.operator(operator)


@pytest.fixture
def story(bucket):
    return dict(zip(STORY, write_extracted(bucket, *STORY), strict=True))


def entity(bucket, key) -> Entity:
    return Entity.objects.for_bucket(bucket).get(normalized_name=key)


def rebuild(bucket) -> None:
    # The command operators run, not only the service behind it.
    call_command("rebuild_graph", "--bucket", str(bucket.pk), stdout=io.StringIO(), stderr=io.StringIO())


def mentioned_in(bucket, key) -> set:
    return set(Mention.objects.filter(entity=entity(bucket, key)).values_list("memory_id", flat=True))


def test_an_operators_merge_and_alias_survive_a_rebuild_and_resolve_a_new_mention(bucket, story, actor):
    corrections.entities_merge(source=entity(bucket, "smitty"), target=entity(bucket, "robert smith"), actor=actor)
    corrections.entity_alias_add(entity=entity(bucket, "robert smith"), alias="Skipper", actor=actor)
    rebuild(bucket)
    robert = entity(bucket, "robert smith")
    assert not Entity.objects.for_bucket(bucket).filter(normalized_name="smitty").exists()
    assert {"smitty", "skipper"} <= set(robert.aliases)
    assert ("Robert Smith", "lives_in", "Austin") in graph_facts(bucket)
    assert story["Smitty moved to Austin."] in mentioned_in(bucket, "robert smith")

    [new] = write_extracted(bucket, "Skipper moved to Lisbon.")
    assert new in mentioned_in(bucket, "robert smith")
    assert ("Robert Smith", "lives_in", "Lisbon") in graph_facts(bucket, current_only=True)
    assert not Entity.objects.for_bucket(bucket).filter(normalized_name="skipper").exists()


def test_a_rename_survives_a_rebuild_and_the_old_name_still_finds_the_entity(bucket, story, actor):
    corrections.entity_rename(entity=entity(bucket, "alice chen"), name="Alice Chen-Park", actor=actor)
    assert entity(bucket, "alice chen-park").aliases == ["alice chen"]
    rebuild(bucket)
    renamed = entity(bucket, "alice chen-park")
    assert renamed.name == "Alice Chen-Park" and "alice chen" in renamed.aliases
    assert not Entity.objects.for_bucket(bucket).filter(normalized_name="alice chen").exists()
    assert {("Alice Chen-Park", "lives_in", "Boston"), ("Alice Chen-Park", "likes", "jazz")} <= graph_facts(bucket)
    [new] = write_extracted(bucket, "Alice Chen joined Globex.")
    assert new in mentioned_in(bucket, "alice chen-park")


def test_a_split_undoes_a_wrong_merge_and_extraction_does_not_redo_it(bucket, story, actor):
    paris = story["Bob lives in Paris."]
    assert paris in mentioned_in(bucket, "robert smith")  # "Bob" was read as Robert Smith
    corrections.entity_split(entity=entity(bucket, "robert smith"), name="Bob Jones", memory_ids=[paris], actor=actor)
    expected = {("Bob Jones", "lives_in", "Paris"), ("Robert Smith", "lives_in", "Denver")}
    assert expected <= graph_facts(bucket)
    rebuild(bucket)
    assert mentioned_in(bucket, "bob jones") == {paris}
    assert paris not in mentioned_in(bucket, "robert smith")
    assert expected <= graph_facts(bucket) and ("Robert Smith", "lives_in", "Paris") not in graph_facts(bucket)


def test_splitting_off_a_merged_entity_keeps_the_two_apart_after_a_rebuild(bucket, story, actor):
    austin = story["Smitty moved to Austin."]
    corrections.entities_merge(source=entity(bucket, "smitty"), target=entity(bucket, "robert smith"), actor=actor)
    rebuild(bucket)
    assert austin in mentioned_in(bucket, "robert smith")  # the merge holds through a rebuild
    corrections.entity_split(
        entity=entity(bucket, "robert smith"), name="Smitty", aliases=["smitty"], memory_ids=[austin], actor=actor
    )
    rebuild(bucket)
    assert mentioned_in(bucket, "smitty") == {austin}
    assert "smitty" not in entity(bucket, "robert smith").aliases
    assert ("Smitty", "lives_in", "Austin") in graph_facts(bucket)


def test_deleted_and_fixed_edges_stay_so_after_a_rebuild(bucket, story, actor):
    carol = Edge.objects.for_bucket(bucket).get(subject__normalized_name="carol", predicate="works_at")
    corrections.edge_delete(edge=carol, actor=actor)
    works = Edge.objects.for_bucket(bucket).get(subject__normalized_name="robert smith", predicate="works_at")
    corrections.edge_fix(edge=works, predicate="founded", object_entity=works.object_entity, actor=actor)
    denver = Edge.objects.for_bucket(bucket).get(object_entity__normalized_name="denver")
    corrections.edge_fix(edge=denver, predicate="lives_in", object_literal="Denver, Colorado", actor=actor)
    before = graph_facts(bucket)
    assert ("Carol", "works_at", "Acme") not in before
    assert {("Robert Smith", "founded", "Initech"), ("Robert Smith", "lives_in", "Denver, Colorado")} <= before
    rebuild(bucket)
    assert graph_facts(bucket) == before
    fixed = Edge.objects.for_bucket(bucket).get(object_literal="Denver, Colorado")
    assert fixed.functional_key == "lives_in"  # still on Robert's timeline of homes


def test_split_and_edge_corrections_follow_a_memory_into_the_one_that_absorbs_it(bucket, story, actor):
    paris, acme = story["Bob lives in Paris."], story["Carol works at Acme."]
    corrections.entity_split(entity=entity(bucket, "robert smith"), name="Bob Jones", memory_ids=[paris], actor=actor)
    carol = Edge.objects.for_bucket(bucket).get(subject__normalized_name="carol", predicate="works_at")
    corrections.edge_fix(edge=carol, predicate="works_at", object_literal="Acme Robotics", actor=actor)
    # Each corrected memory goes into another (a duplicate's or a contradiction's merge), which
    # then says what it said (a merge that takes new content): the corrections hold there.
    survivors = write_extracted(bucket, "The weather was mild.", "The sky was grey.")
    memories_absorb(mapping={paris: survivors[0], acme: survivors[1]}, actor=actor)
    for survivor, content in zip(survivors, ["Bob lives in Paris.", "Carol works at Acme."], strict=True):
        memory_update(memory=Memory.objects.get(pk=survivor), content=content, actor=actor)
    rebuild(bucket)
    facts = graph_facts(bucket)
    assert {("Bob Jones", "lives_in", "Paris"), ("Carol", "works_at", "Acme Robotics")} <= facts
    assert not {("Robert Smith", "lives_in", "Paris"), ("Carol", "works_at", "Acme")} & facts
    assert mentioned_in(bucket, "bob jones") == {survivors[0]}


def test_a_rebuild_keeps_the_supersessions_operators_made(bucket, actor):
    vegetarian, steak = write_extracted(bucket, "I'm vegetarian.", "I had steak again last night, love it.")
    conflicts.conflicts_find_for(memory_ids=[steak])
    candidate = ConflictCandidate.objects.for_bucket(bucket).get()
    keep = "a" if candidate.memory_a_id == steak else "b"
    conflict_review.conflict_resolve(candidate=candidate, action="supersede", keep=keep, actor=actor)
    rebuild(bucket)
    rebuild(bucket)  # twice: the second starts from what the first left
    old = Memory.objects.get(pk=vegetarian)
    assert old.superseded_by == steak and old.superseded_at is not None
    assert str(vegetarian) in Memory.objects.get(pk=steak).linked_memory_ids  # its "supersedes" link


def test_corrections_are_recorded_with_the_operator_and_the_time_and_audited(bucket, story, actor, operator):
    corrections.entity_alias_add(entity=entity(bucket, "carol"), alias="Caz", actor=actor)
    correction = Correction.objects.get()
    assert (correction.kind, correction.actor_kind, correction.actor_id) == ("alias_add", "operator", str(operator.pk))
    assert correction.actor_label == "graph-operator" and correction.created_at is not None
    assert correction.payload == {"entity": {"key": "carol", "type": "PERSON", "name": "Carol"}, "alias": "caz"}
    event = AuditEvent.objects.get(action="graph.alias_add")
    assert event.details["correction_id"] == correction.pk and event.actor_label == "graph-operator"
    corrections.entity_alias_remove(entity=entity(bucket, "carol"), alias="caz", actor=actor)
    rebuild(bucket)
    assert entity(bucket, "carol").aliases == []
    assert Correction.objects.count() == 2  # a rebuild keeps them


def test_a_removed_alias_is_not_given_back_by_extraction(bucket, actor):
    write_extracted(bucket, "My sister Anna is a nurse.")
    assert "user sister" in entity(bucket, "anna").aliases
    corrections.entity_alias_remove(entity=entity(bucket, "anna"), alias="user sister", actor=actor)
    rebuild(bucket)
    write_extracted(bucket, "My sister Anna lives in Oslo.")
    assert "user sister" not in entity(bucket, "anna").aliases


def test_bad_corrections_are_refused_and_change_nothing(bucket, story, actor):
    robert, alice = entity(bucket, "robert smith"), entity(bucket, "alice chen")
    attempts = [
        lambda: corrections.entity_rename(entity=robert, name="  Mr.  ", actor=actor),
        lambda: corrections.entity_rename(entity=robert, name="Alice Chen", actor=actor),
        lambda: corrections.entities_merge(source=robert, target=robert, actor=actor),
        lambda: corrections.entity_alias_add(entity=robert, alias="Alice Chen", actor=actor),
        lambda: corrections.entity_alias_remove(entity=robert, alias="nobody", actor=actor),
        lambda: corrections.entity_split(entity=robert, name="Someone Else", actor=actor),
        lambda: corrections.entity_split(
            entity=robert, name="Someone Else", memory_ids=[story["Alice loves jazz."]], actor=actor
        ),
        lambda: corrections.edge_fix(
            edge=Edge.objects.filter(subject=alice).first(), predicate="Lives In!", object_literal="x", actor=actor
        ),
    ]
    before = graph_snapshot(bucket)
    for attempt in attempts:
        with pytest.raises(DomainError):
            attempt()
    assert graph_snapshot(bucket) == before
    assert not Correction.objects.exists() and not AuditEvent.objects.filter(action__startswith="graph.").exists()


def test_a_bucket_without_corrections_is_extracted_as_before(bucket, other_bucket, actor):
    write_extracted(other_bucket, *STORY)
    untouched = graph_snapshot(other_bucket)
    write_extracted(bucket, *STORY)
    corrections.entities_merge(source=entity(bucket, "smitty"), target=entity(bucket, "robert smith"), actor=actor)
    corrections.edge_delete(edge=Edge.objects.for_bucket(bucket).filter(predicate="works_at").first(), actor=actor)
    rebuild(other_bucket)
    after = graph_snapshot(other_bucket)
    assert after[1:] == untouched[1:]
    assert sorted(e[:2] for e in after[0]) == sorted(e[:2] for e in untouched[0])
    assert Entity.objects.for_bucket(other_bucket).filter(normalized_name="smitty").exists()


def test_corrections_follow_a_bucket_merge_and_go_with_an_erased_person(bucket, tenant, actor):
    second = bucket_create(tenant=tenant, name="second")
    write_extracted(second, "Smitty moved to Austin.", "Robert Smith works at Initech.")
    corrections.entities_merge(source=entity(second, "smitty"), target=entity(second, "robert smith"), actor=actor)
    memory_buckets.bucket_merge(source=second, target=bucket, remove_source=True, actor=actor)
    assert Correction.objects.get().bucket_id == bucket.pk
    rebuild(bucket)
    assert not Entity.objects.for_bucket(bucket).filter(normalized_name="smitty").exists()
    Memory.objects.for_bucket(bucket).update(agent_id="gone")
    memories_erase(tenant=tenant, fields={"agent_id": "gone"}, actor=actor)
    assert not Correction.objects.exists()


def test_an_erasure_scrubs_the_names_of_forgotten_entities_from_the_audit_of_their_corrections(bucket, tenant, actor):
    write_extracted(bucket, "Zephyrine Quill lives in Oslo.", agent_id="gone")
    write_extracted(bucket, "Alice Chen works at Acme.", agent_id="kept")
    corrections.entity_rename(entity=entity(bucket, "zephyrine quill"), name="Zephyrine Q. Quill", actor=actor)
    corrections.entity_alias_add(entity=entity(bucket, "zephyrine q quill"), alias="Zephy", actor=actor)
    corrections.entity_rename(entity=entity(bucket, "alice chen"), name="Alice M. Chen", actor=actor)
    memories_erase(tenant=tenant, fields={"agent_id": "gone"}, actor=actor)
    assert not Entity.objects.for_bucket(bucket).filter(normalized_name__contains="zephyrine").exists()
    events = AuditEvent.objects.filter(tenant_id=tenant.pk, action__startswith="graph.")
    assert events.count() == 3  # the events stay: who did what, when, to which ids
    for event in events:
        assert "zephy" not in str(event.details).lower(), (event.action, event.details)
    kept = events.get(details__to__key="alice m chen")  # a name nothing erased stays as it was
    assert kept.details["entity"] == {"key": "alice chen", "type": "PERSON", "name": "Alice Chen"}
    assert events.filter(details__entity__name=ERASED, details__to__name=ERASED).count() == 1
    assert events.get(action="graph.alias_add").details["alias"] == ERASED


def test_an_erasure_drops_the_edge_corrections_of_its_memories_and_their_texts_from_the_audit(bucket, tenant, actor):
    write_extracted(bucket, "I'm allergic to peanuts.", agent_id="gone")
    write_extracted(bucket, "I live in Oslo.", agent_id="kept")
    allergy = Edge.objects.for_bucket(bucket).get(predicate="allergic_to")
    corrections.edge_fix(edge=allergy, predicate="allergic_to", object_literal="tree nuts and sesame", actor=actor)
    home = Edge.objects.for_bucket(bucket).get(predicate="lives_in")
    corrections.edge_fix(edge=home, predicate="lives_in", object_literal="Oslo, Norway", actor=actor)
    memories_erase(tenant=tenant, fields={"agent_id": "gone"}, actor=actor)
    # The user stays (other memories speak), but what the erased memory said goes, corrected or not.
    [kept] = Correction.objects.for_bucket(bucket)
    assert kept.payload["to"]["literal"] == "Oslo, Norway"
    events = AuditEvent.objects.filter(tenant_id=tenant.pk, action="graph.edge_fix").order_by("id")
    assert [e.details["to"]["literal"] for e in events] == [ERASED, "Oslo, Norway"]
    assert "peanut" not in str(events[0].details) and events[0].details["edge"]["subject"] == "user"


# --- the console -------------------------------------------------------------------------------------


def page_of(bucket, entity) -> str:
    return f"/admin/console/entities/{bucket.pk}/{entity.pk}/"


def test_an_operator_corrects_entities_in_the_console_and_sees_who_did_what(client, bucket, story, operator):
    client.force_login(operator)
    smitty, robert = entity(bucket, "smitty"), entity(bucket, "robert smith")
    preview = client.post(page_of(bucket, smitty), {"action": "merge", "into": "robert smith"})
    assert preview.status_code == 200 and "Yes, merge" in preview.content.decode()
    assert Entity.objects.filter(pk=smitty.pk).exists()  # nothing happens before the confirmation
    done = client.post(page_of(bucket, smitty), {"action": "merge", "into": "Robert Smith", "confirm": "yes"})
    assert done.status_code == 302 and done["Location"] == page_of(bucket, robert)
    client.post(page_of(bucket, robert), {"action": "alias_add", "alias": "Skipper"})
    client.post(page_of(bucket, robert), {"action": "rename", "name": "Robert J. Smith"})
    robert.refresh_from_db()
    assert robert.name == "Robert J. Smith" and {"smitty", "skipper", "robert smith"} <= set(robert.aliases)
    listed = client.get(f"/admin/console/entities/{bucket.pk}/").content.decode()
    assert listed.count("<td>graph-operator</td>") == 3
    assert "“Smitty” merged into “Robert Smith”" in listed and "alias “skipper” added" in listed
    page = client.get(page_of(bucket, robert)).content.decode()
    assert "“Robert Smith” renamed “Robert J. Smith”" in page


def test_console_edge_fix_and_delete(client, bucket, story, operator):
    client.force_login(operator)
    carol = entity(bucket, "carol")
    edge = Edge.objects.get(subject=carol)
    client.post(page_of(bucket, carol), {"action": "edge_fix", "edge": edge.pk, "predicate": "owns",
                                         "object_kind": "text", "object": "a bakery"})  # fmt: skip
    assert ("Carol", "owns", "a bakery") in graph_facts(bucket)
    assert client.post(page_of(bucket, carol), {"action": "edge_delete", "edge": edge.pk}).status_code == 200
    client.post(page_of(bucket, carol), {"action": "edge_delete", "edge": edge.pk, "confirm": "yes"})
    assert not Edge.objects.filter(subject=carol).exists()
    rebuild(bucket)
    assert not Edge.objects.filter(subject=entity(bucket, "carol")).exists()


def test_console_split_moves_the_chosen_memories(client, bucket, story, operator):
    client.force_login(operator)
    robert, paris = entity(bucket, "robert smith"), story["Bob lives in Paris."]
    form = {"action": "split", "name": "Bob Jones", "memories": [paris]}
    assert "Yes, split" in client.post(page_of(bucket, robert), form).content.decode()
    client.post(page_of(bucket, robert), {**form, "confirm": "yes"})
    assert mentioned_in(bucket, "bob jones") == {paris}


def test_console_escapes_names_and_shows_refusals(client, bucket, operator):
    client.force_login(operator)
    write_extracted(bucket, "Robert Smith works at Initech.")
    robert = entity(bucket, "robert smith")
    client.post(page_of(bucket, robert), {"action": "alias_add", "alias": "<script>alert(1)</script>"})
    client.post(page_of(bucket, robert), {"action": "alias_add", "alias": "Initech"})  # an entity's name: refused
    page = client.get(page_of(bucket, robert))
    body = page.content.decode()
    assert "<script>alert" not in body and "&lt;script&gt;" in body or "script alert 1 script" in body
    assert any("merge it into" in str(m) for m in page.context["messages"])
    assert Correction.objects.count() == 1


def test_an_operator_of_another_tenant_cannot_see_or_correct_them(client, bucket, story, other_tenant):
    client.force_login(make_operator("outsider-operator", other_tenant))
    robert = entity(bucket, "robert smith")
    before = graph_snapshot(bucket)
    assert client.get(page_of(bucket, robert)).status_code == 404
    assert client.post(page_of(bucket, robert), {"action": "rename", "name": "Hijacked"}).status_code == 404
    assert client.get(f"/admin/console/entities/{bucket.pk}/").status_code == 404
    assert "Robert" not in client.get("/admin/console/entities/").content.decode()
    assert graph_snapshot(bucket) == before and not Correction.objects.exists()


# --- replaying corrections (graph/rules.py, no database) ---------------------------------------------


def person(key, name=None) -> dict:
    return {"key": key, "type": "PERSON", "name": name or key.title()}


def edge(subject, predicate, obj=None, literal=None, memory="m1") -> dict:
    return {"subject": subject, "predicate": predicate, "object": obj, "literal": literal, "memory_id": memory}


def test_replayed_corrections_follow_later_renames_and_merges():
    rules = rules_replay([
        ("alias_add", {"entity": person("robert smith"), "alias": "skipper"}),
        ("rename", {"entity": person("robert smith"), "to": person("robert j smith", "Robert J. Smith")}),
        ("merge", {"source": person("robert j smith"), "target": person("bob smith"), "aliases": ["skipper"]}),
    ])  # fmt: skip
    assert {name: t.key for name, t in rules.redirects.items()} == {
        "skipper": "bob smith", "robert smith": "bob smith", "robert j smith": "bob smith",
    }  # fmt: skip
    assert rules.aliases == {"bob smith": {"skipper", "robert smith"}}


def test_renaming_back_and_splitting_off_revive_a_name():
    rules = rules_replay([
        ("rename", {"entity": person("ann"), "to": person("anna")}),
        ("rename", {"entity": person("anna"), "to": person("ann")}),
        ("merge", {"source": person("smitty"), "target": person("robert smith"), "aliases": []}),
        ("split", {"entity": person("robert smith"), "to": person("smitty"), "aliases": [], "memory_ids": ["m1"]}),
    ])  # fmt: skip
    assert "ann" not in rules.redirects and rules.redirects["anna"].key == "ann"
    assert "smitty" not in rules.redirects and rules.moves == {
        ("m1", "robert smith"): Target("smitty", "PERSON", "Smitty")
    }
    assert not rules.alias_allowed("smitty", "robert smith")


def test_a_fixed_edge_fixed_again_or_deleted_is_matched_by_what_extraction_states():
    works = edge("robert smith", "works_at", obj="initech")
    founded = edge("robert smith", "founded", obj="initech")
    rules = rules_replay([
        ("edge_fix", {"edge": works, "to": {"predicate": "founded", "object": person("initech"), "literal": None}}),
        ("edge_fix", {"edge": founded, "to": {"predicate": "owns", "object": None, "literal": "a bakery"}}),
    ])  # fmt: skip
    assert rules.fixed_edges[edge_key(works)].literal == "a bakery"
    deleted = rules_replay([
        ("edge_fix", {"edge": works, "to": {"predicate": "founded", "object": person("initech"), "literal": None}}),
        ("edge_delete", {"edge": founded}),
    ])  # fmt: skip
    assert edge_key(works) in deleted.deleted_edges


def test_no_corrections_make_empty_rules():
    assert not rules_replay([])
