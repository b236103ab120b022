"""The API's JSON parser: DRF's, with the failure modes of hostile bodies turned into 4xx.

DRF's parser lets JSON nested deeper than Python's recursion limit (``[[[[...`` a hundred
thousand levels) escape as a RecursionError, a 500 that a single small request can cause.
Documents nested deeper than any real payload are refused before they reach a serializer,
so no later recursive walk (json.dumps of metadata, psycopg's JSONB adapter, the JSONB
column read back) can hit the limit either. Numbers too large for a float (``1e999``)
would become Infinity, which neither JSON nor PostgreSQL's jsonb can hold: refused too.
"""

from __future__ import annotations

import json
import math

from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.settings import api_settings
from rest_framework.utils.json import strict_constant

# Deepest JSON document accepted anywhere in the API. A batch of memories with metadata is
# about five levels deep; metadata itself is limited further (memories.serializers.MAX_METADATA_DEPTH).
MAX_JSON_DEPTH = 64


def json_depth_exceeds(value, limit: int) -> bool:
    """Whether ``value`` (parsed JSON) nests containers more than ``limit`` levels deep.
    Iterative: it must not recurse on exactly the input that is too deep to recurse on."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"Number out of range: {text[:40]}")
    return value


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        encoding = parsers.get_encoding(parser_context or {})  # refuses unknown and non-text charsets
        try:
            text = stream.read().decode(encoding)
            parse_constant = strict_constant if api_settings.STRICT_JSON else None
            data = json.loads(text, parse_constant=parse_constant, parse_float=_finite_float)
        except RecursionError:
            raise ParseError(f"JSON parse error - nested more than {MAX_JSON_DEPTH} levels deep.") from None
        except ValueError as exc:  # also UnicodeDecodeError: bytes that are not valid in the charset
            raise ParseError(f"JSON parse error - {exc}") from None
        if json_depth_exceeds(data, MAX_JSON_DEPTH):
            raise ParseError(f"JSON parse error - nested more than {MAX_JSON_DEPTH} levels deep.")
        return data
