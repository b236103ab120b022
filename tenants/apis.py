"""Bucket endpoints: listing and creating buckets (/api/v1/buckets). A bucket's own page,
its deletion and merges hold its memories: memories/bucket_apis.py."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.services import request_actor
from engram_site.exceptions import Forbidden
from engram_site.fields import StrictCharField, StrictSerializer, query_values
from engram_site.openapi import BODY, errors, limit_offset_page
from engram_site.pagination import LimitOffsetPagination, offset_field, page_size_field
from tenants import selectors, services
from tenants.agents import refuse_agent_held
from tenants.services import BUCKET_NAME_MAX


class BucketOutput(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    description = serializers.CharField()
    created_at = serializers.DateTimeField()
    retention_days = serializers.IntegerField(
        help_text="days a deleted memory stays restorable (and an expired one listable) before it is purged"
    )


class BucketListApi(APIView):
    class ListParams(StrictSerializer):
        limit = page_size_field()
        offset = offset_field()

    @extend_schema_serializer(component_name="BucketCreate")
    class CreateInput(StrictSerializer):
        name = StrictCharField(max_length=BUCKET_NAME_MAX)
        description = StrictCharField(required=False, allow_blank=True, max_length=10_000, default="")

    @extend_schema(
        operation_id="buckets_list",
        parameters=[ListParams],
        responses={200: limit_offset_page("BucketPage", BucketOutput(many=True)), **errors(400)},
    )
    def get(self, request):
        # Validated here: the paginator would silently replace a bad limit with the default.
        self.ListParams(data=query_values(request.query_params)).is_valid(raise_exception=True)
        paginator = LimitOffsetPagination()
        buckets = selectors.bucket_list(tenant=request.auth.tenant, token=request.auth)
        page = paginator.paginate_queryset(buckets, request, view=self)
        return paginator.get_paginated_response(BucketOutput(page, many=True).data)

    @extend_schema(
        operation_id="buckets_create", request=CreateInput, responses={201: BucketOutput, **errors(409, *BODY)}
    )
    def post(self, request):
        if request.auth.bucket_id is not None:
            raise Forbidden("This token is restricted to one bucket and cannot create buckets.")
        refuse_agent_held(request.auth, "create a bucket")
        data = self.CreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        bucket = services.bucket_create(tenant=request.auth.tenant, actor=request_actor(request), **data.validated_data)
        return Response(BucketOutput(bucket).data, status=status.HTTP_201_CREATED)
