"""Bucket endpoints: /api/v1/buckets[/{bucket_id}]."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.response import Response
from rest_framework.views import APIView

from engram_site.exceptions import Forbidden
from engram_site.fields import StrictCharField
from memories.models import Memory
from tenants import selectors, services
from tenants.models import Scope
from tenants.services import BUCKET_NAME_MAX


class BucketOutput(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    description = serializers.CharField()
    created_at = serializers.DateTimeField()


class BucketDetailOutput(BucketOutput):
    memory_count = serializers.IntegerField()


class BucketPagination(LimitOffsetPagination):
    default_limit = 50
    max_limit = 500


class BucketListApi(APIView):
    class CreateInput(serializers.Serializer):
        name = StrictCharField(max_length=BUCKET_NAME_MAX)
        description = StrictCharField(required=False, allow_blank=True, max_length=10_000, default="")

    @extend_schema(operation_id="buckets_list", responses=BucketOutput(many=True))
    def get(self, request):
        paginator = BucketPagination()
        buckets = selectors.bucket_list(tenant=request.auth.tenant, token=request.auth)
        page = paginator.paginate_queryset(buckets, request, view=self)
        return paginator.get_paginated_response(BucketOutput(page, many=True).data)

    @extend_schema(operation_id="buckets_create", request=CreateInput, responses={201: BucketOutput})
    def post(self, request):
        if request.auth.bucket_id is not None:
            raise Forbidden("This token is restricted to one bucket and cannot create buckets.")
        data = self.CreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        bucket = services.bucket_create(tenant=request.auth.tenant, **data.validated_data)
        return Response(BucketOutput(bucket).data, status=status.HTTP_201_CREATED)


class BucketDetailApi(APIView):
    # Deleting a bucket deletes every memory in it: admin scope only.
    required_scopes = {"DELETE": Scope.ADMIN}

    class UpdateInput(serializers.Serializer):
        name = StrictCharField(max_length=BUCKET_NAME_MAX, required=False)
        description = StrictCharField(required=False, allow_blank=True, max_length=10_000)

    def _bucket(self, request, bucket_id):
        return selectors.bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)

    @extend_schema(operation_id="buckets_retrieve", responses=BucketDetailOutput)
    def get(self, request, bucket_id):
        bucket = self._bucket(request, bucket_id)
        bucket.memory_count = Memory.objects.for_bucket(bucket).count()
        return Response(BucketDetailOutput(bucket).data)

    @extend_schema(operation_id="buckets_update", request=UpdateInput, responses=BucketOutput)
    def patch(self, request, bucket_id):
        bucket = self._bucket(request, bucket_id)
        data = self.UpdateInput(data=request.data)
        data.is_valid(raise_exception=True)
        bucket = services.bucket_update(bucket=bucket, **data.validated_data)
        return Response(BucketOutput(bucket).data)

    @extend_schema(operation_id="buckets_destroy", responses={204: None})
    def delete(self, request, bucket_id):
        bucket = self._bucket(request, bucket_id)
        services.bucket_delete(bucket=bucket)
        return Response(status=status.HTTP_204_NO_CONTENT)
