"""Memory endpoints: write, read, edit, delete and list."""

from __future__ import annotations

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.services import request_actor
from engram_site import replica
from engram_site.fields import JSONObjectField, StrictBooleanField, StrictSerializer
from engram_site.openapi import BODY, cursor_page, errors
from engram_site.pagination import CreatedCursorPagination, cursor_field, list_response, page_size_field
from memories import provenance, selectors, services
from memories.filters import MemoryFilters
from memories.links import link_kinds
from memories.quotas import quota_check_memories
from memories.serializers import MemoryIn, MemoryUpdateIn, list_filter_fields
from tenants.agents import check_writable, write_agent
from tenants.models import Scope as TokenScope
from tenants.quotas import quota_check_size
from tenants.selectors import bucket_get

MAX_BATCH = 1_000


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
    # With ENGRAM_WORKER_YIELD_TO_WRITES off, the worker does not wait while memories are written
    # (engram_site/activity.py): the work they queue is what it must keep up with.
    worker_runs_beside = ("POST",)

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
        # A replica reads the page, if there is one (engram_site/replica.py); the bucket and the
        # token were checked on the primary.
        return replica.read(
            request.auth.tenant_id,
            lambda using: list_response(
                request, self, selectors.memory_list(bucket=bucket, filters=filters, pending=pending, using=using),
                MemoryOut, paginator=CreatedCursorPagination,
            ),
        )  # fmt: skip


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
