"""API input for the memory filters, derived from their one definition (memories/filters.py).

Every field of :class:`~memories.filters.MemoryFilters` with a ``kind`` becomes an optional
input field of :class:`SearchFiltersIn`, in declaration order, with the limits its ``api``
metadata gives; a new filter is declared once, there.
"""

from __future__ import annotations

from dataclasses import fields

from rest_framework.serializers import BooleanField, ChoiceField, FloatField, ListField

from engram_site.fields import (
    StrictBooleanField,
    StrictCharField,
    StrictDateTimeField,
    StrictFloatField,
    StrictSerializer,
)
from memories.filters import MemoryFilters

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


# A filter's kind → the input field that reads its value.
_FIELD_OF_KIND = {
    "tags": TagsField,
    "text": StrictCharField,
    "choice": ChoiceField,
    "datetime": StrictDateTimeField,
    "flag": StrictBooleanField,
    "fraction": lambda **kwargs: StrictFloatField(min_value=0.0, max_value=1.0, **kwargs),
}
# Query parameters are strings: the list reads them with DRF's plain fields.
_QUERY_FIELD_OF_KIND = {
    **_FIELD_OF_KIND,
    "flag": BooleanField,
    "fraction": lambda **kwargs: FloatField(min_value=0.0, max_value=1.0, **kwargs),
}


def _filter_fields() -> dict:
    return {
        spec.name: _FIELD_OF_KIND[spec.metadata["kind"]](required=False, **spec.metadata["api"])
        for spec in fields(MemoryFilters)
        if "kind" in spec.metadata
    }


# Built with type() so that the fields come from the filters' definition; the class name is
# the OpenAPI component's ("SearchFiltersIn", as memories/apis.py declared it by hand).
SearchFiltersIn = type(
    "SearchFiltersIn",
    (StrictSerializer,),
    {"__module__": __name__, "__qualname__": "SearchFiltersIn", **_filter_fields()},
)

# The filters the memory list takes as query parameters (the search's own, supersession and
# as_of, are not list filters).
LIST_FILTERS = (
    "hint_tags", "agent_id", "run_id", "attributed_to", "classified_scope", "classified_topic", "created_after",
    "created_before", "importance_min", "include_expired",
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
