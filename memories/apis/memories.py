"""Memory endpoints: write, read, edit, delete, list and search."""

from __future__ import annotations

import json
import time
from datetime import timedelta

from django.utils import timezone
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema, extend_schema_serializer, inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.services import request_actor
from engram_site.fields import (
    JSONObjectField,
    StoredDateTimeField,
    StrictBooleanField,
    StrictCharField,
    StrictDateTimeField,
    StrictFloatField,
    StrictIntegerField,
    StrictSerializer,
    character_error,
)
from engram_site.openapi import BODY, cursor_page, errors
from engram_site.pagination import CreatedCursorPagination, cursor_field, page_size_field
from engram_site.parsers import json_depth_exceeds
from memories import provenance, ranking, retrieval, selectors, services
from memories.filters import MemoryFilters
from memories.links import RESERVED_PREFIX, link_kinds
from memories.models import Attribution, Scope
from memories.quotas import quota_check_memories
from memories.serializers import SearchFiltersIn, TagsField, list_filter_fields
from tenants import usage
from tenants.agents import check_writable, write_agent
from tenants.models import Scope as TokenScope
from tenants.quotas import quota_check_size
from tenants.selectors import bucket_get, buckets_readable

MAX_CONTENT_CHARS = 20_000
MAX_BATCH = 1_000
MAX_ID_CHARS = 200
MAX_METADATA_BYTES = 16_384
MAX_METADATA_DEPTH = 32
MAX_QUERY_CHARS = 4_000
MAX_TTL_SECONDS = 100 * 365 * 86400


def _importance_field():
    return StrictFloatField(
        min_value=0.0, max_value=1.0, required=False, allow_null=True,
        help_text="how much the memory matters, 0 to 1 (a bounded ranking boost; null: not said)",
    )  # fmt: skip


def _expires_at_field():
    return StoredDateTimeField(
        required=False, allow_null=True, help_text="after this time the memory leaves searches and lists (null: never)"
    )


def _ttl_field():
    return StrictIntegerField(
        min_value=1, max_value=MAX_TTL_SECONDS, required=False,
        help_text="expires this many seconds from now (instead of expires_at)",
    )  # fmt: skip


def _resolve_ttl(data: dict) -> dict:
    """``ttl_seconds`` becomes ``expires_at``; both at once is an error."""
    if "ttl_seconds" in data:
        if "expires_at" in data:
            raise serializers.ValidationError({"ttl_seconds": ["Give expires_at or ttl_seconds, not both."]})
        data["expires_at"] = timezone.now() + timedelta(seconds=data.pop("ttl_seconds"))
    return data


def _json_strings(value):
    """Every key and string value in parsed JSON (iterative: depth is checked separately)."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            yield from (key for key in node if isinstance(key, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


class MetadataField(JSONObjectField):
    default_error_messages = {
        "too_deep": f"Must not be nested more than {MAX_METADATA_DEPTH} levels deep.",
        "too_large": f"Must be at most {MAX_METADATA_BYTES} bytes as JSON.",
        "nul": "Must not contain NUL characters.",
        "control": "{message}",
        "reserved": "Keys starting with '_engram' are reserved for Engram.",
    }

    def to_internal_value(self, data):
        data = super().to_internal_value(data)  # an object
        # Depth first: json.dumps below (and psycopg, and reading the row back) recurse.
        if json_depth_exceeds(data, MAX_METADATA_DEPTH):
            self.fail("too_deep")
        # Characters before size: a lone surrogate ("\udc80") cannot even be encoded to measure it.
        for text in _json_strings(data):
            message = character_error(text)
            if message is not None and "\x00" in text:
                self.fail("nul")  # PostgreSQL's jsonb cannot hold \u0000
            if message is not None:
                self.fail("control", message=message)
        if len(json.dumps(data, ensure_ascii=False).encode()) > MAX_METADATA_BYTES:
            self.fail("too_large")
        if any(str(key).startswith(RESERVED_PREFIX) for key in data):
            self.fail("reserved")
        return data


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
    created_at = StoredDateTimeField(required=False, allow_null=True)
    importance = _importance_field()
    expires_at = _expires_at_field()
    ttl_seconds = _ttl_field()

    def validate(self, attrs):
        return _resolve_ttl(dict(attrs))


class MemoryBatchIn(StrictSerializer):
    memories = MemoryIn(many=True, allow_empty=False, max_length=MAX_BATCH)
    sequence = StrictBooleanField(
        default=True, help_text="Treat the batch as a sequence (each item gets its predecessors as context)."
    )


class MemoryOut(serializers.Serializer):
    id = serializers.UUIDField()
    bucket_id = serializers.UUIDField()
    content = serializers.CharField()
    created_at = serializers.DateTimeField()
    last_accessed_at = serializers.DateTimeField(
        source="last_access", allow_null=True, help_text="when a search last returned it (to the hour)"
    )
    attributed_to = serializers.CharField(allow_null=True)
    agent_id = serializers.CharField(allow_null=True)
    run_id = serializers.CharField(allow_null=True)
    source_actor_id = serializers.CharField(allow_null=True)
    hint_root = serializers.CharField(allow_null=True)
    hint_tags = serializers.ListField(child=serializers.CharField(), allow_null=True)
    metadata = JSONObjectField(allow_null=True)
    classified_scope = serializers.CharField(allow_null=True)
    classified_topic = serializers.CharField(allow_null=True)
    token_count = serializers.IntegerField(allow_null=True)
    linked_memory_ids = serializers.JSONField(allow_null=True)
    superseded_at = serializers.DateTimeField(allow_null=True)
    superseded_by = serializers.UUIDField(allow_null=True)
    importance = serializers.FloatField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)
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


def _to_input(data: dict, agents) -> services.MemoryInput:
    """A validated memory as the write gateway takes it, stored under the agent the token may
    write as (tenants/agents.py: defaulted or refused for a token held to agents)."""
    return services.MemoryInput(**{**data, "agent_id": write_agent(agents, data.get("agent_id"))})


MemoryWrite = PolymorphicProxySerializer(
    component_name="MemoryWrite",
    serializers=[MemoryIn, MemoryBatchIn],
    resource_type_field_name=None,
)


class BucketMemoriesApi(APIView):
    @extend_schema(
        operation_id="memories_create",
        request=MemoryWrite,
        responses={201: IngestOut, **errors(403, 404, *BODY)},
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
            items = [_to_input(item, request.auth.agents) for item in batch.validated_data["memories"]]
            sequence = batch.validated_data["sequence"]
        elif isinstance(data, dict):
            single = MemoryIn(data=data)
            single.is_valid(raise_exception=True)
            items, sequence = [_to_input(single.validated_data, request.auth.agents)], True
        else:
            raise serializers.ValidationError({"non_field_errors": ['Send one memory object or {"memories": [...]}.']})
        # Quotas before anything is written (403 with a quota_* code).
        tenant = request.auth.tenant
        quota_check_size(tenant=tenant, name="max_batch", asked=len(items), refusal="batch")
        quota_check_memories(tenant=tenant, incoming=len(items))
        results = services.memories_ingest(
            bucket=bucket, items=items, sequence=sequence, actor=request_actor(request), agents=request.auth.agents
        )
        return Response(
            {"results": [{"id": r.id, "deduplicated": r.deduplicated} for r in results]},
            status=status.HTTP_201_CREATED,
        )

    # The filters come from their one definition (memories/filters.py, memories/serializers.py).
    ListParams = type(
        "ListParams",
        (StrictSerializer,),
        {
            "__module__": __name__,
            "__qualname__": "BucketMemoriesApi.ListParams",
            "cursor": cursor_field(),
            "page_size": page_size_field(),
            **list_filter_fields(),
            "pending": serializers.BooleanField(
                required=False, help_text="true: only rows awaiting enrichment; false: only enriched rows"
            ),
        },
    )

    @extend_schema(
        operation_id="memories_list",
        parameters=[ListParams],
        responses={200: cursor_page("MemoryPage", MemoryOut(many=True)), **errors(400, 404)},
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
        filters = MemoryFilters(**values, agents=request.auth.agents)
        memories = selectors.memory_list(bucket=bucket, filters=filters, pending=pending)
        paginator = CreatedCursorPagination()
        page = paginator.paginate_queryset(memories, request, view=self)
        return paginator.get_paginated_response(MemoryOut(page, many=True).data)


class MemoryUpdateIn(StrictSerializer):
    content = StrictCharField(max_length=MAX_CONTENT_CHARS, required=False)
    attributed_to = serializers.ChoiceField(choices=Attribution.choices, required=False, allow_null=True)
    agent_id = _optional_text()
    run_id = _optional_text()
    source_actor_id = _optional_text()
    hint_root = _optional_text(1_000)
    hint_tags = TagsField(required=False, allow_null=True)
    metadata = MetadataField(required=False, allow_null=True)
    created_at = StoredDateTimeField(required=False)
    classified_scope = serializers.ChoiceField(choices=Scope.choices, required=False, allow_null=True)
    classified_topic = _optional_text(100)
    importance = _importance_field()
    expires_at = _expires_at_field()
    ttl_seconds = _ttl_field()

    def validate(self, attrs):
        return _resolve_ttl(dict(attrs))


class MemoryDetailOut(MemoryOut):
    # --- sources app (docs/SOURCES.md): provenance, read from the sources' link table -----
    source = serializers.SerializerMethodField(help_text="{source_id, chunk_id, kind, title} it came from, or null")

    def get_source(self, memory) -> dict | None:
        return provenance.memory_source(memory=memory, agents=self.context.get("agents"))


class MemoryDetailApi(APIView):
    def _memory(self, request, memory_id):
        return selectors.memory_get(tenant=request.auth.tenant, memory_id=memory_id, token=request.auth)

    @extend_schema(operation_id="memories_retrieve", responses={200: MemoryDetailOut, **errors(404)})
    def get(self, request, memory_id):
        memory = self._memory(request, memory_id)
        return Response(MemoryDetailOut(memory, context={"agents": request.auth.agents}).data)

    @extend_schema(
        operation_id="memories_update",
        request=MemoryUpdateIn,
        responses={200: MemoryDetailOut, **errors(404, 409, *BODY)},
        description=(
            "Change a memory's fields. A token with the read scope gets the memory back as GET returns it; a token "
            'without it gets only {"id": ...}: writing never reveals stored content.'
        ),
    )
    def patch(self, request, memory_id):
        memory = self._memory(request, memory_id)
        changes = MemoryUpdateIn(data=request.data)
        changes.is_valid(raise_exception=True)
        values = dict(changes.validated_data)
        agents = request.auth.agents
        check_writable(agents, memory.agent_id)
        if agents is not None and "agent_id" in values:
            if values["agent_id"] is None:
                check_writable(agents, None)  # a token held to agents cannot make a memory shared
            values["agent_id"] = write_agent(agents, values["agent_id"])
        memory = services.memory_update(memory=memory, actor=request_actor(request), **values)
        if not request.auth.has_scope(TokenScope.READ):
            # The row holds what others wrote (content, metadata, the run's context): a
            # write-only token, refused by GET, must not read it through PATCH.
            return Response({"id": str(memory.pk)})
        return Response(MemoryDetailOut(memory, context={"agents": request.auth.agents}).data)

    @extend_schema(operation_id="memories_destroy", responses={204: None, **errors(404)})
    def delete(self, request, memory_id):
        memory = self._memory(request, memory_id)
        check_writable(request.auth.agents, memory.agent_id)
        services.memory_delete(memory=memory, actor=request_actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


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
    metadata = JSONObjectField(allow_null=True)
    classified_scope = serializers.CharField(allow_null=True)
    classified_topic = serializers.CharField(allow_null=True)
    token_count = serializers.IntegerField(allow_null=True)
    superseded = serializers.BooleanField()
    superseded_by = serializers.UUIDField(allow_null=True)
    importance = serializers.FloatField(allow_null=True)
    explain = serializers.JSONField(required=False)


# DRF's own date-time rendering (current time zone, ISO 8601, UTC as Z, None as None).
_DATETIME_OUT = serializers.DateTimeField()


class CrossSearchHitOut(SearchHitOut):
    bucket_id = serializers.UUIDField(help_text="the bucket the memory is in")


def _hit_json(hit: retrieval.Hit, explain: bool, with_bucket: bool = False) -> dict:
    """One search hit exactly as :class:`SearchHitOut` (the documented shape) renders it, built
    directly: the serializer's per-field machinery cost about 0.1 ms a hit, a millisecond of
    every search (a test in tests/retrieval/test_search.py compares the two)."""
    row = hit.row
    item = {"id": str(row["id"])}
    if with_bucket:
        item["bucket_id"] = str(row["bucket_id"])
    item |= {
        "content": row["content"],
        "score": round(hit.score, 6),
        "created_at": _DATETIME_OUT.to_representation(row["created_at"]),
    }
    for name in ("attributed_to", "agent_id", "run_id", "source_actor_id", "hint_root", "hint_tags", "metadata",
                 "classified_scope", "classified_topic", "token_count"):  # fmt: skip
        item[name] = row[name]
    item["superseded"] = bool(row["superseded"])
    item["superseded_by"] = str(row["superseded_by"]) if row["superseded_by"] is not None else None
    item["importance"] = row["importance"]
    if explain:
        item["explain"] = hit.explain
    return item


class SearchOut(serializers.Serializer):
    mode_used = serializers.ChoiceField(choices=retrieval.MODES)
    results = SearchHitOut(many=True)
    warnings = serializers.ListField(child=serializers.CharField())
    total_tokens = serializers.IntegerField()


class SearchApi(APIView):
    # Searching is reading, even though the query travels in a POST body.
    required_scopes = {"POST": TokenScope.READ}

    @extend_schema_serializer(component_name="Search")
    class Input(StrictSerializer):
        query = StrictCharField(max_length=MAX_QUERY_CHARS)
        mode = serializers.ChoiceField(choices=retrieval.MODES, default="hybrid")
        limit = StrictIntegerField(min_value=1, max_value=retrieval.MAX_LIMIT, required=False)
        token_budget = StrictIntegerField(min_value=1, max_value=1_000_000, required=False)
        filters = SearchFiltersIn(required=False)
        explain = StrictBooleanField(default=False)
        ranking = JSONObjectField(required=False, help_text="overrides of the ranking defaults")
        now = StrictDateTimeField(required=False, help_text="evaluate recency and relative dates at this time")

        def validate_ranking(self, value):
            try:
                ranking.merge(ranking.DEFAULTS, value)
            except ranking.RankingConfigError as exc:
                raise serializers.ValidationError(str(exc)) from None
            return value

    @extend_schema(operation_id="memories_search", request=Input, responses={200: SearchOut, **errors(404, *BODY)})
    def post(self, request, bucket_id):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        params = self.Input(data=request.data)
        params.is_valid(raise_exception=True)
        return Response(_search(params.validated_data, [bucket], agents=request.auth.agents))


def _search(data: dict, buckets: list, *, agents=None, across: bool = False) -> dict:
    """Run the search a validated body asks for over ``buckets``; the response body. The
    bucket search and the search across buckets share it: one bucket searched either way gives
    the same hits (across buckets, each names its bucket). ``agents``: the token's agent
    restriction (only those agents' memories are searched); the search counts in the tenant's
    usage."""
    if not buckets:
        return {"mode_used": data["mode"], "results": [], "warnings": [], "total_tokens": 0}
    started = time.perf_counter()
    result = retrieval.memories_search(
        buckets=buckets,
        query=data["query"],
        mode=data["mode"],
        limit=data.get("limit"),
        token_budget=data.get("token_budget"),
        filters=MemoryFilters(**data.get("filters", {}), agents=agents),
        explain=data["explain"],
        ranking_overrides=data.get("ranking"),
        now=data.get("now"),
    )
    payload = {
        "mode_used": result.mode_used,
        "results": [_hit_json(hit, data["explain"], with_bucket=across) for hit in result.hits],
        "warnings": result.warnings,
        "total_tokens": sum(h.row["token_count"] or 0 for h in result.hits),
    }
    usage.record_search(
        tenant_id=buckets[0].tenant_id,
        milliseconds=(time.perf_counter() - started) * 1000,
        tokens=payload["total_tokens"],
    )
    return payload


MAX_SEARCH_BUCKETS = 100


class BucketRefOut(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()


class CrossSearchOut(SearchOut):
    results = CrossSearchHitOut(many=True)
    buckets = BucketRefOut(many=True, help_text="the buckets searched, in the order given (by default: by name)")


class CrossSearchApi(APIView):
    """One search over several buckets: fused once, cut to one limit and one token budget."""

    required_scopes = {"POST": TokenScope.READ}

    @extend_schema_serializer(component_name="SearchAcrossBuckets")
    class Input(SearchApi.Input):
        # Strings, not UUIDs: a malformed id answers 404 like a missing bucket, as in paths.
        buckets = serializers.ListField(
            child=StrictCharField(max_length=64),
            required=False,
            min_length=1,
            max_length=MAX_SEARCH_BUCKETS,
            help_text=(
                f"ids of the buckets to search (1 to {MAX_SEARCH_BUCKETS}, no repeats); default: every bucket the "
                "token can read"
            ),
        )

        def validate_buckets(self, value):
            if len(set(value)) != len(value):
                raise serializers.ValidationError("Name each bucket once.")
            return value

    @extend_schema(
        operation_id="memories_search_across",
        request=Input,
        responses={200: CrossSearchOut, **errors(404, *BODY)},
        description=(
            "Search several buckets at once with the body of a bucket search plus `buckets`. Their memories are "
            "ranked together (keyword statistics of the buckets taken together, one vector walk), the signals are "
            "fused once and one `limit` and one `token_budget` cut the answer; each result names its `bucket_id`. "
            "A bucket that is another tenant's, outside the token's restriction or missing answers 404."
        ),
    )
    def post(self, request):
        params = self.Input(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        buckets = buckets_readable(
            tenant=request.auth.tenant, token=request.auth, bucket_ids=data.get("buckets"), at_most=MAX_SEARCH_BUCKETS
        )
        if len(buckets) > MAX_SEARCH_BUCKETS:
            raise serializers.ValidationError(
                {"buckets": [f"The token can read more than {MAX_SEARCH_BUCKETS} buckets: name the ones to search."]}
            )
        payload = _search(data, buckets, agents=request.auth.agents, across=True)
        payload["buckets"] = [{"id": str(b.pk), "name": b.name} for b in buckets]
        return Response(payload)
