"""Pagination shared by the API's list endpoints.

A list endpoint validates its ``limit``/``offset`` or ``cursor``/``page_size`` query parameters
in its own Params serializer (so a bad value is a 400 naming the parameter, never silently
replaced by the default); the classes here hold the page sizes and answer a cursor the API
did not write with a 400 instead of DRF's 404 (or a 500 for a well-formed cursor whose
position is not a timestamp). The view then filters its rows through a selector and answers
with :func:`list_response`, the one place a page is cut, serialised and wrapped in its links.
"""

from __future__ import annotations

import base64
import binascii
from urllib import parse

from django.core import signing
from django.utils.dateparse import parse_datetime
from rest_framework import pagination, serializers
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from engram_site.fields import QueryIntegerField

MAX_PAGE_SIZE = 500
DEFAULT_PAGE_SIZE = 50


def offset_field() -> serializers.IntegerField:
    return QueryIntegerField(required=False, min_value=0, help_text="0 or more (default 0)")


def page_size_field() -> serializers.IntegerField:
    """The size of a page: ``limit`` of a limit/offset list, ``page_size`` of a cursor list."""
    return QueryIntegerField(
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

    # Cursors are signed with the server's secret key: one the API did not write (a hand-made
    # base64 "p=<timestamp>", an edited offset) is refused with a 400, not followed.
    _signer = signing.Signer(salt="engram.pagination.cursor")

    def encode_cursor(self, cursor):
        url = super().encode_cursor(cursor)
        encoded = parse.parse_qs(parse.urlsplit(url).query).get(self.cursor_query_param, [""])[0]
        return replace_query_param(
            remove_query_param(url, self.cursor_query_param), self.cursor_query_param, self._signer.sign(encoded)
        )

    def decode_cursor(self, request):
        signed = request.query_params.get(self.cursor_query_param)
        if signed is None:
            return None
        try:
            encoded = self._signer.unsign(signed)
            # DRF's decoder skips characters outside base64's alphabet; this one refuses them.
            tokens = parse.parse_qs(base64.b64decode(encoded.encode("ascii"), validate=True).decode("ascii"))
            offset = pagination._positive_int(tokens.get("o", ["0"])[0], cutoff=self.offset_cutoff)
            reverse = bool(int(tokens.get("r", ["0"])[0]))
            position = tokens.get("p", [None])[0]
        except (signing.BadSignature, UnicodeError, binascii.Error, TypeError, ValueError):
            raise serializers.ValidationError({"cursor": ["Invalid cursor."]}) from None
        if position is not None:
            # The position is compared with created_at in SQL; anything else would fail there.
            try:
                valid = parse_datetime(position) is not None
            except ValueError:
                valid = False
            if not valid:
                raise serializers.ValidationError({"cursor": ["Invalid cursor."]})
        return pagination.Cursor(offset=offset, reverse=reverse, position=position)


class DeletedCursorPagination(CreatedCursorPagination):
    """Most recently deleted first, by (deleted_at, id)."""

    ordering = ("-deleted_at", "-id")


def list_response(
    request,
    view,
    rows,
    serializer: type[serializers.BaseSerializer],
    *,
    paginator: type[pagination.BasePagination] = LimitOffsetPagination,
    context: dict | None = None,
) -> Response:
    """The answer of a list endpoint: one page of ``rows`` (a queryset, already filtered).

    ``paginator`` takes the page size and the offset or cursor from the query string (the view
    validated them in its Params serializer first, so a bad value is a 400 that names it), each
    row of the page is rendered by ``serializer`` (with ``context``), and the envelope carries
    the links to the next and previous pages, and the count of a limit/offset list.
    """
    pages = paginator()
    page = pages.paginate_queryset(rows, request, view=view)
    return pages.get_paginated_response(serializer(page, many=True, context=context or {}).data)
