"""Serializers and serializer fields shared by the API.

They are strict on purpose: a number sent where a string belongs, a typo in a field name or a
control character in a tag is a client bug, and silently coercing or dropping it would hide
that bug and store garbage.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from django.core.validators import ProhibitNullCharactersValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.validators import ProhibitSurrogateCharactersValidator

# C0 control characters and DEL, except tab, newline and carriage return (which real text
# holds). NUL cannot be stored in PostgreSQL text at all; the others (escape sequences,
# backspaces, bells) carry no meaning in a memory and would reach operators' terminals and logs.
# Lone surrogates (a JSON "\ud800" escape) are not characters and cannot be encoded as UTF-8.
FORBIDDEN_CHARACTERS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


def character_error(value: str) -> str | None:
    """Why ``value`` is refused, or None when it holds no forbidden character."""
    found = FORBIDDEN_CHARACTERS.search(value)
    if found is None:
        return None
    char = found.group()
    if char == "\x00":
        return "Must not contain NUL characters."
    if "\ud800" <= char <= "\udfff":
        return f"Must not contain surrogate characters (found U+{ord(char):04X})."
    return f"Must not contain control characters (found U+{ord(char):04X})."


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not know: a typo must not be silently ignored."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = set(data) - set(self.fields)
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in sorted(unknown)})
        return super().to_internal_value(data)


def query_values(query_params) -> dict:
    """A request's query string as one value per name, for a StrictSerializer. A name given twice
    is refused (400): ``QueryDict.dict()`` would keep the last and drop the rest unseen."""
    repeated = sorted(name for name, values in query_params.lists() if len(values) > 1)
    if repeated:
        raise serializers.ValidationError({name: ["Give this parameter once."] for name in repeated})
    return query_params.dict()


_REDUNDANT_VALIDATORS = (ProhibitNullCharactersValidator, ProhibitSurrogateCharactersValidator)


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers, booleans, lists and objects instead of
    silently turning them into strings, and refuses NUL bytes (PostgreSQL text
    cannot hold them) and other control characters (see CONTROL_CHARACTERS)."""

    default_error_messages = {
        "not_a_string": "Must be a string.",
        "nul": "Must not contain NUL characters.",
        "control": "{message}",  # control or surrogate characters
    }

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # to_internal_value refuses NUL and surrogates itself, before any validator runs; DRF's
        # validators for the same characters would only walk the text again, character by
        # character in Python (about a fifth of validating a batch of 1,000 memories).
        self.validators = [v for v in self.validators if not isinstance(v, _REDUNDANT_VALIDATORS)]

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("not_a_string")
        message = character_error(data)
        if message is not None and "\x00" in data:
            self.fail("nul")
        if message is not None:
            self.fail("control", message=message)
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """An IntegerField for JSON bodies: refuses "5", 5.0 and true instead of coercing them.
    (Query parameters are strings by nature and use the plain IntegerField.)"""

    default_error_messages = {"not_an_integer": "Must be an integer."}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("not_an_integer")
        return super().to_internal_value(data)


class QueryIntegerField(serializers.IntegerField):
    """An IntegerField for query parameters: ASCII digits (a leading minus allowed, for the
    range check to answer), nothing around them. Python's int() also takes other scripts'
    digits (``١``, ``３``), surrounding spaces and a plus sign: one page would answer to many
    URLs, and a typo would pass unseen."""

    _DIGITS = re.compile(r"-?[0-9]+")

    def to_internal_value(self, data):
        if isinstance(data, str) and not self._DIGITS.fullmatch(data):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    """A FloatField for JSON bodies: a JSON number (1 or 0.5), not "0.5", true or NaN."""

    default_error_messages = {"not_a_number": "Must be a number."}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("not_a_number")
        return super().to_internal_value(data)


@extend_schema_field({"type": "object", "additionalProperties": True})
class JSONObjectField(serializers.JSONField):
    """A JSON object, and nothing else (a plain JSONField takes any value, and documents so)."""

    default_error_messages = {"not_object": "Must be a JSON object."}

    def to_internal_value(self, data):
        data = super().to_internal_value(data)
        if not isinstance(data, dict):
            self.fail("not_object")
        return data


class StrictBooleanField(serializers.BooleanField):
    """A BooleanField for JSON bodies: true or false, not 0, "no" or "off" (DRF's BooleanField
    takes all of those, and a flag like remove_source must not be guessed)."""

    default_error_messages = {"not_a_boolean": "Must be true or false."}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("not_a_boolean")
        return data


class StrictDateTimeField(serializers.DateTimeField):
    """An ISO 8601 date-time given as a string, with no control characters in it (the parser
    behind DRF's field skips over some, so "2024-01-01T00:00:00\\x00Z" would pass)."""

    default_error_messages = {"not_a_string": "Must be an ISO 8601 date-time string."}

    def to_internal_value(self, value):
        if not isinstance(value, str):
            self.fail("not_a_string")
        if character_error(value) is not None:
            self.fail("invalid", format="YYYY-MM-DDThh:mm[:ss[.uuuuuu]][+HH:MM|-HH:MM|Z]")
        return super().to_internal_value(value)


# The times a stored row may carry (its created_at, a message's timestamp). Wide enough for any
# history a client imports, and far enough from the calendar's ends (years 1 and 9999) that
# everything computed from a stored time — the next year, month or day of the console's date
# drill-down, a document chunk's millisecond offsets, recency — stays inside it.
EARLIEST_STORED = datetime(1900, 1, 1, tzinfo=UTC)
LATEST_STORED = datetime(2201, 1, 1, tzinfo=UTC)  # exclusive: years 1900 to 2200


class StoredDateTimeField(StrictDateTimeField):
    """A :class:`StrictDateTimeField` for a time that is stored: years 1900 to 2200 (UTC)."""

    default_error_messages = {
        "out_of_range": "Must be between 1900-01-01T00:00:00Z and 2200-12-31T23:59:59.999999Z.",
    }

    def to_internal_value(self, value):
        parsed = super().to_internal_value(value)
        if not EARLIEST_STORED <= parsed < LATEST_STORED:
            self.fail("out_of_range")
        return parsed
