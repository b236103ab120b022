"""Serializer fields shared by the API."""

from rest_framework import serializers


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers, booleans, lists and objects instead of
    silently turning them into strings, and refuses NUL bytes (PostgreSQL text
    cannot hold them)."""

    default_error_messages = {
        "not_a_string": "Must be a string.",
        "nul": "Must not contain NUL characters.",
    }

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("not_a_string")
        if "\x00" in data:
            self.fail("nul")
        return super().to_internal_value(data)
