"""The bucket endpoints: /api/v1/buckets (list, create), /api/v1/buckets/{bucket_id} (GET with
its memory count and the rows waiting for enrichment, PATCH, DELETE with every memory) and
/api/v1/buckets/{bucket_id}/merge. The writes are memories.services.buckets."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.services import request_actor
from engram_site.exceptions import Forbidden
from engram_site.fields import (
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
    query_values,
)
from engram_site.openapi import BODY, errors, limit_offset_page
from engram_site.pagination import list_response, offset_field, page_size_field
from memories import selectors
from memories.services import buckets, pending_enrichment_count
from memories.services.embedding_switch import embedding_switch_status
from tenants import selectors as tenant_selectors
from tenants.agents import refuse_agent_held
from tenants.models import BUCKET_NAME_MAX, MAX_RETENTION_DAYS, Scope


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
        buckets = tenant_selectors.bucket_list(tenant=request.auth.tenant, token=request.auth)
        return list_response(request, self, buckets, BucketOutput)

    @extend_schema(
        operation_id="buckets_create", request=CreateInput, responses={201: BucketOutput, **errors(409, *BODY)}
    )
    def post(self, request):
        if request.auth.bucket_id is not None:
            raise Forbidden("This token is restricted to one bucket and cannot create buckets.")
        refuse_agent_held(request.auth, "create a bucket")
        data = self.CreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        bucket = buckets.bucket_create(tenant=request.auth.tenant, actor=request_actor(request), **data.validated_data)
        return Response(BucketOutput(bucket).data, status=status.HTTP_201_CREATED)


class EmbeddingSwitchOutput(serializers.Serializer):
    model = serializers.CharField(help_text="the model the bucket is being switched to")
    staged = serializers.IntegerField(help_text="memories re-embedded by it so far")
    memories = serializers.IntegerField(help_text="memories in the bucket")


class BucketDetailOutput(BucketOutput):
    memory_count = serializers.IntegerField()
    pending_enrichment = serializers.IntegerField(
        help_text="memories still waiting for their vectors or lemmas (after an import without vectors, say)"
    )
    embedding_model = serializers.CharField(help_text="the embedding model of the bucket's vectors and searches")
    embedding_switch = EmbeddingSwitchOutput(
        allow_null=True, help_text="the switch to another embedding model in progress, or null"
    )


class BucketDetailApi(APIView):
    # Deleting a bucket deletes every memory in it: admin scope only.
    required_scopes = {"DELETE": Scope.ADMIN}

    @extend_schema_serializer(component_name="BucketUpdate")
    class UpdateInput(StrictSerializer):
        name = StrictCharField(max_length=BUCKET_NAME_MAX, required=False)
        description = StrictCharField(required=False, allow_blank=True, max_length=10_000)
        retention_days = StrictIntegerField(min_value=0, max_value=MAX_RETENTION_DAYS, required=False)

    def _bucket(self, request, bucket_id):
        return tenant_selectors.bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)

    @extend_schema(
        operation_id="buckets_retrieve",
        responses={200: BucketDetailOutput, **errors(404)},
        description="The bucket, with counts of the memories the token may read (of its agents' only, for a token "
        "held to agents).",
    )
    def get(self, request, bucket_id):
        bucket = self._bucket(request, bucket_id)
        # Counts of what the token may read: a token held to agents learns nothing of the others'.
        bucket.memory_count = selectors.memory_count(bucket=bucket, agents=request.auth.agents)
        bucket.pending_enrichment = pending_enrichment_count(bucket=bucket, agents=request.auth.agents)
        bucket.embedding_switch = None
        if bucket.embedding_model_next:
            switch = embedding_switch_status(bucket=bucket)
            bucket.embedding_switch = {"model": switch.next_model, "staged": switch.staged, "memories": switch.memories}
        return Response(BucketDetailOutput(bucket).data)

    @extend_schema(
        operation_id="buckets_update",
        request=UpdateInput,
        responses={200: BucketOutput, **errors(404, 409, *BODY)},
        description=(
            'The bucket as GET returns it; a token without the read scope gets only {"id": ...}. A token held to '
            "agents cannot change a bucket (403 agent_forbidden): every agent's memories live in it."
        ),
    )
    def patch(self, request, bucket_id):
        bucket = self._bucket(request, bucket_id)
        refuse_agent_held(request.auth, "change a bucket")
        data = self.UpdateInput(data=request.data)
        data.is_valid(raise_exception=True)
        bucket = buckets.bucket_update(bucket=bucket, actor=request_actor(request), **data.validated_data)
        if not request.auth.has_scope(Scope.READ):
            return Response({"id": str(bucket.pk)})  # a write-only token cannot GET the bucket either
        return Response(BucketOutput(bucket).data)

    @extend_schema(operation_id="buckets_destroy", responses={204: None, **errors(404)})
    def delete(self, request, bucket_id):
        bucket = self._bucket(request, bucket_id)
        buckets.bucket_delete(bucket=bucket, actor=request_actor(request))
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
        source = tenant_selectors.bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        data = BucketMergeIn(data=request.data)
        data.is_valid(raise_exception=True)
        # Another tenant's bucket, like a missing one, is 404.
        target = tenant_selectors.bucket_get(
            tenant=request.auth.tenant, bucket_id=data.validated_data["target_bucket_id"], token=request.auth
        )
        if data.validated_data["dry_run"]:
            plan = buckets.bucket_merge_preview(source=source, target=target)
            return Response(BucketMergeOut({"dry_run": True, **plan.as_dict()}).data)
        result = buckets.bucket_merge(
            source=source,
            target=target,
            remove_source=data.validated_data["remove_source"],
            actor=request_actor(request),
        )
        return Response(BucketMergeOut({"dry_run": False, **result.as_dict()}).data)
