"""Memory blocks: /api/v1/buckets/{bucket_id}/blocks (the list), …/blocks/{label} (GET, PUT,
PATCH, DELETE) and …/blocks/{label}/history. The writes are memories.services.blocks.

A block is addressed by its label and owner: ``?agent_id=`` names an agent's own block; without
it, the bucket's shared block. Writes are conditional (docs/API.md, "Memory blocks"): every
answer carries the block's ``ETag``; a change sends it back in ``If-Match`` (or ``*``) and gets
412 if the block has moved on, 428 if it sent none; a PUT without If-Match creates a block that
does not exist yet."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.services import request_actor
from engram_site.exceptions import Forbidden
from engram_site.fields import StrictCharField, StrictIntegerField, StrictSerializer, query_values
from engram_site.openapi import BODY, errors, limit_offset_page
from engram_site.pagination import list_response, offset_field, page_size_field
from memories import selectors
from memories.models import BLOCK_LABEL_MAX, BLOCK_LABEL_PATTERN, BLOCK_MAX_CHARS, BLOCK_MAX_TOKENS_LIMIT
from memories.serializers import MAX_ID_CHARS
from memories.services import blocks
from tenants.models import Scope as TokenScope
from tenants.selectors import bucket_get

MAX_BLOCK_CHARS = BLOCK_MAX_CHARS
MAX_REASON_CHARS = 2_000


class BlockOut(serializers.Serializer):
    id = serializers.UUIDField(
        help_text="the block's id (a change-feed event's block_id); a block deleted and created again has a new one"
    )
    bucket_id = serializers.UUIDField()
    label = serializers.CharField()
    agent_id = serializers.CharField(
        allow_null=True, help_text="the agent whose block it is; null: the bucket's shared block"
    )
    content = serializers.CharField(allow_blank=True)
    token_count = serializers.IntegerField(help_text="what the text costs of a search's token budget")
    max_tokens = serializers.IntegerField()
    version = serializers.IntegerField(help_text="1 when created, one more with each change")
    etag = serializers.CharField(help_text="the ETag header's value: send it in If-Match to change this version")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class BlockVersionOut(serializers.Serializer):
    version = serializers.IntegerField()
    change = serializers.CharField(help_text="created or edited")
    content = serializers.CharField(allow_blank=True, help_text="the text as this version left it")
    token_count = serializers.IntegerField()
    max_tokens = serializers.IntegerField()
    reason = serializers.CharField(allow_blank=True, help_text="why, as the writer said")
    actor = serializers.SerializerMethodField(help_text='{"kind": "token" | "operator" | "system", "id", "label"}')
    edited_at = serializers.DateTimeField()

    def get_actor(self, edit) -> dict:
        return {"kind": edit.actor_kind, "id": edit.actor_id, "label": edit.actor_label}


class OwnerParams(StrictSerializer):
    agent_id = StrictCharField(
        max_length=MAX_ID_CHARS, required=False, help_text="the agent whose block it is; omitted: the shared block"
    )


IF_MATCH = OpenApiParameter(
    "If-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=False,
    description="the ETag of the version the change is based on, or * for whatever version there is",
)
IF_NONE_MATCH = OpenApiParameter(
    "If-None-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=False,
    description="* : create the block only if there is none (412 if there is)",
)
LABEL = OpenApiParameter(
    "label",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    pattern=BLOCK_LABEL_PATTERN,
    description=f"the block's name: lower-case letters, digits, _ and -, at most {BLOCK_LABEL_MAX} characters",
)
# Reads answer 404; writes also 412 (stale If-Match) and 428 (no If-Match on an existing block).
_WRITE_ERRORS = errors(404, 412, 428, *BODY)


def _owner(request) -> str | None:
    params = OwnerParams(data=query_values(request.query_params))
    params.is_valid(raise_exception=True)
    return params.validated_data.get("agent_id")


def _expected(request) -> blocks.Expected:
    return blocks.Expected.from_headers(request.headers.get("If-Match"), request.headers.get("If-None-Match"))


def _check_writable(token, agent_id: str | None) -> None:
    """403 ``agent_forbidden`` unless the token may write ``agent_id``'s block: a token held to
    agents writes its agents' blocks only (a shared block is read-only to it, as a shared
    memory is)."""
    agents = token.agents
    if agents is not None and not agents.can_write(agent_id):
        what = "the bucket's shared blocks" if agent_id is None else f"agent {agent_id!r}'s blocks"
        raise Forbidden(f"This token is held to agents and may not change {what}.", code="agent_forbidden")


def _answer(request, block, status_code=status.HTTP_200_OK) -> Response:
    if request.auth.has_scope(TokenScope.READ):
        body = BlockOut(block).data
    else:  # a write-only token: the block holds what others wrote (an append returns it all)
        body = {"label": block.label, "agent_id": block.agent_id, "version": block.version, "etag": block.etag}
    response = Response(body, status=status_code)
    response["ETag"] = block.etag
    return response


class BlockListApi(APIView):
    class ListParams(StrictSerializer):
        limit = page_size_field()
        offset = offset_field()
        agent_id = StrictCharField(max_length=MAX_ID_CHARS, required=False, help_text="only this agent's blocks")

    @extend_schema(
        operation_id="blocks_list",
        parameters=[ListParams],
        responses={200: limit_offset_page("BlockPage", BlockOut(many=True)), **errors(400, 404)},
        description="The bucket's blocks the token may read: the shared ones first, then each agent's, by label.",
    )
    def get(self, request, bucket_id):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        params = self.ListParams(data=query_values(request.query_params))
        params.is_valid(raise_exception=True)
        rows = selectors.block_list(
            bucket=bucket, agents=request.auth.agents, agent_id=params.validated_data.get("agent_id")
        )
        return list_response(request, self, rows, BlockOut)


class BlockDetailApi(APIView):
    @extend_schema_serializer(component_name="BlockPut")
    class PutInput(StrictSerializer):
        content = StrictCharField(max_length=MAX_BLOCK_CHARS, allow_blank=True, trim_whitespace=False)
        max_tokens = StrictIntegerField(
            min_value=1, max_value=BLOCK_MAX_TOKENS_LIMIT, required=False,
            help_text="the block's limit (default: unchanged, 2048 for a new block)",
        )  # fmt: skip
        reason = StrictCharField(max_length=MAX_REASON_CHARS, required=False, allow_blank=True, default="")

    @extend_schema_serializer(component_name="BlockPatch")
    class PatchInput(StrictSerializer):
        content = StrictCharField(
            max_length=MAX_BLOCK_CHARS, allow_blank=True, trim_whitespace=False, required=False,
            help_text="the whole new text",
        )  # fmt: skip
        append = StrictCharField(
            max_length=MAX_BLOCK_CHARS, trim_whitespace=False, required=False,
            help_text="text added as a new line at the end",
        )  # fmt: skip
        replace = StrictCharField(
            max_length=MAX_BLOCK_CHARS, trim_whitespace=False, required=False,
            help_text="text to replace (its first occurrence; 409 replace_text_missing if absent) …",
        )  # fmt: skip
        replace_with = StrictCharField(
            max_length=MAX_BLOCK_CHARS, allow_blank=True, trim_whitespace=False, required=False,
            help_text="… by this text",
        )  # fmt: skip
        max_tokens = StrictIntegerField(min_value=1, max_value=BLOCK_MAX_TOKENS_LIMIT, required=False)
        reason = StrictCharField(max_length=MAX_REASON_CHARS, required=False, allow_blank=True, default="")

        def validate(self, data):
            edits = [name for name in ("content", "append", "replace") if name in data]
            if len(edits) > 1:
                raise serializers.ValidationError({edits[1]: ["Give one of content, append and replace."]})
            if ("replace" in data) != ("replace_with" in data):
                raise serializers.ValidationError({"replace_with": ["replace and replace_with go together."]})
            if not edits and "max_tokens" not in data:
                raise serializers.ValidationError(
                    {"non_field_errors": ["Give content, append, replace (with replace_with) or max_tokens."]}
                )
            return data

    def _bucket(self, request, bucket_id):
        return bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)

    @extend_schema(
        operation_id="blocks_retrieve",
        parameters=[LABEL, OwnerParams],
        responses={200: BlockOut, **errors(400, 404)},
        description="The block, with its version's ETag (also in the ETag header).",
    )
    def get(self, request, bucket_id, label):
        bucket = self._bucket(request, bucket_id)
        block = selectors.block_get(bucket=bucket, label=label, agent_id=_owner(request), agents=request.auth.agents)
        return _answer(request, block)

    @extend_schema(
        operation_id="blocks_put",
        parameters=[LABEL, OwnerParams, IF_MATCH, IF_NONE_MATCH],
        request=PutInput,
        responses={200: BlockOut, 201: BlockOut, **_WRITE_ERRORS},
        description=(
            "Set the block's whole text. Without a block yet: created (201), needing no If-Match (If-None-Match: * "
            "makes that a condition: 412 if one exists). An existing block is replaced only with If-Match: its "
            "ETag (412 if it has changed since) or *; without If-Match, 428. Text over max_tokens: 400 "
            "block_too_long, nothing changed."
        ),
    )
    def put(self, request, bucket_id, label):
        bucket = self._bucket(request, bucket_id)
        agent_id = _owner(request)
        blocks.block_label_check(label)
        _check_writable(request.auth, agent_id)
        data = self.PutInput(data=request.data)
        data.is_valid(raise_exception=True)
        block, created = blocks.block_put(
            bucket=bucket, agent_id=agent_id, label=label, expected=_expected(request), actor=request_actor(request),
            **data.validated_data,
        )  # fmt: skip
        return _answer(request, block, status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(
        operation_id="blocks_update",
        parameters=[LABEL, OwnerParams, IF_MATCH],
        request=PatchInput,
        responses={200: BlockOut, **_WRITE_ERRORS},
        description=(
            "Change the block: its whole text (content), a line added (append), a part replaced (replace, "
            "replace_with) and/or its limit (max_tokens). Needs If-Match: the ETag of the version the change is "
            "based on (412 if the block has changed since) or * (applied to the text as it is when written: two "
            "appends with * both land); 428 without. Over max_tokens: 400 block_too_long, nothing changed."
        ),
    )
    def patch(self, request, bucket_id, label):
        bucket = self._bucket(request, bucket_id)
        agent_id = _owner(request)
        selectors.block_get(bucket=bucket, label=label, agent_id=agent_id, agents=request.auth.agents)  # 404 first
        _check_writable(request.auth, agent_id)
        data = self.PatchInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        patch = blocks.BlockPatch(
            content=values.get("content"),
            append=values.get("append"),
            replace=(values["replace"], values["replace_with"]) if "replace" in values else None,
            max_tokens=values.get("max_tokens"),
        )
        block = blocks.block_patch(
            bucket=bucket, agent_id=agent_id, label=label, patch=patch, reason=values["reason"],
            expected=_expected(request), actor=request_actor(request),
        )  # fmt: skip
        return _answer(request, block)

    @extend_schema(
        operation_id="blocks_destroy",
        parameters=[LABEL, OwnerParams, IF_MATCH],
        responses={204: None, **errors(400, 404, 412, 428)},
        description="Delete the block and its history. Needs If-Match (its ETag, or *): 412 if stale, 428 without.",
    )
    def delete(self, request, bucket_id, label):
        bucket = self._bucket(request, bucket_id)
        agent_id = _owner(request)
        selectors.block_get(bucket=bucket, label=label, agent_id=agent_id, agents=request.auth.agents)
        _check_writable(request.auth, agent_id)
        blocks.block_delete(
            bucket=bucket, agent_id=agent_id, label=label, expected=_expected(request), actor=request_actor(request)
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class BlockHistoryApi(APIView):
    class Params(OwnerParams):
        limit = page_size_field()
        offset = offset_field()

    @extend_schema(
        operation_id="blocks_history",
        parameters=[LABEL, Params],
        responses={200: limit_offset_page("BlockHistoryPage", BlockVersionOut(many=True)), **errors(400, 404)},
        description="Every version of the block, newest first: its text then, who wrote it, when and why.",
    )
    def get(self, request, bucket_id, label):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        params = self.Params(data=query_values(request.query_params))
        params.is_valid(raise_exception=True)
        block = selectors.block_get(
            bucket=bucket, label=label, agent_id=params.validated_data.get("agent_id"), agents=request.auth.agents
        )
        return list_response(request, self, selectors.block_history(block=block), BlockVersionOut)
