"""API input for a memory, shared by several endpoints: its fields as a write, an edit and an
import line read them (:class:`MemoryIn`, :class:`MemoryUpdateIn`, :class:`MetadataField` and
the limits), and the memory filters, derived from their one definition (memories/filters.py).

Every field of :class:`~memories.filters.MemoryFilters` with a ``kind`` becomes an optional
input field of :class:`SearchFiltersIn`, in declaration order, with the limits its ``api``
metadata gives; a new filter is declared once, there.
"""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import timedelta

from django.utils import timezone
from rest_framework import serializers
from rest_framework.serializers import BooleanField, ChoiceField, FloatField, ListField

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
from engram_site.parsers import json_depth_exceeds
from memories.filters import MemoryFilters
from memories.links import RESERVED_PREFIX
from memories.models import Attribution, Scope

MAX_CONTENT_CHARS = 20_000
MAX_ID_CHARS = 200
MAX_METADATA_BYTES = 16_384
MAX_METADATA_DEPTH = 32
MAX_TTL_SECONDS = 100 * 365 * 86400
MAX_TAGS = 50
MAX_TAG_CHARS = 100


class TagsField(ListField):
    child = StrictCharField(max_length=MAX_TAG_CHARS)

    def __init__(self, **kwargs):
        kwargs.setdefault("max_length", MAX_TAGS)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        tags = super().to_internal_value(data)
        return list(dict.fromkeys(tags))  # de-duplicated, order kept


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


class MetadataQueryField(MetadataField):
    """``metadata`` as a query parameter: a JSON object written as a string."""

    def __init__(self, **kwargs):
        super().__init__(binary=True, **kwargs)


# A filter's kind → the input field that reads its value.
_FIELD_OF_KIND = {
    "tags": TagsField,
    "text": StrictCharField,
    "choice": ChoiceField,
    "datetime": StrictDateTimeField,
    "flag": StrictBooleanField,
    "fraction": lambda **kwargs: StrictFloatField(min_value=0.0, max_value=1.0, **kwargs),
    "metadata": lambda **kwargs: MetadataField(**kwargs),
}
# Query parameters are strings: the list reads them with DRF's plain fields.
_QUERY_FIELD_OF_KIND = {
    **_FIELD_OF_KIND,
    "flag": BooleanField,
    "fraction": lambda **kwargs: FloatField(min_value=0.0, max_value=1.0, **kwargs),
    "metadata": lambda **kwargs: MetadataQueryField(**kwargs),
}


def _filter_fields() -> dict:
    return {
        spec.name: _FIELD_OF_KIND[spec.metadata["kind"]](required=False, **spec.metadata["api"])
        for spec in fields(MemoryFilters)
        if "kind" in spec.metadata
    }


# Built with type() so that the fields come from the filters' definition; the class name is
# the OpenAPI component's ("SearchFiltersIn", the name it had when it was declared by hand).
SearchFiltersIn = type(
    "SearchFiltersIn",
    (StrictSerializer,),
    {"__module__": __name__, "__qualname__": "SearchFiltersIn", **_filter_fields()},
)

# The filters the memory list takes as query parameters (the search's own, supersession and
# as_of, are not list filters).
LIST_FILTERS = (
    "hint_tags", "agent_id", "run_id", "attributed_to", "classified_scope", "classified_topic", "created_after",
    "created_before", "importance_min", "metadata", "include_expired",
)  # fmt: skip


def list_filter_fields() -> dict:
    """The memory list's filter query parameters, from the same definition: a query string
    carries tags comma-separated, every other filter as the search reads it."""
    out = {}
    for spec in fields(MemoryFilters):
        if spec.name not in LIST_FILTERS:
            continue
        if spec.metadata["kind"] == "tags":
            out[spec.name] = StrictCharField(
                required=False,
                max_length=MAX_TAGS * (MAX_TAG_CHARS + 1),
                help_text="comma-separated; all must be present",
            )
        else:
            out[spec.name] = _QUERY_FIELD_OF_KIND[spec.metadata["kind"]](required=False, **spec.metadata["api"])
    return out


# --- a memory's fields ---------------------------------------------------------------------------


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
