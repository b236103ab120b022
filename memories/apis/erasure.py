"""POST /api/v1/erasure: erase every memory of a person's identifier, with everything kept about
them (memories.services.erasure). Admin scope."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.services import request_actor
from engram_site.fields import StrictBooleanField, StrictCharField, StrictSerializer
from engram_site.openapi import BODY, errors
from memories.models import Attribution
from memories.services import erasure
from tenants import selectors as tenant_selectors
from tenants.models import Scope


class ErasureIn(StrictSerializer):
    agent_id = StrictCharField(max_length=200, required=False)
    run_id = StrictCharField(max_length=200, required=False)
    attributed_to = serializers.ChoiceField(choices=Attribution.choices, required=False)
    source_actor_id = StrictCharField(max_length=200, required=False)
    # A string, not a UUIDField: a malformed id answers 404 like a missing bucket, as in paths.
    bucket_id = StrictCharField(
        max_length=64, required=False, help_text="only this bucket (default: every bucket the token reaches)"
    )
    dry_run = StrictBooleanField(default=False, help_text="only count: change nothing")

    def validate(self, data):
        if not any(name in data for name in erasure.ERASURE_FIELDS):
            raise serializers.ValidationError(f"Give at least one of {', '.join(erasure.ERASURE_FIELDS)}.")
        return data


class ErasureOut(serializers.Serializer):
    dry_run = serializers.BooleanField()
    bucket_id = serializers.UUIDField(allow_null=True, help_text="the one bucket erased in, or null: every bucket")
    memories = serializers.IntegerField()
    deleted_memories = serializers.IntegerField(help_text="deleted memories still restorable, now gone for good")
    versions = serializers.IntegerField(help_text="history entries of the erased memories")
    access_times = serializers.IntegerField()
    enrichment_failures = serializers.IntegerField(help_text="enrichment failure records of the erased memories")
    keys = serializers.IntegerField(help_text="key documents of the erased memories")
    feedback = serializers.IntegerField(
        help_text="ratings of the erased memories, and those the erased agent or run gave other memories"
    )
    contexts_cleared = serializers.IntegerField(help_text="other memories whose sequence context quoted an erased one")
    graph_mentions = serializers.IntegerField()
    graph_edges = serializers.IntegerField()
    graph_entities = serializers.IntegerField(help_text="entities nothing else names any more")
    sources = serializers.IntegerField(help_text="documents and conversations")
    source_chunks = serializers.IntegerField()
    duplicate_candidates = serializers.IntegerField()
    conflict_candidates = serializers.IntegerField(help_text="contradiction review pairs")
    blocks = serializers.IntegerField(help_text="the agent's memory blocks (an erasure by agent_id alone)")
    block_versions = serializers.IntegerField(help_text="their history entries")
    audit_events_scrubbed = serializers.IntegerField(help_text="audit events whose details quoted an erased memory")


class ErasureApi(APIView):
    """Hard-delete the tenant's memories matching every given field, and all that is kept about them."""

    required_scopes = {"POST": Scope.ADMIN}

    @extend_schema(operation_id="erasure_create", request=ErasureIn, responses={200: ErasureOut, **errors(404, *BODY)})
    def post(self, request):
        data = ErasureIn(data=request.data)
        data.is_valid(raise_exception=True)
        params, token = data.validated_data, request.auth
        # A token restricted to a bucket erases in that bucket: the others are not there for it.
        bucket_id = params.get("bucket_id") or token.bucket_id
        bucket = None
        if bucket_id is not None:
            bucket = tenant_selectors.bucket_get(tenant=token.tenant, bucket_id=bucket_id, token=token)
        report = erasure.memories_erase(
            tenant=token.tenant,
            fields={name: params[name] for name in erasure.ERASURE_FIELDS if name in params},
            bucket=bucket,
            dry_run=params["dry_run"],
            actor=request_actor(request),
        )
        return Response(ErasureOut(report.as_dict()).data)
