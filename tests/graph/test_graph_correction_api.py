"""Operators' graph corrections over the API (admin scope): rename, merge, split, aliases, edge
delete and fix — the same services as the console, audited with the token, tenant-isolated."""

from __future__ import annotations

import uuid

import pytest

from audit.models import AuditEvent
from graph.models import Correction, Edge, Entity, Mention
from memories.services.buckets import bucket_create
from tests.factories import make_client, write_extracted
from tests.support.db import graph_facts

pytestmark = pytest.mark.django_db

STORY = ("Robert Smith works at Initech.", "Smitty moved to Austin.", "Bob lives in Paris.", "Carol works at Acme.")


@pytest.fixture
def story(bucket):
    return dict(zip(STORY, write_extracted(bucket, *STORY), strict=True))


def entity(bucket, key) -> Entity:
    return Entity.objects.for_bucket(bucket).get(normalized_name=key)


def edge(bucket, subject, predicate) -> Edge:
    return Edge.objects.for_bucket(bucket).get(subject__normalized_name=subject, predicate=predicate)


def test_an_admin_token_corrects_entities_and_each_correction_is_recorded_and_audited(bucket, story, admin_api):
    robert, smitty = entity(bucket, "robert smith"), entity(bucket, "smitty")
    merged = admin_api.post(f"/api/v1/entities/{smitty.pk}/merge", {"into": str(robert.pk)}, format="json")
    assert merged.status_code == 200, merged.content
    assert merged.json()["id"] == str(robert.pk) and "smitty" in merged.json()["aliases"]
    assert not Entity.objects.filter(pk=smitty.pk).exists()

    renamed = admin_api.post(f"/api/v1/entities/{robert.pk}/rename", {"name": "Robert J. Smith"}, format="json")
    assert renamed.status_code == 200 and renamed.json()["name"] == "Robert J. Smith"
    added = admin_api.post(f"/api/v1/entities/{robert.pk}/aliases", {"alias": "Skipper"}, format="json")
    assert added.status_code == 200 and "skipper" in added.json()["aliases"]
    removed = admin_api.post(f"/api/v1/entities/{robert.pk}/aliases/remove", {"alias": "skipper"}, format="json")
    assert removed.status_code == 200 and "skipper" not in removed.json()["aliases"]

    paris = story["Bob lives in Paris."]
    split = admin_api.post(
        f"/api/v1/entities/{robert.pk}/split", {"name": "Bob Jones", "memory_ids": [str(paris)]}, format="json"
    )
    assert split.status_code == 200, split.content
    bob = Entity.objects.get(pk=split.json()["id"])
    assert bob.name == "Bob Jones" and set(Mention.objects.filter(entity=bob).values_list("memory_id", flat=True)) == {
        paris
    }

    kinds = list(Correction.objects.for_bucket(bucket).order_by("id").values_list("kind", "actor_kind"))
    assert kinds == [(k, "token") for k in ("merge", "rename", "alias_add", "alias_remove", "split")]
    events = AuditEvent.objects.filter(action__startswith="graph.")
    assert events.count() == 5 and set(events.values_list("actor_id", flat=True)) == {str(admin_api.token.pk)}


def test_an_admin_token_deletes_and_fixes_edges(bucket, story, admin_api):
    carol = edge(bucket, "carol", "works_at")
    assert admin_api.delete(f"/api/v1/edges/{carol.pk}").status_code == 204
    assert not Edge.objects.filter(pk=carol.pk).exists()
    works = edge(bucket, "robert smith", "works_at")
    fixed = admin_api.post(
        f"/api/v1/edges/{works.pk}/fix", {"predicate": "founded", "object_entity_id": str(works.object_entity_id)},
        format="json",
    )  # fmt: skip
    assert fixed.status_code == 200, fixed.content
    assert fixed.json()["predicate"] == "founded" and fixed.json()["object"]["name"] == "Initech"
    austin = Edge.objects.for_bucket(bucket).get(object_entity__normalized_name="austin")
    literal = admin_api.post(
        f"/api/v1/edges/{austin.pk}/fix", {"predicate": "lives_in", "object_literal": "Austin, Texas"}, format="json"
    )
    assert literal.status_code == 200 and literal.json()["object_literal"] == "Austin, Texas"
    facts = graph_facts(bucket)
    assert ("Robert Smith", "founded", "Initech") in facts and ("Carol", "works_at", "Acme") not in facts
    assert set(Correction.objects.values_list("kind", flat=True)) == {"edge_delete", "edge_fix"}


def test_bad_corrections_are_400_and_change_nothing(bucket, story, admin_api, other_bucket):
    robert, carol = entity(bucket, "robert smith"), entity(bucket, "carol")
    works = edge(bucket, "robert smith", "works_at")
    elsewhere = write_extracted(other_bucket, "Dana lives in Oslo.")[0]
    before = Correction.objects.count()
    for url, body in (
        (f"/api/v1/entities/{robert.pk}/rename", {"name": "   "}),
        (f"/api/v1/entities/{robert.pk}/rename", {"name": "Robert Smith"}),  # already its name
        (f"/api/v1/entities/{robert.pk}/rename", {"name": "x", "extra": 1}),
        (f"/api/v1/entities/{robert.pk}/rename", {}),
        (f"/api/v1/entities/{robert.pk}/merge", {"into": str(robert.pk)}),
        (f"/api/v1/entities/{robert.pk}/merge", {"into": "not-an-id"}),
        (f"/api/v1/entities/{robert.pk}/split", {"name": "Bob Jones"}),  # neither memories nor aliases
        (f"/api/v1/entities/{robert.pk}/split", {"name": "Bob Jones", "memory_ids": [str(elsewhere)]}),
        (f"/api/v1/entities/{robert.pk}/split", {"name": "Bob Jones", "aliases": ["nobody"]}),
        (f"/api/v1/entities/{robert.pk}/aliases", {"alias": "carol"}),  # another entity's name
        (f"/api/v1/entities/{robert.pk}/aliases/remove", {"alias": "never"}),
        (f"/api/v1/edges/{works.pk}/fix", {"predicate": "Works At!", "object_literal": "x"}),
        (f"/api/v1/edges/{works.pk}/fix", {"predicate": "works_at"}),
        (f"/api/v1/edges/{works.pk}/fix", {"predicate": "works_at", "object_literal": "x",
                                           "object_entity_id": str(carol.pk)}),
    ):  # fmt: skip
        response = admin_api.post(url, body, format="json")
        assert response.status_code == 400, (url, body, response.content)
        assert response.json()["detail"], response.content
    assert Correction.objects.count() == before
    assert entity(bucket, "robert smith").name == "Robert Smith"


def test_only_an_admin_token_of_the_tenant_may_correct(bucket, story, tenant, api, outsider_api, other_bucket):
    robert, smitty = entity(bucket, "robert smith"), entity(bucket, "smitty")
    works = edge(bucket, "robert smith", "works_at")
    calls = [
        ("post", f"/api/v1/entities/{robert.pk}/rename", {"name": "Rob"}),
        ("post", f"/api/v1/entities/{smitty.pk}/merge", {"into": str(robert.pk)}),
        ("post", f"/api/v1/entities/{robert.pk}/split", {"name": "Bob Jones", "aliases": []}),
        ("post", f"/api/v1/entities/{robert.pk}/aliases", {"alias": "Rob"}),
        ("post", f"/api/v1/entities/{robert.pk}/aliases/remove", {"alias": "rob"}),
        ("delete", f"/api/v1/edges/{works.pk}", None),
        ("post", f"/api/v1/edges/{works.pk}/fix", {"predicate": "founded", "object_literal": "Initech"}),
    ]
    second = bucket_create(tenant=tenant, name="second")
    other_buckets = make_client(tenant, scopes=("admin",), bucket=second)
    for method, url, body in calls:
        assert getattr(api, method)(url, body, format="json").status_code == 403, url  # read+write only
        assert getattr(outsider_api, method)(url, body, format="json").status_code == 404, url
        assert getattr(other_buckets, method)(url, body, format="json").status_code == 404, url
    random = uuid.uuid4()
    assert outsider_api.post(f"/api/v1/entities/{random}/rename", {"name": "x"}, format="json").status_code == 404
    # Merging into another tenant's or another bucket's entity: that entity is missing.
    write_extracted(other_bucket, "Dana lives in Oslo.")
    write_extracted(second, "Erin lives in Lima.")
    admin = make_client(tenant, scopes=("admin",))
    for theirs in (entity(other_bucket, "dana"), entity(second, "erin")):
        response = admin.post(f"/api/v1/entities/{smitty.pk}/merge", {"into": str(theirs.pk)}, format="json")
        assert response.status_code == 404, response.content
    assert not Correction.objects.exists()
    assert Entity.objects.filter(pk=smitty.pk).exists() and entity(bucket, "robert smith").name == "Robert Smith"


def test_the_corrections_are_in_the_openapi_schema_each_with_its_own_request():
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    operations = {
        op["operationId"]: op for path in schema["paths"].values() for op in path.values() if isinstance(op, dict)
    }
    for operation_id, request in (
        ("entities_rename", "EntityRename"), ("entities_merge", "EntityMerge"), ("entities_split", "EntitySplit"),
        ("entities_alias_add", "EntityAlias"), ("entities_alias_remove", "EntityAlias"), ("edges_fix", "EdgeFix"),
    ):  # fmt: skip
        body = operations[operation_id]["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": f"#/components/schemas/{request}Request"}, operation_id
        assert {"403", "404"} <= set(operations[operation_id]["responses"]), operation_id
    assert set(operations["edges_destroy"]["responses"]) >= {"204", "403", "404"}
