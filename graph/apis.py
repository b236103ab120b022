"""Graph endpoints: entities, their edges (current and historical), edges at a time, the
memories behind an edge, and an entity's profile (by id or by name)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from engram_site.fields import (
    QueryIntegerField,
    StrictCharField,
    StrictDateTimeField,
    StrictSerializer,
    query_values,
)
from engram_site.openapi import errors, limit_offset_page
from engram_site.pagination import list_response, offset_field, page_size_field
from graph import selectors
from graph.selectors import profile as profiles
from memories.apis.memories import MemoryOut
from tenants.selectors import bucket_get


class EntityOut(serializers.Serializer):
    id = serializers.UUIDField()
    bucket_id = serializers.UUIDField()
    name = serializers.CharField()
    type = serializers.CharField()
    aliases = serializers.ListField(child=serializers.CharField())
    mention_count = serializers.IntegerField(
        source="mentions_seen", help_text="memories naming it (that the token may read, for a token held to agents)"
    )


class EntityRefOut(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    type = serializers.CharField()


class EdgeOut(serializers.Serializer):
    id = serializers.UUIDField()
    subject = EntityRefOut()
    predicate = serializers.CharField()
    object = EntityRefOut(source="object_entity", allow_null=True)
    object_literal = serializers.CharField(allow_null=True)
    valid_from = serializers.DateTimeField()
    valid_to = serializers.DateTimeField(allow_null=True)
    current = serializers.SerializerMethodField()
    confidence = serializers.FloatField()
    source_memory_id = serializers.UUIDField()

    def get_current(self, edge) -> bool:
        return edge.valid_to is None


class EntityDetailOut(EntityOut):
    current_edges = EdgeOut(many=True)
    historical_edges = EdgeOut(many=True)


class EntityListApi(APIView):
    class Params(StrictSerializer):
        q = StrictCharField(required=False, max_length=200, help_text="matches names and aliases")
        type = StrictCharField(required=False, max_length=20)
        limit = page_size_field()
        offset = offset_field()

    @extend_schema(
        operation_id="entities_list",
        parameters=[Params],
        responses={200: limit_offset_page("EntityPage", EntityOut(many=True)), **errors(400, 404)},
    )
    def get(self, request, bucket_id):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        params = self.Params(data=request.query_params.dict())
        params.is_valid(raise_exception=True)
        entities = selectors.entity_list(
            bucket=bucket, query=params.validated_data.get("q"), type=params.validated_data.get("type"),
            agents=request.auth.agents,
        )  # fmt: skip
        return list_response(request, self, entities, EntityOut)


class EntityDetailApi(APIView):
    class Params(StrictSerializer):
        as_of = StrictDateTimeField(required=False, help_text="only edges valid at this time")

    @extend_schema(
        operation_id="entities_retrieve",
        parameters=[Params],
        responses={200: EntityDetailOut, **errors(400, 404)},
    )
    def get(self, request, entity_id):
        entity = selectors.entity_get(tenant=request.auth.tenant, entity_id=entity_id, token=request.auth)
        params = self.Params(data=request.query_params.dict())
        params.is_valid(raise_exception=True)
        edges = list(
            selectors.edges_of_entity(
                entity=entity, as_of=params.validated_data.get("as_of"), agents=request.auth.agents
            )
        )
        return Response(
            {
                **EntityOut(entity).data,
                "current_edges": EdgeOut([e for e in edges if e.valid_to is None], many=True).data,
                "historical_edges": EdgeOut([e for e in edges if e.valid_to is not None], many=True).data,
            }
        )


class EdgeListApi(APIView):
    class Params(StrictSerializer):
        valid_at = StrictDateTimeField(required=False, help_text="only edges valid at this time")
        entity = serializers.UUIDField(required=False, help_text="only edges touching this entity")
        predicate = StrictCharField(required=False, max_length=60)
        limit = page_size_field()
        offset = offset_field()

    @extend_schema(
        operation_id="edges_list",
        parameters=[Params],
        responses={200: limit_offset_page("EdgePage", EdgeOut(many=True)), **errors(400, 404)},
    )
    def get(self, request, bucket_id):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        params = self.Params(data=request.query_params.dict())
        params.is_valid(raise_exception=True)
        data = params.validated_data
        edges = selectors.edge_list(
            bucket=bucket, valid_at=data.get("valid_at"), entity_id=data.get("entity"), predicate=data.get("predicate"),
            agents=request.auth.agents,
        )  # fmt: skip
        return list_response(request, self, edges, EdgeOut)


class EdgeMemoriesApi(APIView):
    @extend_schema(
        operation_id="edges_memories",
        responses={
            200: inline_serializer("EdgeMemories", {"edge": EdgeOut(), "results": MemoryOut(many=True)}),
            **errors(404),
        },
    )
    def get(self, request, edge_id):
        edge = selectors.edge_get(tenant=request.auth.tenant, edge_id=edge_id, token=request.auth)
        memories = selectors.edge_memories(edge=edge, agents=request.auth.agents)
        return Response({"edge": EdgeOut(edge).data, "results": MemoryOut(memories, many=True).data})


# --- profiles -------------------------------------------------------------------------------------


class ProfileMemoryOut(serializers.Serializer):
    id = serializers.UUIDField()
    content = serializers.CharField()
    created_at = serializers.DateTimeField()
    agent_id = serializers.CharField(allow_null=True)


class ProfileFactOut(serializers.Serializer):
    relation = serializers.CharField(help_text="the predicate: lives_in, works_at, sibling_of, likes …")
    direction = serializers.ChoiceField(
        choices=["out", "in"],
        help_text="out: the entity is the subject (Maya lives_in Lisbon); in: the object (Priya manager_of Maya); "
        "symmetric relations (sibling_of, married_to …) are out",
    )
    value = serializers.CharField(help_text="the other end: an entity's name, or a text")
    entity = EntityRefOut(source="other", allow_null=True, help_text="the other end, when it is an entity")
    valid_from = serializers.DateTimeField()
    valid_to = serializers.DateTimeField(allow_null=True, help_text="when a newer value ended it; null: still valid")
    current = serializers.BooleanField()
    functional = serializers.BooleanField(help_text="one value at a time: a newer value ends it")
    confidence = serializers.FloatField()
    edge_ids = serializers.ListField(child=serializers.UUIDField(), help_text="the edges stating it")
    memory_count = serializers.IntegerField(help_text="memories stating it")
    memories = ProfileMemoryOut(
        source="shown_memories", many=True, help_text=f"the newest {profiles.MEMORIES_PER_FACT} memories stating it"
    )


class RelatedOut(serializers.Serializer):
    id = serializers.UUIDField(source="entity.id")
    name = serializers.CharField(source="entity.name")
    type = serializers.CharField(source="entity.type")
    relations = serializers.ListField(child=serializers.CharField())
    current = serializers.BooleanField(help_text="related by a fact valid now (or at as_of)")
    facts = serializers.IntegerField()


class ProfileOut(serializers.Serializer):
    entity = EntityOut()
    as_of = serializers.DateTimeField(allow_null=True)
    current = ProfileFactOut(many=True, help_text="facts valid now (or at as_of), newest first")
    history = ProfileFactOut(many=True, help_text="facts a newer value ended, with their validity, newest first")
    aliases = serializers.ListField(child=serializers.CharField())
    related = RelatedOut(many=True, help_text="entities the facts relate it to: by a current fact first")
    truncated = serializers.BooleanField(help_text="facts were left out (limit, or more than 5,000 edges)")
    digest = serializers.CharField(required=False, help_text="with budget: the profile as text within budget tokens")
    digest_tokens = serializers.IntegerField(required=False, help_text="with budget: the digest's tokens")


class ProfileParams(StrictSerializer):
    as_of = StrictDateTimeField(required=False, help_text="the profile at this time, from the memories written by then")
    budget = QueryIntegerField(
        required=False, min_value=1, max_value=1_000_000,
        help_text="add digest: the profile as text within this many tokens (counted as a search's token_budget)",
    )  # fmt: skip
    limit = QueryIntegerField(
        required=False, min_value=1, max_value=profiles.MAX_FACTS,
        help_text=f"facts per list, 1–{profiles.MAX_FACTS} (default {profiles.DEFAULT_FACTS})",
    )  # fmt: skip


class NamedProfileParams(ProfileParams):
    name = StrictCharField(max_length=200, help_text="a name or an alias, resolved as extraction resolves names")
    type = StrictCharField(required=False, max_length=20, help_text="only entities of this type (PERSON, ORG …)")


AMBIGUOUS = inline_serializer(
    "AmbiguousName",
    {
        "detail": serializers.CharField(),
        "code": serializers.CharField(help_text="ambiguous_name; or retry"),
        "candidates": inline_serializer(
            "NameCandidate",
            {
                "id": serializers.UUIDField(),
                "name": serializers.CharField(),
                "type": serializers.CharField(),
                "aliases": serializers.ListField(child=serializers.CharField()),
                "mention_count": serializers.IntegerField(),
            },  # fmt: skip
            many=True,
            required=False,
        ),
    },
)


def profile_response(request, entity, params) -> Response:
    data = params.validated_data
    profile = profiles.entity_profile(
        entity=entity, agents=request.auth.agents, as_of=data.get("as_of"), budget=data.get("budget"),
        limit=data.get("limit", profiles.DEFAULT_FACTS),
    )  # fmt: skip
    body = dict(ProfileOut(profile).data)
    if profile.digest is None:
        del body["digest"], body["digest_tokens"]
    return Response(body)


class EntityProfileApi(APIView):
    @extend_schema(
        operation_id="entities_profile",
        parameters=[ProfileParams],
        responses={200: ProfileOut, **errors(400, 404)},
        description="What the memories say about an entity now, what they said before, what it is related to, "
        "and (budget) a digest for a system prompt. Read from stored rows: no model call.",
    )
    def get(self, request, bucket_id, entity_id):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        entity = profiles.profile_entity_get(bucket=bucket, entity_id=entity_id, agents=request.auth.agents)
        params = ProfileParams(data=query_values(request.query_params))
        params.is_valid(raise_exception=True)
        return profile_response(request, entity, params)


class NamedProfileApi(APIView):
    @extend_schema(
        operation_id="buckets_profile",
        parameters=[NamedProfileParams],
        responses={
            200: ProfileOut,
            **errors(400, 404),
            409: OpenApiResponse(
                AMBIGUOUS,
                description="The name denotes several entities (ambiguous_name, with "
                "the candidates: ask by id or give type); or (retry) a concurrent change.",
            ),
        },  # fmt: skip
        description="The profile of the entity a name denotes (its name, an alias, or a lone first name of the "
        "bucket's one person of that first name). See entities_profile.",
    )
    def get(self, request, bucket_id):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        params = NamedProfileParams(data=query_values(request.query_params))
        params.is_valid(raise_exception=True)
        data = params.validated_data
        entity = profiles.profile_entity_named(
            bucket=bucket, name=data["name"], type=data.get("type"), agents=request.auth.agents
        )
        return profile_response(request, entity, params)
