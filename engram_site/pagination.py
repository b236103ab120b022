"""Pagination shared by the API's list endpoints.

A list endpoint validates its ``limit``/``offset`` or ``cursor``/``page_size`` query parameters
in its own Params serializer (so a bad value is a 400 naming the parameter, never silently
replaced by the default); the classes here hold the page sizes and answer a cursor the API
did not write with a 400 instead of DRF's 404 (or a 500 for a well-formed cursor whose
position is not a timestamp).
"""

from __future__ import annotations

import base64
import binascii

from django.utils.dateparse import parse_datetime
from rest_framework import pagination, serializers
from rest_framework.exceptions import NotFound

MAX_PAGE_SIZE = 500
DEFAULT_PAGE_SIZE = 50


def offset_field() -> serializers.IntegerField:
    return serializers.IntegerField(required=False, min_value=0, help_text="0 or more (default 0)")


def page_size_field() -> serializers.IntegerField:
    """The size of a page: ``limit`` of a limit/offset list, ``page_size`` of a cursor list."""
    return serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_PAGE_SIZE,
        help_text=f"1–{MAX_PAGE_SIZE} (default {DEFAULT_PAGE_SIZE})",
    )


def cursor_field() -> serializers.CharField:
    return serializers.CharField(
        required=False, max_length=1_000, help_text="from a previous page's next/previous link"
    )


class LimitOffsetPagination(pagination.LimitOffsetPagination):
    default_limit = DEFAULT_PAGE_SIZE
    max_limit = MAX_PAGE_SIZE


class CreatedCursorPagination(pagination.CursorPagination):
    """Newest first, by (created_at, id)."""

    ordering = ("-created_at", "-id")
    page_size = DEFAULT_PAGE_SIZE
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE

    def decode_cursor(self, request):
        encoded = request.query_params.get(self.cursor_query_param)
        try:
            # DRF's decoder skips characters outside base64's alphabet ("%%%" reads as no cursor).
            if encoded is not None:
                base64.b64decode(encoded.encode("ascii"), validate=True)
            cursor = super().decode_cursor(request)
        except (UnicodeEncodeError, binascii.Error, NotFound):
            raise serializers.ValidationError({"cursor": ["Invalid cursor."]}) from None
        if cursor is not None and cursor.position is not None:
            # The position is compared with created_at in SQL; anything else would fail there.
            try:
                valid = parse_datetime(cursor.position) is not None
            except ValueError:
                valid = False
            if not valid:
                raise serializers.ValidationError({"cursor": ["Invalid cursor."]})
        return cursor
