"""Operators' corrections of a bucket's graph over the API (admin scope): rename, merge, split,
add or remove an alias, delete or fix an edge — the functions of graph/corrections.py that the
console's entity page calls, recorded with the token and audited. A token held to a bucket
corrects that bucket's graph only (another bucket's entity or edge is missing); no token held to
agents has the admin scope (a correction changes how every agent's memories read)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.services import request_actor
from engram_site.exceptions import NotFound
from engram_site.fields import StrictCharField, StrictSerializer
from engram_site.openapi import BODY, errors
from graph import corrections, selectors
from graph.apis import EdgeOut, EntityOut
from graph.models import Edge, Entity
from tenants.models import Scope
from tenants.selectors import parse_uuid

NAME = {"max_length": corrections.NAME_MAX_CHARS}
ADMIN = {"POST": Scope.ADMIN, "DELETE": Scope.ADMIN}


def _entity(request, entity_id) -> Entity:
    """The entity the token may see, else 404."""
    return selectors.entity_get(tenant=request.auth.tenant, entity_id=entity_id, token=request.auth)


def _edge(request, edge_id) -> Edge:
    return selectors.edge_get(tenant=request.auth.tenant, edge_id=edge_id, token=request.auth)


def _same_bucket(of, entity_id) -> Entity:
    """The entity ``entity_id`` of ``of``'s bucket, else 404 (another bucket's or tenant's)."""
    pk = parse_uuid(str(entity_id))
    entity = Entity.objects.filter(tenant_id=of.tenant_id, bucket_id=of.bucket_id, pk=pk).first() if pk else None
    if entity is None:
        raise NotFound("Entity not found.")
    return entity


def _entity_out(request, entity: Entity) -> Response:
    fresh = selectors.entity_get(tenant=request.auth.tenant, entity_id=entity.pk, token=request.auth)
    return Response(EntityOut(fresh).data)


def _schema(operation_id: str, request, response, description: str, *, extra=()):
    return extend_schema(
        operation_id=operation_id, request=request, responses={200: response, **errors(403, 404, *extra)},
        description=description,
    )  # fmt: skip


class EntityRenameApi(APIView):
    required_scopes = ADMIN

    class EntityRename(StrictSerializer):
        name = StrictCharField(**NAME, help_text="the new name; the old one becomes an alias")

    @_schema("entities_rename", EntityRename, EntityOut, "Rename an entity; its old name stays an alias and keeps "
             "finding it, in extraction too (also after a rebuild). Admin scope.", extra=BODY)  # fmt: skip
    def post(self, request, entity_id):
        entity = _entity(request, entity_id)
        data = self.EntityRename(data=request.data)
        data.is_valid(raise_exception=True)
        renamed = corrections.entity_rename(
            entity=entity, name=data.validated_data["name"], actor=request_actor(request)
        )
        return _entity_out(request, renamed)


class EntityMergeApi(APIView):
    required_scopes = ADMIN

    class EntityMerge(StrictSerializer):
        into = serializers.UUIDField(help_text="the entity (of the same bucket) this one becomes part of")

    @_schema("entities_merge", EntityMerge, EntityOut, "Merge this entity into another of its bucket: its mentions, "
             "edges, name and aliases go to `into`, which is returned; this one is deleted. Extraction resolves "
             "its names to `into` from then on. Undone by a split. Admin scope.", extra=BODY)  # fmt: skip
    def post(self, request, entity_id):
        source = _entity(request, entity_id)
        data = self.EntityMerge(data=request.data)
        data.is_valid(raise_exception=True)
        target = _same_bucket(source, data.validated_data["into"])
        merged = corrections.entities_merge(source=source, target=target, actor=request_actor(request))
        return _entity_out(request, merged)


class EntitySplitApi(APIView):
    required_scopes = ADMIN

    class EntitySplit(StrictSerializer):
        name = StrictCharField(**NAME, help_text="the entity split off: a new one, or the bucket's of that name")
        memory_ids = serializers.ListField(
            child=serializers.UUIDField(), required=False, max_length=10_000,
            help_text="memories mentioning this entity whose mentions (and the edges they state) move",
        )  # fmt: skip
        aliases = serializers.ListField(
            child=StrictCharField(**NAME), required=False, max_length=1_000, help_text="aliases that move"
        )

    @_schema("entities_split", EntitySplit, EntityOut, "Undo a wrong merge: the chosen memories' mentions of this "
             "entity and the chosen aliases go to the entity `name` (returned); extraction keeps the two apart. "
             "Admin scope.", extra=BODY)  # fmt: skip
    def post(self, request, entity_id):
        entity = _entity(request, entity_id)
        data = self.EntitySplit(data=request.data)
        data.is_valid(raise_exception=True)
        new = corrections.entity_split(
            entity=entity, name=data.validated_data["name"], aliases=data.validated_data.get("aliases", []),
            memory_ids=data.validated_data.get("memory_ids", []), actor=request_actor(request),
        )  # fmt: skip
        return _entity_out(request, new)


class EntityAlias(StrictSerializer):
    alias = StrictCharField(**NAME)


class EntityAliasAddApi(APIView):
    required_scopes = ADMIN

    @_schema("entities_alias_add", EntityAlias, EntityOut, "Let an alias name this entity (it leaves any other "
             "entity that had it); mentions of it resolve here from then on. Admin scope.", extra=BODY)  # fmt: skip
    def post(self, request, entity_id):
        entity = _entity(request, entity_id)
        data = EntityAlias(data=request.data)
        data.is_valid(raise_exception=True)
        changed = corrections.entity_alias_add(
            entity=entity, alias=data.validated_data["alias"], actor=request_actor(request)
        )
        return _entity_out(request, changed)


class EntityAliasRemoveApi(APIView):
    required_scopes = ADMIN

    @_schema("entities_alias_remove", EntityAlias, EntityOut, "The alias (as listed in `aliases`) no longer "
             "names this entity; extraction does not give it back. Admin scope.", extra=BODY)  # fmt: skip
    def post(self, request, entity_id):
        entity = _entity(request, entity_id)
        data = EntityAlias(data=request.data)
        data.is_valid(raise_exception=True)
        changed = corrections.entity_alias_remove(
            entity=entity, alias=data.validated_data["alias"], actor=request_actor(request)
        )
        return _entity_out(request, changed)


class EdgeDeleteApi(APIView):
    required_scopes = ADMIN

    @extend_schema(
        operation_id="edges_destroy", request=None, responses={204: None, **errors(403, 404)},
        description="Delete a wrong edge; extraction does not state it again from the same memory (also after "
        "a rebuild). Admin scope.",
    )  # fmt: skip
    def delete(self, request, edge_id):
        edge = _edge(request, edge_id)
        corrections.edge_delete(edge=edge, actor=request_actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class EdgeFixApi(APIView):
    required_scopes = ADMIN

    class EdgeFix(StrictSerializer):
        predicate = StrictCharField(max_length=60, help_text="lowercase letters, digits and underscores: lives_in")
        object_entity_id = serializers.UUIDField(required=False, help_text="the object: an entity of the bucket")
        object_literal = StrictCharField(required=False, **NAME, help_text="or the object: a text")

    @_schema("edges_fix", EdgeFix, EdgeOut, "Change what an edge says: its predicate and its object (an entity "
             "or a text, one of the two). Extraction states the fixed edge from then on. Admin scope.",
             extra=BODY)  # fmt: skip
    def post(self, request, edge_id):
        edge = _edge(request, edge_id)
        data = self.EdgeFix(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        obj = _same_bucket(edge, values["object_entity_id"]) if "object_entity_id" in values else None
        fixed = corrections.edge_fix(
            edge=edge, predicate=values["predicate"], object_entity=obj, object_literal=values.get("object_literal"),
            actor=request_actor(request),
        )  # fmt: skip
        fresh = selectors.edge_get(tenant=request.auth.tenant, edge_id=fixed.pk, token=request.auth)
        return Response(EdgeOut(fresh).data)
