"""A memory's life through the API: its history, the bucket's deleted memories, restoring one."""

from __future__ import annotations

from datetime import timedelta

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.services import request_actor
from engram_site.fields import StrictSerializer
from engram_site.openapi import cursor_page, errors
from engram_site.pagination import DeletedCursorPagination, cursor_field, list_response, page_size_field
from memories import selectors, services
from memories.apis.memories import MemoryDetailOut
from memories.quotas import quota_check_memories
from tenants.agents import check_writable
from tenants.models import Scope as TokenScope
from tenants.selectors import bucket_get


class VersionOut(serializers.Serializer):
    version = serializers.IntegerField(help_text="1 for the memory's first change, then 2, 3, ...")
    kind = serializers.CharField(
        help_text="edited, reclassified, superseded, merged (into details.into), deleted, restored, "
        "or rated (feedback: details.signal, details.query, details.agent_id, details.run_id; no field changed)"
    )
    changed = serializers.ListField(child=serializers.CharField(), help_text="the fields the change set")
    previous = serializers.JSONField(help_text="those fields' values before the change")
    details = serializers.JSONField()
    actor = serializers.JSONField(help_text='{"kind": "token" | "operator" | "system", "label": ...}')
    at = serializers.DateTimeField()


def _version_json(number: int, version) -> dict:
    return {
        "version": number,
        "kind": version.kind,
        "changed": sorted(version.previous),
        "previous": version.previous,
        "details": version.details,
        "actor": {"kind": version.actor_kind, "label": version.actor_label},
        "at": serializers.DateTimeField().to_representation(version.created_at),
    }


HistoryOut = inline_serializer(
    "MemoryHistory",
    {
        "memory_id": serializers.UUIDField(),
        "state": serializers.ChoiceField(choices=["live", "deleted"]),
        "versions": VersionOut(many=True),
    },
)

# At most this many versions in one answer (the newest); a memory edited more often than this
# is rare, and the answer says how many there are.
MAX_VERSIONS = 1000


class MemoryHistoryApi(APIView):
    @extend_schema(
        operation_id="memories_history",
        responses={200: HistoryOut, **errors(404)},
        description=(
            "Every change of the memory, oldest first: content and field edits, reclassification, supersession, "
            "merges, delete and restore, and every rating it was given (kind rated), each with the previous values "
            "of the fields it changed and who made it. "
            f"A deleted memory keeps its history until it is purged; at most the {MAX_VERSIONS} newest versions."
        ),
    )
    def get(self, request, memory_id):
        state, versions = selectors.memory_history(tenant=request.auth.tenant, memory_id=memory_id, token=request.auth)
        total = versions.count()
        skipped = max(0, total - MAX_VERSIONS)
        rows = versions[skipped:]
        return Response(
            {
                "memory_id": memory_id,
                "state": state,
                "versions": [_version_json(skipped + i + 1, v) for i, v in enumerate(rows)],
            }
        )


class MemoryRestoreApi(APIView):
    @extend_schema(
        operation_id="memories_restore",
        request=None,
        responses={200: MemoryDetailOut, **errors(403, 404, 409)},
        description=(
            "Put a deleted memory back, with the same id and every field it had, while its bucket's retention_days "
            "have not passed. 409 duplicate_content (with existing_id) when a memory of the same text was written "
            "since; 403 quota_memories when the tenant holds its max_memories. "
            'A token without the read scope gets only {"id": ...}.'
        ),
    )
    def post(self, request, memory_id):
        deleted = selectors.deleted_memory_get(tenant=request.auth.tenant, memory_id=memory_id, token=request.auth)
        check_writable(request.auth.agents, (deleted.row or {}).get("agent_id"))
        # A restored memory is a live one again: over max_memories it is refused like a write.
        quota_check_memories(tenant=request.auth.tenant, incoming=1)
        memory = services.memory_restore(deleted=deleted, actor=request_actor(request))
        if not request.auth.has_scope(TokenScope.READ):
            return Response({"id": str(memory.pk)})
        restored = selectors.memory_get(tenant=request.auth.tenant, memory_id=memory.pk)
        return Response(MemoryDetailOut(restored, context={"agents": request.auth.agents}).data)


class DeletedMemoryOut(serializers.Serializer):
    id = serializers.UUIDField()
    bucket_id = serializers.UUIDField()
    content = serializers.CharField()
    reason = serializers.CharField(help_text="deleted, or merged (absorbed by another memory)")
    deleted_at = serializers.DateTimeField()
    purge_after = serializers.SerializerMethodField(help_text="when the purge job removes it for good")

    def get_purge_after(self, deleted) -> str:
        return serializers.DateTimeField().to_representation(
            deleted.deleted_at + timedelta(days=self.context["retention_days"])
        )


class DeletedMemoriesApi(APIView):
    class Params(StrictSerializer):
        cursor = cursor_field()
        page_size = page_size_field()

    @extend_schema(
        operation_id="memories_deleted_list",
        parameters=[Params],
        responses={200: cursor_page("DeletedMemoryPage", DeletedMemoryOut(many=True)), **errors(400, 404)},
        description="The bucket's deleted memories that can still be restored, most recently deleted first.",
    )
    def get(self, request, bucket_id):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        self.Params(data=request.query_params.dict()).is_valid(raise_exception=True)
        deleted = selectors.deleted_memory_list(bucket=bucket, agents=request.auth.agents)
        context = {"retention_days": bucket.retention_days}
        return list_response(
            request, self, deleted, DeletedMemoryOut, paginator=DeletedCursorPagination, context=context
        )
