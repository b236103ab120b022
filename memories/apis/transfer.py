"""A bucket's export and import: GET /api/v1/buckets/{bucket_id}/export streams its memories as
JSON Lines, POST /api/v1/buckets/{bucket_id}/import takes them back (docs/API.md).

The lines are read by memories/transfer_format.py. The import body is never held in memory: it
is copied to a temporary file (refused past ``ENGRAM_IMPORT_MAX_BYTES``), then read line by line.
"""

from __future__ import annotations

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
from engram_site.exceptions import DomainError
from engram_site.fields import StrictSerializer
from engram_site.openapi import errors
from memories.quotas import quota_check_memories
from memories.services.transfer import (
    MEDIA_TYPE,
    BlockLine,
    FeedbackLine,
    ImportLine,
    RejectedLine,
    memories_export,
    memories_import,
)
from memories.transfer_format import READ_BYTES, import_lines
from tenants.agents import write_agent
from tenants.models import AgentRestriction
from tenants.selectors import bucket_get

# The import body is copied to memory up to this size, to a temporary file beyond it.
SPOOL_IN_MEMORY_BYTES = 1024 * 1024


def held_to(lines: Iterator[ImportLine | BlockLine | FeedbackLine | RejectedLine], agents: AgentRestriction | None):
    """``lines`` with each valid memory or rating line's agent id as a write (a rating) by a token
    held to ``agents`` takes it (defaulted to its one agent), or the line rejected when that agent
    is not the token's."""
    for line in lines:
        if agents is not None and isinstance(line, (ImportLine, FeedbackLine)):
            try:
                if isinstance(line, ImportLine):
                    line.item.agent_id = write_agent(agents, line.item.agent_id)
                else:
                    line.agent_id = write_agent(agents, line.agent_id)
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
        blocks = serializers.BooleanField(
            required=False, default=False,
            help_text='after the memories, one {"block": {...}} line per memory block the token may read',
        )  # fmt: skip
        feedback = serializers.BooleanField(
            required=False, default=False,
            help_text='after those, one {"feedback": {...}} line per rating the token may read (memory_id: the id '
            "of the rated memory's line)",
        )  # fmt: skip

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
    blocks_imported = serializers.IntegerField(help_text="memory blocks created or set to their line's text")
    blocks_unchanged = serializers.IntegerField(help_text="memory blocks that already held their line's text")
    feedback_imported = serializers.IntegerField(help_text="ratings stored")
    feedback_unchanged = serializers.IntegerField(help_text="ratings the memory already had (an import sent again)")
    feedback_skipped = serializers.IntegerField(
        help_text="ratings of a memory line deduplicated into a memory the token may not read (another agent's)"
    )


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
