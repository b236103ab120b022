"""Source endpoints: submit documents and conversations, list, show and delete sources."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_serializer, inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.services import request_actor
from engram_site.fields import (
    JSONObjectField,
    QueryIntegerField,
    StoredDateTimeField,
    StrictBooleanField,
    StrictCharField,
    StrictSerializer,
)
from engram_site.openapi import BODY, cursor_page, errors
from engram_site.pagination import CreatedCursorPagination, cursor_field, list_response, page_size_field
from memories.models import Attribution
from memories.quotas import quota_check_memories
from memories.serializers import MAX_ID_CHARS, MetadataField
from sources import selectors
from sources.models import SourceKind, SourceStatus
from sources.services.delete import source_delete
from sources.services.submit import MessageInput, SubmitResult, source_submit_conversation, source_submit_document
from tenants.agents import check_writable, write_agent
from tenants.quotas import quota_check_size
from tenants.selectors import bucket_get

MAX_TITLE_CHARS = 500
MAX_DOCUMENT_BYTES = 2 * 1024 * 1024  # UTF-8 bytes of a document's text
MAX_MESSAGES = 5_000
MAX_MESSAGE_CHARS = 20_000
MAX_CONVERSATION_CHARS = 2_000_000  # all messages' content together
MAX_CHUNK_PAGE = 1_000
MAX_CHUNK_OFFSET = 1_000_000  # far beyond any source's chunk count; keeps OFFSET inside bigint


def _optional_text(max_length: int = MAX_ID_CHARS):
    return StrictCharField(max_length=max_length, required=False, allow_null=True)


def _submitted_by(request) -> str:
    return f"token:{request.auth.prefix}"


def _held_to_agents(request, values: dict) -> dict:
    """``values`` with the agent ids a token held to agents may submit: the source's defaulted
    to its one agent (its memories carry it), and every message's its own or refused."""
    agents = request.auth.agents
    if agents is None:
        return values
    values["agent_id"] = write_agent(agents, values.get("agent_id"))
    for message in values.get("messages", []):
        if message.get("agent_id") is not None:
            write_agent(agents, message["agent_id"])
    return values


SubmitOut = inline_serializer(
    "SourceSubmitted",
    {
        "id": serializers.UUIDField(),
        "status": serializers.ChoiceField(choices=SourceStatus.choices),
        "deduplicated": serializers.BooleanField(),
        "chunks_total": serializers.IntegerField(),
    },
)


def _accepted(result: SubmitResult) -> Response:
    source = result.source
    response = Response(
        {
            "id": source.pk,
            "status": source.status,
            "deduplicated": result.deduplicated,
            "chunks_total": source.chunks_total,
        },
        status=status.HTTP_202_ACCEPTED,
    )
    response["Location"] = f"/api/v1/sources/{source.pk}"
    return response


class DocumentTextField(StrictCharField):
    """A document's text. Form feeds and vertical tabs are page and section breaks in text
    extracted from PDFs and office files: they become line breaks instead of being refused
    like other control characters."""

    def to_internal_value(self, data):
        if isinstance(data, str):
            data = data.replace("\f", "\n").replace("\v", "\n")
        return super().to_internal_value(data)


class DocumentsApi(APIView):
    @extend_schema_serializer(component_name="DocumentSubmit")
    class Input(StrictSerializer):
        title = StrictCharField(max_length=MAX_TITLE_CHARS)
        text = DocumentTextField(max_length=MAX_DOCUMENT_BYTES, help_text="plain text or Markdown, ≤ 2 MB as UTF-8")
        metadata = MetadataField(required=False, allow_null=True)
        created_at = StoredDateTimeField(
            required=False, allow_null=True, help_text="when the document was written (its memories' time)"
        )
        attributed_to = serializers.ChoiceField(choices=Attribution.choices, required=False, allow_null=True)
        agent_id = _optional_text()
        run_id = _optional_text()
        source_actor_id = _optional_text()

        def validate_text(self, value: str) -> str:
            if len(value.encode("utf-8")) > MAX_DOCUMENT_BYTES:
                raise serializers.ValidationError(f"Must be at most {MAX_DOCUMENT_BYTES} bytes as UTF-8.")
            return value

    @extend_schema(
        operation_id="documents_create",
        request=Input,
        responses={202: SubmitOut, **errors(403, 404, *BODY)},
        description=(
            "Submit a document (plain text or Markdown). It is cut into chunks and distilled into memories in the "
            "background: follow GET /api/v1/sources/{id}. An identical document already in the bucket returns that "
            "source with deduplicated=true."
        ),
    )
    def post(self, request, bucket_id):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        data = self.Input(data=request.data)
        data.is_valid(raise_exception=True)
        tenant = request.auth.tenant
        size = len(data.validated_data["text"].encode("utf-8"))
        quota_check_size(tenant=tenant, name="max_document_bytes", asked=size, refusal="document_bytes")
        # A document becomes memories later, in the worker: refuse it while the tenant is at its limit.
        quota_check_memories(tenant=tenant, incoming=1)
        values = _held_to_agents(request, dict(data.validated_data))
        result = source_submit_document(
            bucket=bucket, submitted_by=_submitted_by(request), actor=request_actor(request),
            held_to=request.auth.agents, **values,
        )  # fmt: skip
        return _accepted(result)


# The same choices as a memory's attributed_to, described by a pattern: an enum here would be
# a second name for the AttributedTo enum in the schema.
@extend_schema_field({"type": "string", "pattern": "^(user|assistant)$", "description": "user | assistant"})
class RoleField(serializers.ChoiceField):
    pass


class MessageIn(StrictSerializer):
    role = RoleField(choices=Attribution.choices)
    content = StrictCharField(max_length=MAX_MESSAGE_CHARS)
    timestamp = StoredDateTimeField(required=False, allow_null=True)
    agent_id = _optional_text()
    run_id = _optional_text()
    name = _optional_text()


class ConversationsApi(APIView):
    @extend_schema_serializer(component_name="ConversationSubmit")
    class Input(StrictSerializer):
        title = StrictCharField(max_length=MAX_TITLE_CHARS, required=False, allow_blank=True, default="")
        messages = MessageIn(many=True, allow_empty=False, max_length=MAX_MESSAGES)
        metadata = MetadataField(required=False, allow_null=True)
        speaker = _optional_text()
        resolve_first_person = StrictBooleanField(
            default=False, help_text='rewrite "I"/"my" in the speaker\'s messages as their name (off: measured worse)'
        )
        agent_id = _optional_text()
        run_id = _optional_text()
        source_actor_id = _optional_text()

        def validate_messages(self, value: list[dict]) -> list[dict]:
            if sum(len(m["content"]) for m in value) > MAX_CONVERSATION_CHARS:
                raise serializers.ValidationError(
                    f"The messages hold more than {MAX_CONVERSATION_CHARS} characters in all."
                )
            return value

    @extend_schema(
        operation_id="conversations_create",
        request=Input,
        responses={202: SubmitOut, **errors(403, 404, *BODY)},
        description=(
            "Submit a conversation (messages with role user|assistant). Each message is distilled into memories in "
            "the background, attributed to its role, at its timestamp: follow GET /api/v1/sources/{id}. An identical "
            "conversation already in the bucket returns that source with deduplicated=true. The messages' text "
            "counts towards the tenant's max_document_bytes as a document's does."
        ),
    )
    def post(self, request, bucket_id):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        data = self.Input(data=request.data)
        data.is_valid(raise_exception=True)
        values = _held_to_agents(request, dict(data.validated_data))
        tenant = request.auth.tenant
        # The messages' text is distilled as a document's is: the same limit on its size.
        size = sum(len(m["content"].encode("utf-8")) for m in values["messages"])
        quota_check_size(tenant=tenant, name="max_document_bytes", asked=size, refusal="document_bytes")
        # Becomes memories later, in the worker: refuse it while the tenant is at its limit.
        quota_check_memories(tenant=tenant, incoming=1)
        messages = [MessageInput(**m) for m in values.pop("messages")]
        result = source_submit_conversation(
            bucket=bucket,
            messages=messages,
            submitted_by=_submitted_by(request),
            actor=request_actor(request),
            held_to=request.auth.agents,
            **values,
        )
        return _accepted(result)


class SourceOut(serializers.Serializer):
    id = serializers.UUIDField()
    bucket_id = serializers.UUIDField()
    kind = serializers.CharField()
    title = serializers.CharField()
    metadata = JSONObjectField()
    options = JSONObjectField(
        help_text="speaker, agent_id, run_id, source_actor_id, ... as submitted (held_to_agents: the agents of a "
        "submitting token held to agents)"
    )
    status = serializers.CharField()
    progress = serializers.SerializerMethodField()
    memories_created = serializers.IntegerField()
    memories_deduplicated = serializers.IntegerField()
    dropped = serializers.IntegerField(help_text="sentences left out: greetings, thanks, filler, empty questions")
    error = serializers.CharField()
    attempts = serializers.IntegerField()
    distilled_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)

    def get_progress(self, source) -> dict:
        return {"chunks_done": source.chunks_done, "chunks_total": source.chunks_total, "fraction": source.progress}


class ChunkMemoryOut(serializers.Serializer):
    id = serializers.UUIDField()
    content = serializers.CharField()
    created = serializers.BooleanField(help_text="this source created the memory (false: it already existed)")
    position = serializers.IntegerField()


class ChunkOut(serializers.Serializer):
    id = serializers.UUIDField(source="chunk.id")
    ordinal = serializers.IntegerField(source="chunk.ordinal")
    status = serializers.CharField(source="chunk.status")
    text = serializers.CharField(source="chunk.text")
    heading = serializers.CharField(source="chunk.heading")
    role = serializers.CharField(source="chunk.role", allow_null=True)
    name = serializers.CharField(source="chunk.name", allow_null=True)
    timestamp = serializers.DateTimeField(source="chunk.timestamp", allow_null=True)
    agent_id = serializers.CharField(source="chunk.agent_id", allow_null=True)
    run_id = serializers.CharField(source="chunk.run_id", allow_null=True)
    statements = serializers.IntegerField(source="chunk.statements")
    dropped = serializers.IntegerField(source="chunk.dropped")
    error = serializers.CharField(source="chunk.error")
    memories = ChunkMemoryOut(many=True)


class SourceDetailOut(SourceOut):
    chunks = ChunkOut(many=True)
    chunk_offset = serializers.IntegerField()
    chunk_limit = serializers.IntegerField()


class BucketSourcesApi(APIView):
    class Params(StrictSerializer):
        cursor = cursor_field()
        page_size = page_size_field()
        status = serializers.ChoiceField(choices=SourceStatus.choices, required=False)
        kind = serializers.ChoiceField(choices=SourceKind.choices, required=False)

    @extend_schema(
        operation_id="sources_list",
        parameters=[Params],
        responses={200: cursor_page("SourcePage", SourceOut(many=True)), **errors(400, 404)},
    )
    def get(self, request, bucket_id):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        params = self.Params(data=request.query_params.dict())
        params.is_valid(raise_exception=True)
        sources = selectors.source_list(
            bucket=bucket, status=params.validated_data.get("status"), kind=params.validated_data.get("kind"),
            agents=request.auth.agents,
        )  # fmt: skip
        return list_response(request, self, sources, SourceOut, paginator=CreatedCursorPagination)


DeleteOut = inline_serializer(
    "SourceDeleted",
    {
        "id": serializers.UUIDField(),
        "memories_deleted": serializers.IntegerField(),
        "memories_kept": serializers.IntegerField(help_text="created by this source, but also stated by another"),
    },
)


class SourceDetailApi(APIView):
    class Params(StrictSerializer):
        chunk_offset = QueryIntegerField(required=False, min_value=0, max_value=MAX_CHUNK_OFFSET, default=0)
        chunk_limit = QueryIntegerField(required=False, min_value=1, max_value=MAX_CHUNK_PAGE, default=100)

    def _source(self, request, source_id):
        return selectors.source_get(tenant=request.auth.tenant, source_id=source_id, token=request.auth)

    @extend_schema(
        operation_id="sources_retrieve",
        parameters=[Params],
        responses={200: SourceDetailOut, **errors(400, 404)},
    )
    def get(self, request, source_id):
        source = self._source(request, source_id)
        params = self.Params(data=request.query_params.dict())
        params.is_valid(raise_exception=True)
        offset, limit = params.validated_data["chunk_offset"], params.validated_data["chunk_limit"]
        chunks = selectors.source_chunks(source=source, offset=offset, limit=limit, agents=request.auth.agents)
        data = SourceOut(source).data
        data["chunks"] = ChunkOut(chunks, many=True).data
        data["chunk_offset"], data["chunk_limit"] = offset, limit
        return Response(data)

    @extend_schema(operation_id="sources_destroy", responses={200: DeleteOut, **errors(404)})
    def delete(self, request, source_id):
        source = self._source(request, source_id)
        check_writable(request.auth.agents, (source.options or {}).get("agent_id"))
        report = source_delete(source=source, actor=request_actor(request))
        return Response(
            {"id": source.pk, "memories_deleted": len(report.deleted_memories), "memories_kept": report.kept_memories}
        )
