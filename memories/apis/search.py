"""Search endpoints: one bucket, and several buckets read as one collection."""

from __future__ import annotations

import re
import time

from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from engram_site import replica
from engram_site.fields import (
    JSONObjectField,
    StrictBooleanField,
    StrictCharField,
    StrictDateTimeField,
    StrictIntegerField,
    StrictSerializer,
)
from engram_site.openapi import BODY, errors
from memories import ranking, retrieval
from memories.filters import MemoryFilters
from memories.models import BLOCK_LABEL_PATTERN
from memories.retrieval.blocks import MAX_BLOCK_LABELS, blocks_within_budget, search_blocks
from memories.serializers import SearchFiltersIn
from tenants import usage
from tenants.models import Scope as TokenScope
from tenants.selectors import bucket_get, buckets_readable

MAX_QUERY_CHARS = 4_000


class SearchHitOut(serializers.Serializer):
    id = serializers.UUIDField()
    content = serializers.CharField()
    score = serializers.FloatField()
    created_at = serializers.DateTimeField()
    attributed_to = serializers.CharField(allow_null=True)
    agent_id = serializers.CharField(allow_null=True)
    run_id = serializers.CharField(allow_null=True)
    source_actor_id = serializers.CharField(allow_null=True)
    hint_root = serializers.CharField(allow_null=True)
    hint_tags = serializers.ListField(child=serializers.CharField(), allow_null=True)
    metadata = JSONObjectField(allow_null=True)
    classified_scope = serializers.CharField(allow_null=True)
    classified_topic = serializers.CharField(allow_null=True)
    token_count = serializers.IntegerField(allow_null=True)
    superseded = serializers.BooleanField()
    superseded_by = serializers.UUIDField(allow_null=True)
    importance = serializers.FloatField(allow_null=True)
    passage = serializers.JSONField(
        allow_null=True,
        help_text="a memory longer than the model's window: its passage nearest the question, "
        "{ordinal, start, end} (character offsets in the memory's content); null otherwise",
    )
    excerpt = serializers.JSONField(
        allow_null=True,
        help_text="set when `content` is part of the memory (the passage with a little context, see the "
        "request's `excerpt`): {start, end}, its character offsets in the memory's content; null otherwise",
    )
    explain = serializers.JSONField(required=False)


# DRF's own date-time rendering (current time zone, ISO 8601, UTC as Z, None as None).
_DATETIME_OUT = serializers.DateTimeField()


class CrossSearchHitOut(SearchHitOut):
    bucket_id = serializers.UUIDField(help_text="the bucket the memory is in")


def _dates_out() -> serializers.DateTimeField:
    """The field that renders one answer's times: the current time zone read once (the plain
    field reads it for every value, ~10 µs of a hit)."""
    return serializers.DateTimeField(default_timezone=timezone.get_current_timezone())


def _hit_json(
    hit: retrieval.Hit, explain: bool, with_bucket: bool = False, dates: serializers.DateTimeField = _DATETIME_OUT
) -> dict:
    """One search hit exactly as :class:`SearchHitOut` (the documented shape) renders it, built
    directly: the serializer's per-field machinery cost about 0.1 ms a hit, a millisecond of
    every search (a test in tests/retrieval/test_search.py compares the two). ``dates``: the
    field that renders ``created_at`` (:func:`_dates_out` for many hits)."""
    row = hit.row
    item = {"id": str(row["id"])}
    if with_bucket:
        item["bucket_id"] = str(row["bucket_id"])
    item |= {
        "content": hit.content,
        "score": round(hit.score, 6),
        "created_at": dates.to_representation(row["created_at"]),
    }
    for name in ("attributed_to", "agent_id", "run_id", "source_actor_id", "hint_root", "hint_tags", "metadata",
                 "classified_scope", "classified_topic", "token_count"):  # fmt: skip
        item[name] = row[name]
    if hit.excerpt is not None:
        item["token_count"] = hit.excerpt_tokens
    item["superseded"] = bool(row["superseded"])
    item["superseded_by"] = str(row["superseded_by"]) if row["superseded_by"] is not None else None
    item["importance"] = row["importance"]
    item["passage"] = hit.passage.as_json() if hit.passage is not None else None
    item["excerpt"] = {"start": hit.excerpt[0], "end": hit.excerpt[1]} if hit.excerpt is not None else None
    if explain:
        item["explain"] = hit.explain
    return item


class SearchBlockOut(serializers.Serializer):
    bucket_id = serializers.UUIDField()
    label = serializers.CharField()
    agent_id = serializers.CharField(allow_null=True)
    content = serializers.CharField(allow_blank=True)
    token_count = serializers.IntegerField()
    version = serializers.IntegerField()
    etag = serializers.CharField()


class LeftOutBlockOut(serializers.Serializer):
    bucket_id = serializers.UUIDField()
    label = serializers.CharField()
    agent_id = serializers.CharField(allow_null=True)
    token_count = serializers.IntegerField(help_text="more than what was left of the token budget")


class SearchOut(serializers.Serializer):
    mode_used = serializers.ChoiceField(choices=retrieval.MODES)
    results = SearchHitOut(many=True)
    warnings = serializers.ListField(child=serializers.CharField())
    total_tokens = serializers.IntegerField(help_text="what the answer's texts cost: the results' and the blocks'")
    blocks = SearchBlockOut(
        many=True, required=False,
        help_text="with include_blocks: the memory blocks, to be placed before the results, within the token budget",
    )  # fmt: skip
    blocks_left_out = LeftOutBlockOut(
        many=True, required=False, help_text="with include_blocks and a token budget: the blocks that did not fit"
    )
    explain = serializers.JSONField(
        required=False, help_text="with explain: how the token budget was shared between blocks and memories"
    )


@extend_schema_field(
    {
        "oneOf": [
            {"type": "boolean"},
            {
                "type": "array",
                "items": {"type": "string", "pattern": BLOCK_LABEL_PATTERN},
                "minItems": 1,
                "maxItems": MAX_BLOCK_LABELS,
                "uniqueItems": True,
            },
        ]
    }
)
class IncludeBlocksField(serializers.Field):
    """``true`` (every block the search is for), ``false``, or a list of labels."""

    default_error_messages = {
        "invalid": f"true, false or a list of 1 to {MAX_BLOCK_LABELS} block labels (each once).",
    }

    def to_internal_value(self, data):
        if isinstance(data, bool):
            return data
        if (
            isinstance(data, list)
            and 1 <= len(data) <= MAX_BLOCK_LABELS
            and all(isinstance(label, str) and re.match(BLOCK_LABEL_PATTERN, label) for label in data)
            and len(set(data)) == len(data)
        ):
            return data
        self.fail("invalid")

    def to_representation(self, value):
        return value


class SearchApi(APIView):
    # Searching is reading, even though the query travels in a POST body.
    required_scopes = {"POST": TokenScope.READ}
    replica_reads = True  # a POST that writes nothing: it reads a replica, if any (engram_site/replica.py)

    @extend_schema_serializer(component_name="Search")
    class Input(StrictSerializer):
        query = StrictCharField(max_length=MAX_QUERY_CHARS)
        mode = serializers.ChoiceField(choices=retrieval.MODES, default="hybrid")
        limit = StrictIntegerField(min_value=1, max_value=retrieval.MAX_LIMIT, required=False)
        token_budget = StrictIntegerField(min_value=1, max_value=1_000_000, required=False)
        filters = SearchFiltersIn(required=False)
        explain = StrictBooleanField(default=False)
        ranking = JSONObjectField(required=False, help_text="overrides of the ranking defaults")
        now = StrictDateTimeField(required=False, help_text="evaluate recency and relative dates at this time")
        excerpt = serializers.ChoiceField(
            choices=retrieval.EXCERPT_MODES,
            default="auto",
            help_text="a long memory's hit: `auto` returns its matched passage with a little context when the "
            "whole memory does not fit what is left of `token_budget`; `passage` always; `whole` never",
        )
        include_blocks = IncludeBlocksField(
            required=False,
            help_text="true, or a list of labels: the memory blocks the search is for (the shared ones, and those of "
            "filters.agent_id or of the token's agents) come first in the answer, inside `token_budget`; a block "
            "that does not fit is left out (blocks_left_out) and the memories get what the blocks leave",
        )

        def validate_ranking(self, value):
            try:
                ranking.merge(ranking.DEFAULTS, value)
            except ranking.RankingConfigError as exc:
                raise serializers.ValidationError(str(exc)) from None
            return value

    @extend_schema(operation_id="memories_search", request=Input, responses={200: SearchOut, **errors(404, *BODY)})
    def post(self, request, bucket_id):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        params = self.Input(data=request.data)
        params.is_valid(raise_exception=True)
        return Response(
            replica.read(
                request.auth.tenant_id,
                lambda using: _search(params.validated_data, [bucket], agents=request.auth.agents, using=using),
            )
        )


def _search(data: dict, buckets: list, *, agents=None, across: bool = False, using: str | None = None) -> dict:
    """Run the search a validated body asks for over ``buckets``; the response body. The
    bucket search and the search across buckets share it: one bucket searched either way gives
    the same hits (across buckets, each names its bucket). ``agents``: the token's agent
    restriction (only those agents' memories are searched); the search counts in the tenant's
    usage. ``using``: the database it reads (the buckets were read from the primary: who may
    read what is never judged on a replica)."""
    if not buckets:
        return {"mode_used": data["mode"], "results": [], "warnings": [], "total_tokens": 0}
    started = time.perf_counter()
    filters = MemoryFilters(**data.get("filters", {}), agents=agents)
    token_budget = data.get("token_budget")
    include = data.get("include_blocks")
    blocks = None
    if include:
        found = search_blocks(buckets=buckets, labels=None if include is True else include, filters=filters,
                              using=using)  # fmt: skip
        blocks = blocks_within_budget(found, token_budget)
    left = token_budget - blocks.tokens if blocks is not None and token_budget is not None else token_budget
    if left == 0:
        # The blocks took the whole budget: no memory can fit, so none is searched for.
        result = retrieval.SearchResult(
            mode_used=data["mode"], hits=[], warnings=["The blocks took the whole token budget: no memory fits."]
        )
    else:
        result = retrieval.memories_search(
            buckets=buckets,
            query=data["query"],
            mode=data["mode"],
            limit=data.get("limit"),
            token_budget=left,
            filters=filters,
            explain=data["explain"],
            ranking_overrides=data.get("ranking"),
            now=data.get("now"),
            excerpt=data["excerpt"],
            using=using,
        )
    dates = _dates_out()
    results = [_hit_json(hit, data["explain"], with_bucket=across, dates=dates) for hit in result.hits]
    memory_tokens = sum((h.excerpt_tokens if h.excerpt is not None else h.row["token_count"]) or 0 for h in result.hits)
    payload = {
        "mode_used": result.mode_used,
        "results": results,
        "warnings": result.warnings,
        "total_tokens": memory_tokens + (blocks.tokens if blocks is not None else 0),
    }
    if blocks is not None:
        payload["blocks"] = [_block_json(block) for block in blocks.included]
        payload["blocks_left_out"] = [
            {"bucket_id": str(b.bucket_id), "label": b.label, "agent_id": b.agent_id, "token_count": b.token_count}
            for b in blocks.left_out
        ]
        if data["explain"]:
            # The blocks' effect on the ranking's outcome is the budget they took: named once for the
            # answer and beside each hit's boosts.
            shares = {"token_budget": token_budget, "blocks": blocks.tokens, "memories": left}
            payload["explain"] = {
                "budget": {**shares, "memory_tokens": memory_tokens},
                "blocks": [
                    f"{b.label}" if b.agent_id is None else f"{b.label} ({b.agent_id})" for b in blocks.included
                ],
                "blocks_left_out": [
                    f"{b.label}" if b.agent_id is None else f"{b.label} ({b.agent_id})" for b in blocks.left_out
                ],
            }
            for item in results:
                item["explain"]["budget"] = shares
    usage.record_search(
        tenant_id=buckets[0].tenant_id,
        milliseconds=(time.perf_counter() - started) * 1000,
        tokens=payload["total_tokens"],
    )
    return payload


MAX_SEARCH_BUCKETS = 100


def _block_json(block) -> dict:
    return {
        "bucket_id": str(block.bucket_id), "label": block.label, "agent_id": block.agent_id, "content": block.content,
        "token_count": block.token_count, "version": block.version, "etag": block.etag,
    }  # fmt: skip


class BucketRefOut(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()


class CrossSearchOut(SearchOut):
    results = CrossSearchHitOut(many=True)
    buckets = BucketRefOut(many=True, help_text="the buckets searched, in the order given (by default: by name)")


class CrossSearchApi(APIView):
    """One search over several buckets: fused once, cut to one limit and one token budget."""

    required_scopes = {"POST": TokenScope.READ}
    replica_reads = True

    @extend_schema_serializer(component_name="SearchAcrossBuckets")
    class Input(SearchApi.Input):
        # Strings, not UUIDs: a malformed id answers 404 like a missing bucket, as in paths.
        buckets = serializers.ListField(
            child=StrictCharField(max_length=64),
            required=False,
            min_length=1,
            max_length=MAX_SEARCH_BUCKETS,
            help_text=(
                f"ids of the buckets to search (1 to {MAX_SEARCH_BUCKETS}, no repeats); default: every bucket the "
                "token can read"
            ),
        )

        def validate_buckets(self, value):
            if len(set(value)) != len(value):
                raise serializers.ValidationError("Name each bucket once.")
            return value

    @extend_schema(
        operation_id="memories_search_across",
        request=Input,
        responses={200: CrossSearchOut, **errors(404, *BODY)},
        description=(
            "Search several buckets at once with the body of a bucket search plus `buckets`. Their memories are "
            "ranked together (keyword statistics of the buckets taken together, one vector walk), the signals are "
            "fused once and one `limit` and one `token_budget` cut the answer; each result names its `bucket_id`. "
            "A bucket that is another tenant's, outside the token's restriction or missing answers 404."
        ),
    )
    def post(self, request):
        params = self.Input(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        buckets = buckets_readable(
            tenant=request.auth.tenant, token=request.auth, bucket_ids=data.get("buckets"), at_most=MAX_SEARCH_BUCKETS
        )
        if len(buckets) > MAX_SEARCH_BUCKETS:
            raise serializers.ValidationError(
                {"buckets": [f"The token can read more than {MAX_SEARCH_BUCKETS} buckets: name the ones to search."]}
            )
        payload = replica.read(
            request.auth.tenant_id,
            lambda using: _search(data, buckets, agents=request.auth.agents, across=True, using=using),
        )
        payload["buckets"] = [{"id": str(b.pk), "name": b.name} for b in buckets]
        return Response(payload)
