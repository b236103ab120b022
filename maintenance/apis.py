"""Contradiction review over the API: the open (or resolved) pairs of a bucket, and their resolution."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.services import request_actor
from engram_site.fields import StrictCharField, StrictSerializer
from engram_site.openapi import BODY, errors, limit_offset_page
from engram_site.pagination import list_response, offset_field, page_size_field
from maintenance import selectors
from maintenance.models import ConflictStatus
from maintenance.services import conflict_review
from memories.serializers import MAX_CONTENT_CHARS
from tenants.agents import check_writable
from tenants.selectors import bucket_get

# How much of each memory a list item shows; the memory itself is at /memories/{id}.
SHORT_CONTENT_CHARS = 500


class ConflictMemoryOut(serializers.Serializer):
    id = serializers.UUIDField()
    content = serializers.SerializerMethodField(help_text=f"the first {SHORT_CONTENT_CHARS} characters")
    created_at = serializers.DateTimeField()
    superseded = serializers.SerializerMethodField()

    def get_content(self, memory) -> str:
        text = memory.content
        return text if len(text) <= SHORT_CONTENT_CHARS else text[: SHORT_CONTENT_CHARS - 1] + "…"

    def get_superseded(self, memory) -> bool:
        return memory.superseded_by is not None


class ConflictOut(serializers.Serializer):
    id = serializers.IntegerField()
    bucket_id = serializers.UUIDField()
    memory_a = ConflictMemoryOut()
    memory_b = ConflictMemoryOut()
    code = serializers.CharField(help_text="the cue: one_value, diet, negation or antonym")
    reason = serializers.CharField()
    score = serializers.FloatField()
    similarity = serializers.FloatField(allow_null=True)
    status = serializers.ChoiceField(choices=ConflictStatus.choices)
    found_at = serializers.DateTimeField()
    resolved_at = serializers.DateTimeField(allow_null=True)
    resolved_by = serializers.CharField()
    kept_memory_id = serializers.UUIDField(allow_null=True)


class ConflictResolveOut(serializers.Serializer):
    id = serializers.IntegerField(source="candidate_id")
    action = serializers.CharField()
    status = serializers.ChoiceField(choices=ConflictStatus.choices)
    kept_id = serializers.UUIDField(allow_null=True)
    other_id = serializers.UUIDField(allow_null=True, help_text="the memory superseded, or absorbed by the merge")


class ConflictResolveIn(StrictSerializer):
    action = serializers.ChoiceField(choices=conflict_review.ACTIONS)
    keep = serializers.ChoiceField(
        choices=conflict_review.SIDES, required=False,
        help_text="supersede: the memory that stays current; merge: the one that absorbs the other",
    )  # fmt: skip
    content = StrictCharField(
        max_length=MAX_CONTENT_CHARS, required=False, help_text="merge only: new content of the kept memory"
    )


class ConflictListApi(APIView):
    class Params(StrictSerializer):
        status = serializers.ChoiceField(choices=ConflictStatus.choices, required=False, help_text="default: open")
        limit = page_size_field()
        offset = offset_field()

    @extend_schema(
        operation_id="conflicts_list",
        parameters=[Params],
        responses={200: limit_offset_page("ConflictPage", ConflictOut(many=True)), **errors(400, 404)},
        description="Pairs of memories of the bucket that likely contradict each other, newest found first.",
    )
    def get(self, request, bucket_id):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        params = self.Params(data=request.query_params.dict())
        params.is_valid(raise_exception=True)
        pairs = selectors.conflict_list(
            bucket=bucket, status=params.validated_data.get("status", ConflictStatus.OPEN), agents=request.auth.agents
        )
        return list_response(request, self, pairs, ConflictOut)


class ConflictResolveApi(APIView):
    @extend_schema(
        operation_id="conflicts_resolve",
        request=ConflictResolveIn,
        responses={200: ConflictResolveOut, **errors(404, 409, *BODY)},
        description=(
            "Resolve an open pair: keep_both (never raised again), supersede (the other memory is marked superseded "
            "by the kept one: its history records it and search demotes it) or merge (the kept memory absorbs the "
            "other, optionally with new content). 409 if the pair was already resolved."
        ),
    )
    def post(self, request, bucket_id, conflict_id):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        candidate = selectors.conflict_get(bucket=bucket, candidate_id=conflict_id, agents=request.auth.agents)
        data = ConflictResolveIn(data=request.data)
        data.is_valid(raise_exception=True)
        # Resolving changes both memories (a version each at least): a token held to agents may
        # not change a shared one.
        for memory in (candidate.memory_a, candidate.memory_b):
            check_writable(request.auth.agents, memory.agent_id)
        result = conflict_review.conflict_resolve(
            candidate=candidate, actor=request_actor(request), **data.validated_data
        )
        return Response(ConflictResolveOut(result).data)


class ConflictUndoApi(APIView):
    @extend_schema(
        operation_id="conflicts_undo",
        request=None,
        responses={200: ConflictResolveOut, **errors(404, 409)},
        description=(
            "Undo a supersede: the superseded memory is current again (its history records the undo) and the pair "
            "is open again, to be decided anew. The graph's own supersession of the memory, if a newer fact closes "
            "one of its facts, returns at the graph's next recomputation. 409 not_superseded if the pair is not "
            "resolved by supersede (open, kept both; a merge is undone by restoring the absorbed memory)."
        ),
    )
    def post(self, request, bucket_id, conflict_id):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        candidate = selectors.conflict_get(bucket=bucket, candidate_id=conflict_id, agents=request.auth.agents)
        for memory in (candidate.memory_a, candidate.memory_b):
            check_writable(request.auth.agents, memory.agent_id)
        result = conflict_review.conflict_undo(candidate=candidate, actor=request_actor(request))
        return Response(ConflictResolveOut(result).data)
