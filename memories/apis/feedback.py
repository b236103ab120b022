"""Feedback on a memory a search returned: useful or irrelevant for a query."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.services import request_actor
from engram_site.fields import StrictCharField, StrictSerializer
from engram_site.openapi import BODY, errors
from memories import selectors
from memories.filters import MAX_ID_CHARS
from memories.models import FeedbackSignal
from memories.services.feedback import MAX_QUERY_CHARS, feedback_record
from tenants.agents import write_agent


class FeedbackIn(StrictSerializer):
    signal = serializers.ChoiceField(
        choices=FeedbackSignal.choices, help_text="useful: it answered the query; irrelevant: it did not belong there"
    )
    query = StrictCharField(
        max_length=MAX_QUERY_CHARS, help_text="the query the memory was returned for (as the search was asked)"
    )
    agent_id = StrictCharField(
        max_length=MAX_ID_CHARS, required=False, allow_null=True,
        help_text="the agent giving the rating (a token held to one agent: defaulted to it)",
    )  # fmt: skip
    run_id = StrictCharField(max_length=MAX_ID_CHARS, required=False, allow_null=True)


class FeedbackOut(serializers.Serializer):
    id = serializers.IntegerField()
    memory_id = serializers.UUIDField()
    bucket_id = serializers.UUIDField()
    signal = serializers.CharField()
    query = serializers.CharField()
    agent_id = serializers.CharField(allow_null=True)
    run_id = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    embedded = serializers.SerializerMethodField(
        help_text="false when the embedding model was down: the rating is kept but changes no ranking"
    )

    def get_embedded(self, feedback) -> bool:
        return feedback.query_embedding is not None


class MemoryFeedbackApi(APIView):
    @extend_schema(
        operation_id="memories_feedback",
        request=FeedbackIn,
        responses={201: FeedbackOut, **errors(403, 404, *BODY)},
        description=(
            "Rate a memory for a query: useful (it answered the query) or irrelevant. Later searches of the "
            "memory's bucket lift a memory rated useful for questions like this one and demote one rated "
            "irrelevant, by how alike the questions are and how recent the rating is (docs/RETRIEVAL.md, "
            "Feedback). Needs the write scope; a token held to agents rates as one of its agents. The rating "
            "is recorded in the memory's history (kind rated)."
        ),
    )
    def post(self, request, memory_id):
        memory = selectors.memory_get(tenant=request.auth.tenant, memory_id=memory_id, token=request.auth)
        params = FeedbackIn(data=request.data)
        params.is_valid(raise_exception=True)
        values = params.validated_data
        feedback = feedback_record(
            memory=memory,
            signal=values["signal"],
            query=values["query"],
            agent_id=write_agent(request.auth.agents, values.get("agent_id")),
            run_id=values.get("run_id"),
            actor=request_actor(request),
        )
        return Response(FeedbackOut(feedback).data, status=status.HTTP_201_CREATED)
