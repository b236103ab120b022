"""Bucket endpoints: /api/v1/buckets[/{bucket_id}]."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.services import audit_record, request_actor
from engram_site.exceptions import Forbidden
from engram_site.fields import StrictBooleanField, StrictCharField, StrictSerializer
from engram_site.openapi import BODY, errors, limit_offset_page
from engram_site.pagination import LimitOffsetPagination, offset_field, page_size_field
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
        self.ListParams(data=request.query_params.dict()).is_valid(raise_exception=True)
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
        data = self.CreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        bucket = services.bucket_create(tenant=request.auth.tenant, **data.validated_data)
        audit_record(actor=request_actor(request), action="bucket.create", tenant=bucket.tenant, object_type="bucket", object_ids=[bucket.pk], details={"name": bucket.name})  # fmt: skip  # noqa: E501
        return Response(BucketOutput(bucket).data, status=status.HTTP_201_CREATED)


class BucketDetailApi(APIView):
    # Deleting a bucket deletes every memory in it: admin scope only.
    required_scopes = {"DELETE": Scope.ADMIN}

    @extend_schema_serializer(component_name="BucketUpdate")
    class UpdateInput(StrictSerializer):
        name = StrictCharField(max_length=BUCKET_NAME_MAX, required=False)
        description = StrictCharField(required=False, allow_blank=True, max_length=10_000)

    def _bucket(self, request, bucket_id):
        return selectors.bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)

    @extend_schema(operation_id="buckets_retrieve", responses={200: BucketDetailOutput, **errors(404)})
    def get(self, request, bucket_id):
        bucket = self._bucket(request, bucket_id)
        bucket.memory_count = Memory.objects.for_bucket(bucket).count()
        return Response(BucketDetailOutput(bucket).data)

    @extend_schema(
        operation_id="buckets_update",
        request=UpdateInput,
        responses={200: BucketOutput, **errors(404, 409, *BODY)},
        description='The bucket as GET returns it; a token without the read scope gets only {"id": ...}.',
    )
    def patch(self, request, bucket_id):
        bucket = self._bucket(request, bucket_id)
        data = self.UpdateInput(data=request.data)
        data.is_valid(raise_exception=True)
        bucket = services.bucket_update(bucket=bucket, **data.validated_data)
        audit_record(actor=request_actor(request), action="bucket.update", tenant=bucket.tenant, object_type="bucket", object_ids=[bucket.pk], details={"fields": sorted(data.validated_data)})  # fmt: skip  # noqa: E501
        if not request.auth.has_scope(Scope.READ):
            return Response({"id": str(bucket.pk)})  # a write-only token cannot GET the bucket either
        return Response(BucketOutput(bucket).data)

    @extend_schema(operation_id="buckets_destroy", responses={204: None, **errors(404)})
    def delete(self, request, bucket_id):
        bucket = self._bucket(request, bucket_id)
        services.bucket_delete(bucket=bucket)
        audit_record(actor=request_actor(request), action="bucket.delete", tenant=bucket.tenant, object_type="bucket", object_ids=[selectors.parse_uuid(bucket_id)], details={"name": bucket.name})  # fmt: skip  # noqa: E501
        return Response(status=status.HTTP_204_NO_CONTENT)


class BucketMergeIn(StrictSerializer):
    # A string, not a UUIDField: a malformed id answers 404 like a missing bucket, as in paths.
    target_bucket_id = StrictCharField(max_length=64)
    remove_source = StrictBooleanField(default=False, help_text="delete the source afterwards (else left empty)")
    dry_run = StrictBooleanField(default=False, help_text="only preview: change nothing")


class BucketMergeOut(serializers.Serializer):
    dry_run = serializers.BooleanField()
    source_id = serializers.UUIDField()
    target_id = serializers.UUIDField()
    memories = serializers.IntegerField(help_text="memories in the source")
    memories_to_move = serializers.IntegerField()
    memories_to_dedup = serializers.IntegerField(help_text="same text as a target memory: absorbed by it")
    entities = serializers.IntegerField()
    entities_to_merge = serializers.IntegerField()
    duplicate_candidates = serializers.IntegerField()
    tokens_to_repoint = serializers.IntegerField()
    sources = serializers.IntegerField()
    sources_to_dedup = serializers.IntegerField()
    moved = serializers.IntegerField(required=False)
    deduplicated = serializers.IntegerField(required=False)
    entities_merged = serializers.IntegerField(required=False)
    source_removed = serializers.BooleanField(required=False)


class BucketMergeApi(APIView):
    """Merge this bucket (the source) into another bucket of the tenant: admin scope."""

    required_scopes = {"POST": Scope.ADMIN}

    @extend_schema(
        operation_id="buckets_merge", request=BucketMergeIn, responses={200: BucketMergeOut, **errors(404, *BODY)}
    )
    def post(self, request, bucket_id):
        source = selectors.bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        data = BucketMergeIn(data=request.data)
        data.is_valid(raise_exception=True)
        # Another tenant's bucket, like a missing one, is 404.
        target = selectors.bucket_get(
            tenant=request.auth.tenant, bucket_id=data.validated_data["target_bucket_id"], token=request.auth
        )
        if data.validated_data["dry_run"]:
            plan = services.bucket_merge_preview(source=source, target=target)
            return Response(BucketMergeOut({"dry_run": True, **plan.as_dict()}).data)
        result = services.bucket_merge(
            source=source,
            target=target,
            remove_source=data.validated_data["remove_source"],
            actor=request_actor(request),
        )
        return Response(BucketMergeOut({"dry_run": False, **result.as_dict()}).data)
