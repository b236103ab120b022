"""Graph endpoints: entities, their edges (current and historical), edges at a time, and the
memories behind an edge."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from engram_site.fields import StrictCharField, StrictDateTimeField, StrictSerializer
from engram_site.openapi import errors, limit_offset_page
from engram_site.pagination import list_response, offset_field, page_size_field
from graph import selectors
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
