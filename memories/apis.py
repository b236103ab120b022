"""Memory endpoints: write, read, edit, delete, list and search."""

from __future__ import annotations

import json

from drf_spectacular.utils import OpenApiParameter, OpenApiTypes, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.pagination import CursorPagination
from rest_framework.response import Response
from rest_framework.views import APIView

from engram_site.fields import StrictCharField
from memories import ranking, retrieval, selectors, services
from memories.links import RESERVED_PREFIX, link_kinds
from memories.models import Attribution, Scope
from tenants.models import Scope as TokenScope
from tenants.selectors import bucket_get

MAX_CONTENT_CHARS = 20_000
MAX_BATCH = 1_000
MAX_TAGS = 50
MAX_TAG_CHARS = 100
MAX_ID_CHARS = 200
MAX_METADATA_BYTES = 16_384
MAX_QUERY_CHARS = 4_000


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not know: a typo must not be silently ignored."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = set(data) - set(self.fields)
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in sorted(unknown)})
        return super().to_internal_value(data)


class MetadataField(serializers.JSONField):
    default_error_messages = {
        "not_object": "Must be a JSON object.",
        "too_large": f"Must be at most {MAX_METADATA_BYTES} bytes as JSON.",
        "nul": "Must not contain NUL characters.",
        "reserved": "Keys starting with '_engram' are reserved for Engram.",
    }

    def to_internal_value(self, data):
        data = super().to_internal_value(data)
        if not isinstance(data, dict):
            self.fail("not_object")
        encoded = json.dumps(data, ensure_ascii=False)
        if len(encoded.encode()) > MAX_METADATA_BYTES:
            self.fail("too_large")
        if "\\u0000" in encoded or "\x00" in encoded:
            self.fail("nul")
        if any(str(key).startswith(RESERVED_PREFIX) for key in data):
            self.fail("reserved")
        return data


class TagsField(serializers.ListField):
    child = StrictCharField(max_length=MAX_TAG_CHARS)

    def __init__(self, **kwargs):
        kwargs.setdefault("max_length", MAX_TAGS)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        tags = super().to_internal_value(data)
        return list(dict.fromkeys(tags))  # de-duplicated, order kept


def _optional_text(max_length: int = MAX_ID_CHARS):
    return StrictCharField(max_length=max_length, required=False, allow_null=True)


class MemoryIn(StrictSerializer):
    content = StrictCharField(max_length=MAX_CONTENT_CHARS)
    attributed_to = serializers.ChoiceField(choices=Attribution.choices, required=False, allow_null=True)
    agent_id = _optional_text()
    run_id = _optional_text()
    source_actor_id = _optional_text()
    hint_root = _optional_text(1_000)
    hint_tags = TagsField(required=False, allow_null=True)
    metadata = MetadataField(required=False, allow_null=True)
    created_at = serializers.DateTimeField(required=False, allow_null=True)


class MemoryBatchIn(StrictSerializer):
    memories = MemoryIn(many=True, allow_empty=False, max_length=MAX_BATCH)
    sequence = serializers.BooleanField(
        default=True, help_text="Treat the batch as a sequence (each item gets its predecessors as context)."
    )


class MemoryOut(serializers.Serializer):
    id = serializers.UUIDField()
    bucket_id = serializers.UUIDField()
    content = serializers.CharField()
    created_at = serializers.DateTimeField()
    last_accessed_at = serializers.DateTimeField(allow_null=True)
    attributed_to = serializers.CharField(allow_null=True)
    agent_id = serializers.CharField(allow_null=True)
    run_id = serializers.CharField(allow_null=True)
    source_actor_id = serializers.CharField(allow_null=True)
    hint_root = serializers.CharField(allow_null=True)
    hint_tags = serializers.ListField(child=serializers.CharField(), allow_null=True)
    metadata = serializers.JSONField(allow_null=True)
    classified_scope = serializers.CharField(allow_null=True)
    classified_topic = serializers.CharField(allow_null=True)
    token_count = serializers.IntegerField(allow_null=True)
    linked_memory_ids = serializers.JSONField(allow_null=True)
    superseded_at = serializers.DateTimeField(allow_null=True)
    superseded_by = serializers.UUIDField(allow_null=True)
    context = serializers.CharField(source="context_text", allow_null=True)
    links = serializers.SerializerMethodField(help_text="kinds of the links in linked_memory_ids")
    enrichment = serializers.SerializerMethodField()

    def get_links(self, memory) -> list[dict]:
        return link_kinds(memory)

    def get_enrichment(self, memory) -> dict:
        def state(done: bool) -> str:
            return "ready" if done else "pending"

        context = "none"
        if memory.context_text:
            context = state(memory.context_lemmatized is not None and memory.context_embedding is not None)
        return {
            "embedding": state(memory.embedding is not None),
            "lemmas": state(memory.text_lemmatized is not None),
            "context": context,
        }


IngestOut = inline_serializer(
    "IngestResponse",
    {
        "results": inline_serializer(
            "IngestResult", {"id": serializers.UUIDField(), "deduplicated": serializers.BooleanField()}, many=True
        )
    },
)


def _to_input(data: dict) -> services.MemoryInput:
    return services.MemoryInput(**data)


class BucketMemoriesApi(APIView):
    @extend_schema(
        operation_id="memories_create",
        request={"application/json": OpenApiTypes.OBJECT},
        responses={201: IngestOut},
        description=(
            'Write one memory (a memory object) or a batch ({"memories": [...], "sequence": true}, up to '
            f"{MAX_BATCH} items). Results come back in input order; a memory whose normalised text already exists "
            "in the bucket returns the existing id with deduplicated=true. Nothing is written if any item is invalid."
        ),
        examples=[],
    )
    def post(self, request, bucket_id):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        data = request.data
        if isinstance(data, dict) and "memories" in data:
            batch = MemoryBatchIn(data=data)
            batch.is_valid(raise_exception=True)
            items = [_to_input(item) for item in batch.validated_data["memories"]]
            sequence = batch.validated_data["sequence"]
        elif isinstance(data, dict):
            single = MemoryIn(data=data)
            single.is_valid(raise_exception=True)
            items, sequence = [_to_input(single.validated_data)], True
        else:
            raise serializers.ValidationError({"non_field_errors": ['Send one memory object or {"memories": [...]}.']})
        results = services.memories_ingest(bucket=bucket, items=items, sequence=sequence)
        return Response(
            {"results": [{"id": r.id, "deduplicated": r.deduplicated} for r in results]},
            status=status.HTTP_201_CREATED,
        )

    class ListParams(StrictSerializer):
        cursor = serializers.CharField(required=False)
        page_size = serializers.IntegerField(required=False, min_value=1, max_value=500)
        hint_tags = serializers.CharField(required=False, help_text="comma-separated; all must be present")
        agent_id = serializers.CharField(required=False)
        run_id = serializers.CharField(required=False)
        attributed_to = serializers.ChoiceField(choices=Attribution.choices, required=False)
        classified_scope = serializers.ChoiceField(choices=Scope.choices, required=False)
        classified_topic = serializers.CharField(required=False)
        created_after = serializers.DateTimeField(required=False)
        created_before = serializers.DateTimeField(required=False)
        pending = serializers.BooleanField(required=False, allow_null=True, default=None)

    @extend_schema(
        operation_id="memories_list",
        parameters=[
            OpenApiParameter(name, OpenApiTypes.STR, required=False)
            for name in (
                "cursor",
                "hint_tags",
                "agent_id",
                "run_id",
                "attributed_to",
                "classified_scope",
                "classified_topic",
                "created_after",
                "created_before",
            )
        ]  # fmt: skip
        + [
            OpenApiParameter("page_size", OpenApiTypes.INT, required=False),
            OpenApiParameter("pending", OpenApiTypes.BOOL, required=False, description="only rows awaiting enrichment"),
        ],
        responses=MemoryOut(many=True),
    )
    def get(self, request, bucket_id):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        params = self.ListParams(data=request.query_params.dict())
        params.is_valid(raise_exception=True)
        values = dict(params.validated_data)
        pending = values.pop("pending", None)
        values.pop("cursor", None)
        values.pop("page_size", None)
        if "hint_tags" in values:
            values["hint_tags"] = [t.strip() for t in values["hint_tags"].split(",") if t.strip()]
        memories = selectors.memory_list(bucket=bucket, filters=retrieval.SearchFilters(**values), pending=pending)
        paginator = MemoryCursorPagination()
        page = paginator.paginate_queryset(memories, request, view=self)
        return paginator.get_paginated_response(MemoryOut(page, many=True).data)


class MemoryCursorPagination(CursorPagination):
    ordering = ("-created_at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class MemoryUpdateIn(StrictSerializer):
    content = StrictCharField(max_length=MAX_CONTENT_CHARS, required=False)
    attributed_to = serializers.ChoiceField(choices=Attribution.choices, required=False, allow_null=True)
    agent_id = _optional_text()
    run_id = _optional_text()
    source_actor_id = _optional_text()
    hint_root = _optional_text(1_000)
    hint_tags = TagsField(required=False, allow_null=True)
    metadata = MetadataField(required=False, allow_null=True)
    created_at = serializers.DateTimeField(required=False)
    classified_scope = serializers.ChoiceField(choices=Scope.choices, required=False, allow_null=True)
    classified_topic = _optional_text(100)


class MemoryDetailApi(APIView):
    def _memory(self, request, memory_id):
        return selectors.memory_get(tenant=request.auth.tenant, memory_id=memory_id, token=request.auth)

    @extend_schema(operation_id="memories_retrieve", responses=MemoryOut)
    def get(self, request, memory_id):
        memory = self._memory(request, memory_id)
        return Response(MemoryOut(memory).data)

    @extend_schema(operation_id="memories_update", request=MemoryUpdateIn, responses=MemoryOut)
    def patch(self, request, memory_id):
        memory = self._memory(request, memory_id)
        changes = MemoryUpdateIn(data=request.data)
        changes.is_valid(raise_exception=True)
        memory = services.memory_update(memory=memory, **changes.validated_data)
        return Response(MemoryOut(memory).data)

    @extend_schema(operation_id="memories_destroy", responses={204: None})
    def delete(self, request, memory_id):
        memory = self._memory(request, memory_id)
        services.memory_delete(memory=memory)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SearchFiltersIn(StrictSerializer):
    hint_tags = TagsField(required=False)
    agent_id = StrictCharField(max_length=MAX_ID_CHARS, required=False)
    run_id = StrictCharField(max_length=MAX_ID_CHARS, required=False)
    attributed_to = serializers.ChoiceField(choices=Attribution.choices, required=False)
    classified_scope = serializers.ChoiceField(choices=Scope.choices, required=False)
    classified_topic = StrictCharField(max_length=100, required=False)
    created_after = serializers.DateTimeField(required=False)
    created_before = serializers.DateTimeField(required=False)
    include_superseded = serializers.BooleanField(
        required=False, help_text="include memories a newer fact has superseded (demoted; default true)"
    )
    as_of = serializers.DateTimeField(
        required=False, help_text="search memory as it stood at this time (newer memories and facts are ignored)"
    )


class SearchHitOut(serializers.Serializer):
    id = serializers.UUIDField()
    content = serializers.CharField()
    score = serializers.FloatField()
    created_at = serializers.DateTimeField()
    attributed_to = serializers.CharField(allow_null=True)
    agent_id = serializers.CharField(allow_null=True)
    run_id = serializers.CharField(allow_null=True)
    source_actor_id = serializers.CharField(allow_null=True)
    hint_root = serializers.CharField(allow_null=True)
    hint_tags = serializers.ListField(child=serializers.CharField(), allow_null=True)
    metadata = serializers.JSONField(allow_null=True)
    classified_scope = serializers.CharField(allow_null=True)
    classified_topic = serializers.CharField(allow_null=True)
    token_count = serializers.IntegerField(allow_null=True)
    superseded = serializers.BooleanField()
    superseded_by = serializers.UUIDField(allow_null=True)
    explain = serializers.JSONField(required=False)


class SearchOut(serializers.Serializer):
    mode_used = serializers.ChoiceField(choices=retrieval.MODES)
    results = SearchHitOut(many=True)
    warnings = serializers.ListField(child=serializers.CharField())
    total_tokens = serializers.IntegerField()


class SearchApi(APIView):
    # Searching is reading, even though the query travels in a POST body.
    required_scopes = {"POST": TokenScope.READ}

    class Input(StrictSerializer):
        query = StrictCharField(max_length=MAX_QUERY_CHARS)
        mode = serializers.ChoiceField(choices=retrieval.MODES, default="hybrid")
        limit = serializers.IntegerField(min_value=1, max_value=retrieval.MAX_LIMIT, required=False)
        token_budget = serializers.IntegerField(min_value=1, max_value=1_000_000, required=False)
        filters = SearchFiltersIn(required=False)
        explain = serializers.BooleanField(default=False)
        ranking = serializers.JSONField(required=False, help_text="overrides of the ranking defaults")
        now = serializers.DateTimeField(required=False, help_text="evaluate recency and relative dates at this time")

        def validate_ranking(self, value):
            try:
                ranking.merge(ranking.DEFAULTS, value)
            except ranking.RankingConfigError as exc:
                raise serializers.ValidationError(str(exc)) from None
            return value

    @extend_schema(operation_id="memories_search", request=Input, responses=SearchOut)
    def post(self, request, bucket_id):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        params = self.Input(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        result = retrieval.memories_search(
            bucket=bucket,
            query=data["query"],
            mode=data["mode"],
            limit=data.get("limit"),
            token_budget=data.get("token_budget"),
            filters=retrieval.SearchFilters(**data.get("filters", {})),
            explain=data["explain"],
            ranking_overrides=data.get("ranking"),
            now=data.get("now"),
        )
        results = []
        for hit in result.hits:
            item = {**hit.row, "score": round(hit.score, 6)}
            if data["explain"]:
                item["explain"] = hit.explain
            results.append(item)
        payload = {
            "mode_used": result.mode_used,
            "results": SearchHitOut(results, many=True).data,
            "warnings": result.warnings,
            "total_tokens": sum(h.row["token_count"] or 0 for h in result.hits),
        }
        return Response(payload)
