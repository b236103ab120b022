"""The enrichment failures of a bucket: memories a derived step keeps failing on."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.views import APIView

from engram_site.fields import StrictSerializer
from engram_site.openapi import cursor_page, errors
from engram_site.pagination import CreatedCursorPagination, cursor_field, list_response, page_size_field
from memories import selectors
from memories.models import EnrichmentStage
from tenants.selectors import bucket_get


class FailureCursorPagination(CreatedCursorPagination):
    """Most recently failed first, by (last_failed_at, id)."""

    ordering = ("-last_failed_at", "-id")


class EnrichmentFailureOut(serializers.Serializer):
    memory_id = serializers.UUIDField()
    stage = serializers.ChoiceField(choices=EnrichmentStage.values, help_text="the step that failed")
    attempts = serializers.IntegerField(help_text="failed attempts in a row")
    last_error = serializers.CharField(help_text="the last attempt's error (at most 1,000 characters)")
    first_failed_at = serializers.DateTimeField()
    last_failed_at = serializers.DateTimeField()
    next_retry_at = serializers.DateTimeField(help_text="when the background sweep tries again")


class EnrichmentFailuresApi(APIView):
    class Params(StrictSerializer):
        stage = serializers.ChoiceField(choices=EnrichmentStage.values, required=False)
        cursor = cursor_field()
        page_size = page_size_field()

    @extend_schema(
        operation_id="enrichment_failures_list",
        parameters=[Params],
        responses={200: cursor_page("EnrichmentFailurePage", EnrichmentFailureOut(many=True)), **errors(400, 404)},
        description=(
            "Memories of the bucket an enrichment step (embedding, lemmas, graph extraction, classification) "
            "failed on by itself, with the error and the next retry time; most recently failed first."
        ),
    )
    def get(self, request, bucket_id):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        params = self.Params(data=request.query_params.dict())
        params.is_valid(raise_exception=True)
        failures = selectors.enrichment_failure_list(
            bucket=bucket, stage=params.validated_data.get("stage"), agents=request.auth.agents
        )
        return list_response(request, self, failures, EnrichmentFailureOut, paginator=FailureCursorPagination)
