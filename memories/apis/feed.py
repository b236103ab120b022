"""GET /api/v1/buckets/{id}/events: the bucket's change feed (memories/feed_reader.py), read with a cursor."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from engram_site.fields import QueryIntegerField, StrictCharField, StrictSerializer, query_values
from engram_site.openapi import errors
from memories import feed_reader
from memories.models import EventKind


class EventOut(serializers.Serializer):
    id = serializers.IntegerField(help_text="the event's id: unique, an idempotency key for receivers")
    cursor = serializers.CharField(help_text="the feed's position after this event (pass it as `after`)")
    kind = serializers.ChoiceField(choices=EventKind.choices)
    memory_id = serializers.UUIDField(allow_null=True, help_text="the memory changed (null for a block's event)")
    block_id = serializers.UUIDField(allow_null=True, help_text="the block changed (null for a memory's event)")
    bucket_id = serializers.UUIDField()
    at = serializers.DateTimeField(help_text="when the change was made (the start of its transaction)")
    data = serializers.JSONField(
        source="payload",
        help_text=(
            "created/restored: content; updated: fields (names) and content; superseded: superseded_at, "
            "superseded_by; deleted: reason (deleted | merged, with into); expired: expires_at; erased: nothing. "
            "Events of an erased memory carry erased: true and no content. block_created/block_updated: label, "
            "agent_id, version, content, token_count, max_tokens, reason, actor (kind, id, label), and for an "
            "update fields; block_deleted: label, agent_id, version, reason, actor (erased: true and no agent_id "
            "or reason for an agent's erasure)."
        ),
    )


class FeedPageOut(serializers.Serializer):
    events = EventOut(many=True)
    next_cursor = serializers.CharField(help_text="pass as `after` for the next page (also when events is empty)")
    has_more = serializers.BooleanField(help_text="more events are ready now: ask again at once")


class BucketEventsApi(APIView):
    class Params(StrictSerializer):
        after = serializers.CharField(
            required=False, allow_blank=True, max_length=64, trim_whitespace=False,
            help_text="a next_cursor from an earlier page; omitted: from the oldest event kept",
        )  # fmt: skip
        limit = QueryIntegerField(
            required=False, min_value=1, max_value=feed_reader.MAX_LIMIT, default=feed_reader.DEFAULT_LIMIT,
            help_text=f"1–{feed_reader.MAX_LIMIT} (default {feed_reader.DEFAULT_LIMIT})",
        )  # fmt: skip
        kind = StrictCharField(
            required=False, max_length=400,
            help_text="only events of these kinds, comma-separated (e.g. `created,updated`); omitted: every kind",
        )  # fmt: skip

        def validate_kind(self, value: str) -> list[str]:
            kinds = [part.strip() for part in value.split(",") if part.strip()]
            unknown = sorted({k for k in kinds if k not in EventKind.values})
            if unknown:
                raise serializers.ValidationError(
                    f"Unknown event kind(s): {', '.join(unknown)}. Kinds: {', '.join(EventKind.values)}."
                )
            if not kinds:
                raise serializers.ValidationError("Name at least one event kind, or leave the parameter out.")
            return list(dict.fromkeys(kinds))

    @extend_schema(
        operation_id="buckets_events",
        parameters=[Params],
        responses={200: FeedPageOut, **errors(400, 404, 410)},
        description=(
            "The bucket's change feed, oldest first: memories created, updated, superseded, deleted, restored, "
            "expired and erased, and memory blocks created, updated and deleted. Resume with `after` = the last "
            "next_cursor: every event comes exactly once, in the same order, also under concurrent writes. `kind` "
            "keeps only the kinds named; the cursors of a filtered read resume that read (with the same kinds). "
            "Events "
            "are kept ENGRAM_EVENTS_RETENTION_DAYS; a cursor "
            'behind what was deleted answers 410 cursor_expired. docs/API.md, "Change feed".'
        ),
    )
    def get(self, request, bucket_id):
        params = self.Params(data=query_values(request.query_params))
        params.is_valid(raise_exception=True)
        page = feed_reader.events_feed(
            tenant=request.auth.tenant, bucket_id=bucket_id, principal=request.auth,
            after=params.validated_data.get("after"), limit=params.validated_data["limit"],
            kinds=params.validated_data.get("kind"),
        )  # fmt: skip
        return Response(FeedPageOut(page).data)
