"""The import file format: one memory per line of JSON Lines, as an export writes it and
POST /api/v1/buckets/{bucket_id}/import and ``./engram manage import_bucket`` read it (docs/API.md).

A line is read like every request body: :class:`ImportLineIn` validates it as the write
endpoint validates a memory, plus what an export adds (``id``, ``"engram"``, ``"versions"``).
:func:`import_lines` reads a stream line by line, never a whole file at once.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import BinaryIO

from rest_framework import exceptions, serializers

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
from engram_site.parsers import JSONParser, json_depth_exceeds
from engram_site.providers import embedding
from memories.links import RESERVED_PREFIX
from memories.models import BLOCK_LABEL_MAX, BLOCK_MAX_CHARS, BLOCK_MAX_TOKENS_LIMIT, FeedbackSignal, Scope, VersionKind
from memories.serializers import (
    MAX_CONTENT_CHARS,
    MAX_ID_CHARS,
    MAX_METADATA_DEPTH,
    MemoryIn,
    MetadataField,
    TagsField,
)
from memories.services import CONTEXT_PREDECESSORS, MemoryInput
from memories.services.blocks import block_label_check, block_tokens
from memories.services.feedback import MAX_QUERY_CHARS
from memories.services.transfer import (
    MAX_LINE_VERSIONS,
    BlockLine,
    FeedbackLine,
    ImportLine,
    RejectedLine,
    decode_vector,
)
from tenants.selectors import parse_uuid

# The longest line an import reads; a longer one is rejected without being held in memory.
MAX_LINE_BYTES = 8 * 1024 * 1024
# A merge unites two memories' tags and metadata, so an exported memory may hold more than a
# single write may send: an import takes up to these (a write: 50 tags, 16 KB of metadata).
MAX_IMPORT_TAGS = 1_000
MAX_IMPORT_METADATA_BYTES = 256 * 1024
READ_BYTES = 64 * 1024


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
    versions = VersionIn(many=True, required=False, max_length=MAX_LINE_VERSIONS)


class BlockLineIn(StrictSerializer):
    """The object of a ``{"block": {...}}`` line: a memory block as an export writes it, checked as
    the blocks endpoints check a PUT (label, owner, text within its limit)."""

    label = StrictCharField(max_length=BLOCK_LABEL_MAX)
    agent_id = StrictCharField(max_length=MAX_ID_CHARS, required=False, allow_null=True, default=None)
    content = StrictCharField(max_length=BLOCK_MAX_CHARS, allow_blank=True, trim_whitespace=False)
    max_tokens = StrictIntegerField(min_value=1, max_value=BLOCK_MAX_TOKENS_LIMIT)
    version = StrictIntegerField(min_value=1, required=False, help_text="where it was exported (not kept)")
    updated_at = StoredDateTimeField(required=False, help_text="where it was exported (not kept)")

    def validate_label(self, value):
        try:
            return block_label_check(value)
        except DomainError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def validate(self, attrs):
        tokens = block_tokens(attrs["content"])
        if tokens > attrs["max_tokens"]:
            raise serializers.ValidationError(
                {"content": [f"The text is {tokens} tokens, over the block's limit of {attrs['max_tokens']}."]}
            )
        return attrs


class BlockWrapperIn(StrictSerializer):
    block = BlockLineIn()


class FeedbackLineIn(StrictSerializer):
    """The object of a ``{"feedback": {...}}`` line: a rating as an export writes it, checked as
    POST /api/v1/memories/{id}/feedback checks one; ``memory_id`` is the ``id`` of the rated
    memory's line in the same file."""

    id = StrictIntegerField(min_value=1, required=False, help_text="the rating's id where it was exported")
    memory_id = StrictCharField(max_length=36, help_text="the id of the rated memory's line in this file")
    signal = serializers.ChoiceField(choices=FeedbackSignal.choices)
    query = StrictCharField(max_length=MAX_QUERY_CHARS)
    agent_id = StrictCharField(max_length=MAX_ID_CHARS, required=False, allow_null=True, default=None)
    run_id = StrictCharField(max_length=MAX_ID_CHARS, required=False, allow_null=True, default=None)
    created_at = StoredDateTimeField(required=False, allow_null=True, default=None)


class FeedbackWrapperIn(StrictSerializer):
    feedback = FeedbackLineIn()


def _feedback_line(number: int, data: dict) -> FeedbackLine | RejectedLine:
    try:
        values = dict(FeedbackWrapperIn().run_validation(data))["feedback"]
    except exceptions.ValidationError as exc:
        return _rejected(number, exc)
    return FeedbackLine(
        number=number, memory_ref=values["memory_id"], signal=values["signal"], query=values["query"],
        agent_id=values.get("agent_id"), run_id=values.get("run_id"), created_at=values.get("created_at"),
        source_id=values.get("id"),
    )  # fmt: skip


def _rejected(number: int, exc: exceptions.APIException) -> RejectedLine:
    detail = exc.detail
    if isinstance(exc, exceptions.ValidationError):
        found = detail if isinstance(detail, dict) else {"non_field_errors": detail}
        return RejectedLine(number, _first_message(found), found)
    return RejectedLine(number, str(detail))


def _block_line(number: int, data: dict) -> BlockLine | RejectedLine:
    try:
        values = dict(BlockWrapperIn().run_validation(data))["block"]
    except exceptions.ValidationError as exc:
        return _rejected(number, exc)
    return BlockLine(number=number, label=values["label"], agent_id=values.get("agent_id"),
                     content=values["content"], max_tokens=values["max_tokens"])  # fmt: skip


def parse_line(
    number: int, raw: bytes, validator: ImportLineIn | None = None
) -> ImportLine | BlockLine | FeedbackLine | RejectedLine:
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
    if "block" in data:  # a memory block's line ({"block": {...}}, nothing beside it)
        return _block_line(number, data)
    if "feedback" in data:  # a rating's line ({"feedback": {...}}, nothing beside it)
        return _feedback_line(number, data)
    try:
        # What is_valid() runs, without the state it keeps on the instance.
        values = dict((validator or ImportLineIn()).run_validation(data))
    except exceptions.ValidationError as exc:
        return _rejected(number, exc)
    source_id = values.pop("id", None)
    derived = values.pop("engram", None)
    versions = values.pop("versions", None) or []
    return ImportLine(
        number=number, item=MemoryInput(**values), derived=derived, versions=versions, source_id=source_id
    )


def import_lines(stream: BinaryIO) -> Iterator[ImportLine | BlockLine | FeedbackLine | RejectedLine]:
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
