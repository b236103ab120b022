"""A bucket's export and import: GET /api/v1/buckets/{bucket_id}/export streams its memories as
JSON Lines, POST /api/v1/buckets/{bucket_id}/import takes them back (docs/API.md).

The line format is read here, like every request body: :class:`ImportLineIn` validates a line
as the write endpoint validates a memory, plus what an export adds (``id``, ``"engram"``,
``"versions"``). The import body is never held in memory: it is copied to a temporary file
(refused past ``ENGRAM_IMPORT_MAX_BYTES``), then read line by line.
"""

from __future__ import annotations

import io
import json
import tempfile
from collections.abc import Iterator
from typing import BinaryIO

from django.conf import settings
from django.http import StreamingHttpResponse
from django.utils.http import parse_header_parameters
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.parsers import BaseParser
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.services import request_actor
from engram_site.exceptions import DomainError, _first_message
from engram_site.fields import (
    JSONObjectField,
    StoredDateTimeField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
    character_error,
)
from engram_site.openapi import errors
from engram_site.parsers import JSONParser, json_depth_exceeds
from engram_site.providers import embedding
from memories.links import RESERVED_PREFIX
from memories.models import Scope, VersionKind
from memories.quotas import quota_check_memories
from memories.serializers import MAX_CONTENT_CHARS, MAX_METADATA_DEPTH, MemoryIn, MetadataField, TagsField
from memories.services import CONTEXT_PREDECESSORS, MemoryInput
from memories.services.transfer import (
    MEDIA_TYPE,
    ImportLine,
    RejectedLine,
    decode_vector,
    memories_export,
    memories_import,
)
from tenants.agents import write_agent
from tenants.models import AgentRestriction
from tenants.selectors import bucket_get, parse_uuid

# The longest line an import reads; a longer one is rejected without being held in memory.
MAX_LINE_BYTES = 8 * 1024 * 1024
# A merge unites two memories' tags and metadata, so an exported memory may hold more than a
# single write may send: an import takes up to these (a write: 50 tags, 16 KB of metadata).
MAX_IMPORT_TAGS = 1_000
MAX_IMPORT_METADATA_BYTES = 256 * 1024
# The import body is copied to memory up to this size, to a temporary file beyond it.
SPOOL_IN_MEMORY_BYTES = 1024 * 1024
READ_BYTES = 64 * 1024


# --- the line format ------------------------------------------------------------------------------


def _refuse_characters(field: serializers.Field, value) -> None:
    """Every key and string of parsed JSON must be text PostgreSQL and the API accept."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str) and (message := character_error(node)) is not None:
            field.fail("control", message=message)


class ImportedMetadataField(MetadataField):
    """``metadata`` as a write checks it (depth, characters, reserved keys), up to
    MAX_IMPORT_METADATA_BYTES instead of a write's 16 KB."""

    default_error_messages = {"too_large": f"Must be at most {MAX_IMPORT_METADATA_BYTES} bytes as JSON."}

    def to_internal_value(self, data):
        data = JSONObjectField.to_internal_value(self, data)
        if json_depth_exceeds(data, MAX_METADATA_DEPTH):
            self.fail("too_deep")
        _refuse_characters(self, data)
        if len(json.dumps(data, ensure_ascii=False).encode()) > MAX_IMPORT_METADATA_BYTES:
            self.fail("too_large")
        if any(str(key).startswith(RESERVED_PREFIX) for key in data):
            self.fail("reserved")
        return data


class StoredJSONField(JSONObjectField):
    """A JSON object whose strings hold no control characters (jsonb cannot hold NUL)."""

    default_error_messages = {"control": "{message}"}

    def to_internal_value(self, data):
        data = super().to_internal_value(data)
        _refuse_characters(self, data)
        return data


class VectorField(serializers.Field):
    """A vector as an export writes it: 384 float32 values, little-endian, base64; finite and of
    unit length, as the model makes them."""

    default_error_messages = {
        "invalid": "Must be a base64 string of 384 little-endian float32 values.",
        "not_unit": "Must be of unit length, as the embedding model writes vectors.",
    }

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        try:
            vector = decode_vector(data)
        except ValueError:
            self.fail("invalid")
        if not embedding.usable(vector):
            self.fail("not_unit")
        return vector

    def to_representation(self, value):
        return value


class DerivedIn(StrictSerializer):
    """The ``"engram"`` object of a line: what Engram derived for the memory."""

    context = StrictCharField(
        max_length=CONTEXT_PREDECESSORS * (MAX_CONTENT_CHARS + 1), trim_whitespace=False, required=False,
        allow_null=True,
    )  # fmt: skip
    sequence_id = StrictCharField(max_length=36, required=False, allow_null=True)
    sequence_index = StrictIntegerField(min_value=0, max_value=2**31 - 1, required=False, allow_null=True)
    run_sequence = StrictBooleanField(required=False, default=False)
    classified_scope = serializers.ChoiceField(choices=Scope.choices, required=False, allow_null=True)
    classified_topic = StrictCharField(max_length=100, required=False, allow_null=True)
    model = StrictCharField(max_length=200, required=False, allow_null=True)
    embedding = VectorField(required=False, allow_null=True)
    context_embedding = VectorField(required=False, allow_null=True)

    def validate_sequence_id(self, value):
        if value is not None and parse_uuid(value) is None:
            raise serializers.ValidationError("Must be a UUID (lowercase, hyphenated).")
        return value

    def validate(self, attrs):
        vectors = attrs.get("embedding") is not None or attrs.get("context_embedding") is not None
        if vectors and not attrs.get("model"):
            raise serializers.ValidationError({"model": ["Required with vectors: the model that made them."]})
        if attrs.get("context_embedding") is not None and attrs.get("context") is None:
            raise serializers.ValidationError({"context_embedding": ["A context vector needs its context."]})
        if attrs.get("sequence_index") is not None and attrs.get("sequence_id") is None:
            raise serializers.ValidationError({"sequence_index": ["A sequence place needs its sequence_id."]})
        return attrs


class VersionIn(StrictSerializer):
    """One entry of a line's ``"versions"``: a change of the memory, as its history recorded it."""

    kind = serializers.ChoiceField(choices=VersionKind.choices)
    previous = StoredJSONField(required=False, default=dict)
    details = StoredJSONField(required=False, default=dict)
    actor_kind = StrictCharField(max_length=20)
    actor_id = StrictCharField(max_length=64, required=False, allow_blank=True, default="")
    actor_label = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
    created_at = StoredDateTimeField()


class ImportLineIn(MemoryIn):
    """One line of an import: a memory as the write endpoint takes it, and what an export adds."""

    id = StrictCharField(max_length=36, required=False, help_text="the memory's id where it was exported (not kept)")
    hint_tags = TagsField(required=False, allow_null=True, max_length=MAX_IMPORT_TAGS)
    metadata = ImportedMetadataField(required=False, allow_null=True)
    engram = DerivedIn(required=False, allow_null=True)
    versions = VersionIn(many=True, required=False)


def _rejected(number: int, exc: exceptions.APIException) -> RejectedLine:
    detail = exc.detail
    if isinstance(exc, exceptions.ValidationError):
        found = detail if isinstance(detail, dict) else {"non_field_errors": detail}
        return RejectedLine(number, _first_message(found), found)
    return RejectedLine(number, str(detail))


def parse_line(number: int, raw: bytes, validator: ImportLineIn | None = None) -> ImportLine | RejectedLine:
    """Line ``number`` (1-based), valid or with the reason it is not. ``validator``: an
    :class:`ImportLineIn` to reuse (a serializer copies its fields for every instance, which
    costs more than validating a line)."""
    try:
        # The API's own JSON parser: UTF-8, nesting, numbers beyond a float refused as in a body.
        data = JSONParser().parse(io.BytesIO(raw), parser_context={"encoding": "utf-8"})
    except exceptions.ParseError as exc:
        return _rejected(number, exc)
    if not isinstance(data, dict):
        return RejectedLine(number, "A line must be a JSON object.")
    try:
        # What is_valid() runs, without the state it keeps on the instance.
        values = dict((validator or ImportLineIn()).run_validation(data))
    except exceptions.ValidationError as exc:
        return _rejected(number, exc)
    values.pop("id", None)
    derived = values.pop("engram", None)
    versions = values.pop("versions", None) or []
    return ImportLine(number=number, item=MemoryInput(**values), derived=derived, versions=versions)


def import_lines(stream: BinaryIO) -> Iterator[ImportLine | RejectedLine]:
    """The lines of ``stream`` (JSON Lines, UTF-8) from where it stands, blank lines skipped."""
    validator = ImportLineIn()
    number = 0
    while raw := stream.readline(MAX_LINE_BYTES + 1):
        number += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while (rest := stream.readline(READ_BYTES)) and not rest.endswith(b"\n"):
                pass  # the rest of the over-long line, read and dropped
            yield RejectedLine(number, f"The line is longer than {MAX_LINE_BYTES} bytes.")
        elif raw.strip():
            yield parse_line(number, raw, validator)


def held_to(lines: Iterator[ImportLine | RejectedLine], agents: AgentRestriction | None):
    """``lines`` with each valid line's agent id as a write by a token held to ``agents`` takes
    it (defaulted to its one agent), or the line rejected when that agent is not the token's."""
    for line in lines:
        if agents is not None and isinstance(line, ImportLine):
            try:
                line.item.agent_id = write_agent(agents, line.item.agent_id)
            except DomainError as exc:
                line = RejectedLine(line.number, exc.message, {"agent_id": [exc.message]})
        yield line


# --- the import body ------------------------------------------------------------------------------


class ImportTooLarge(DomainError):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    code = "too_large"

    def __init__(self):
        limit = settings.ENGRAM_IMPORT_MAX_BYTES
        super().__init__(f"An import body is at most {limit} bytes (ENGRAM_IMPORT_MAX_BYTES).")


class ImportBody:
    """The unread body of an import request (what :class:`JSONLinesParser` hands the view)."""

    def __init__(self, stream: BinaryIO | None):
        self.stream = stream

    def spool(self) -> BinaryIO:
        """The body, copied to a temporary file (in memory while small) and rewound; 413 past
        ENGRAM_IMPORT_MAX_BYTES. The caller closes it."""
        limit = settings.ENGRAM_IMPORT_MAX_BYTES
        spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY_BYTES)  # noqa: SIM115 - the caller closes it
        copied = 0
        while self.stream is not None and (chunk := self.stream.read(READ_BYTES)):
            copied += len(chunk)
            if copied > limit:
                spool.close()
                raise ImportTooLarge()
            spool.write(chunk)
        spool.seek(0)
        return spool


class JSONLinesParser(BaseParser):
    """JSON Lines bodies: handed to the view unread (:class:`ImportBody`), never parsed whole."""

    media_type = MEDIA_TYPE

    def parse(self, stream, media_type=None, parser_context=None):
        charset = parse_header_parameters(media_type or "")[1].get("charset")
        if charset and charset.lower() not in ("utf-8", "utf8"):
            raise exceptions.UnsupportedMediaType(media_type, detail="JSON Lines are UTF-8.")
        return ImportBody(stream)


class JSONLParser(JSONLinesParser):
    media_type = "application/jsonl"


# --- the endpoints --------------------------------------------------------------------------------


class BucketExportApi(APIView):
    class Params(StrictSerializer):
        versions = serializers.BooleanField(required=False, default=False, help_text="include each memory's history")
        embeddings = serializers.BooleanField(
            required=False, default=False, help_text="include the vectors (an import for the same model reuses them)"
        )

    @extend_schema(
        operation_id="buckets_export",
        parameters=[Params],
        responses={
            (200, MEDIA_TYPE): OpenApiResponse(OpenApiTypes.STR, description="JSON Lines: one memory per line"),
            **errors(400, 404),
        },
        description=(
            "Every memory of the bucket (expired ones included), oldest first, one JSON object per line, streamed: "
            "the fields a client writes, the memory's id, and under engram what Engram derived for it."
        ),
    )
    def get(self, request, bucket_id):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        params = self.Params(data=request.query_params.dict())
        params.is_valid(raise_exception=True)
        chunks = memories_export(bucket=bucket, agents=request.auth.agents, **params.validated_data)
        response = StreamingHttpResponse(chunks, content_type=MEDIA_TYPE)
        response["Content-Disposition"] = f'attachment; filename="bucket-{bucket.pk}.jsonl"'
        return response


class RejectedLineOut(serializers.Serializer):
    line = serializers.IntegerField(help_text="1-based line number")
    detail = serializers.CharField()
    errors = serializers.JSONField(required=False, help_text="field → messages, as in a 400")


class ImportOut(serializers.Serializer):
    lines = serializers.IntegerField(help_text="lines read (blank lines not counted)")
    imported = serializers.IntegerField(help_text="memories written")
    deduplicated = serializers.IntegerField(help_text="lines whose text the bucket already held, or an earlier line")
    embeddings_reused = serializers.IntegerField(help_text="memories written with the vectors of their line")
    rejected_count = serializers.IntegerField()
    rejected = RejectedLineOut(many=True, help_text="the first 100 rejected lines")
    pending_enrichment = serializers.IntegerField(help_text="rows of the bucket waiting for the enrichment sweep")


class BucketImportApi(APIView):
    parser_classes = [JSONLinesParser, JSONLParser]

    class Params(StrictSerializer):
        skip_invalid = serializers.BooleanField(
            required=False, default=False, help_text="skip invalid lines and report them (default: refuse the import)"
        )

    @extend_schema(
        operation_id="buckets_import",
        parameters=[Params],
        request={MEDIA_TYPE: OpenApiTypes.STR, "application/jsonl": OpenApiTypes.STR},
        responses={200: ImportOut, **errors(400, 404, 413, 415)},
        description=(
            'Memories as JSON Lines: lines of an export, or plain memory objects ({"content": ...}). Written in '
            "batches, deduplicated like any write; rows without vectors are embedded by the background enrichment. "
            "An invalid line refuses the whole import (400 invalid_lines, nothing written) unless skip_invalid=true."
        ),
    )
    def post(self, request, bucket_id):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        params = self.Params(data=request.query_params.dict())
        params.is_valid(raise_exception=True)
        declared = request.META.get("CONTENT_LENGTH") or "0"
        chunked = "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
        if not chunked and declared.isdigit() and int(declared) > settings.ENGRAM_IMPORT_MAX_BYTES:
            raise ImportTooLarge()  # refused before a byte is read
        # The lines are counted while they are written: refuse the import only while the tenant
        # is already at its max_memories (an import can pass it by its own size).
        quota_check_memories(tenant=request.auth.tenant, incoming=1)
        body = request.data
        if not isinstance(body, ImportBody):
            # No Content-Type (DRF then parses nothing), or an empty body.
            if declared != "0":
                raise exceptions.UnsupportedMediaType(request.content_type or "")
            body = ImportBody(None)
        with body.spool() as spool:

            def read():
                spool.seek(0)
                return held_to(import_lines(spool), request.auth.agents)

            skip_invalid = params.validated_data["skip_invalid"]
            report = memories_import(
                bucket=bucket, read=read, skip_invalid=skip_invalid, actor=request_actor(request),
                agents=request.auth.agents,
            )  # fmt: skip
        return Response(ImportOut(report.as_dict()).data)
