"""/api/v1/webhooks: a tenant's webhook subscriptions and their deliveries. Admin scope, and a
token of the whole tenant (a subscription receives every bucket's events)."""

from __future__ import annotations

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.services import request_actor
from engram_site.exceptions import Forbidden
from engram_site.fields import StrictBooleanField, StrictCharField, StrictSerializer, query_values
from engram_site.openapi import BODY, errors, limit_offset_page
from engram_site.pagination import list_response, offset_field, page_size_field
from memories.models import EventKind
from tenants.models import Scope
from webhooks import selectors, services
from webhooks.models import DeliveryStatus

ALL = {method: Scope.ADMIN for method in ("GET", "POST", "PATCH", "DELETE")}


def _whole_tenant(request) -> None:
    """Listing and creating need a token of the whole tenant (a bucket-restricted token finds no
    single webhook either: the selectors answer 404)."""
    if request.auth.bucket_id is not None:
        raise Forbidden("This token is restricted to one bucket; webhooks receive every bucket's events.")


# What the schema promises of a URL (the service checks the rest: host, addresses).
URL_SHAPE = RegexValidator(
    r"^https?://[A-Za-z0-9.:\[\]-]+(/[!-~]*)?$",
    "Give an http:// or https:// URL: an ASCII host (or [IPv6]), an optional :port and /path.",
    code="invalid_url",
)


def _url_field(**kwargs) -> StrictCharField:
    return StrictCharField(max_length=2000, validators=[URL_SHAPE], **kwargs)


class WebhookOut(serializers.Serializer):
    id = serializers.UUIDField()
    url = serializers.CharField()
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=EventKind.choices), help_text="kinds sent; empty: every kind"
    )
    description = serializers.CharField()
    is_active = serializers.BooleanField(help_text="false: paused (events still queue up as deliveries)")
    created_at = serializers.DateTimeField()


class WebhookWithSecretOut(WebhookOut):
    secret = serializers.CharField(help_text="the signing key: shown only here, keep it (docs/API.md)")


class _Events(serializers.ListField):
    child = serializers.ChoiceField(choices=EventKind.choices)


class WebhookListApi(APIView):
    required_scopes = ALL

    class ListParams(StrictSerializer):
        limit = page_size_field()
        offset = offset_field()

    @extend_schema_serializer(component_name="WebhookCreate")
    class CreateIn(StrictSerializer):
        url = _url_field(help_text="http(s); private addresses need ENGRAM_WEBHOOKS_ALLOW_PRIVATE")
        events = _Events(required=False, max_length=len(EventKind.values), help_text="default: every kind")
        description = StrictCharField(max_length=200, required=False, allow_blank=True, default="")

    @extend_schema(
        operation_id="webhooks_list",
        parameters=[ListParams],
        responses={200: limit_offset_page("WebhookPage", WebhookOut(many=True)), **errors(400)},
    )
    def get(self, request):
        _whole_tenant(request)
        self.ListParams(data=query_values(request.query_params)).is_valid(raise_exception=True)
        return list_response(request, self, selectors.subscription_list(tenant=request.auth.tenant), WebhookOut)

    @extend_schema(
        operation_id="webhooks_create",
        request=CreateIn,
        responses={201: WebhookWithSecretOut, **errors(*BODY)},
        description=(
            "Subscribe a URL to the tenant's change feed (every bucket) from now on. The answer holds the "
            "signing secret, shown only this once. 400 invalid_url for a URL that is not http(s) or names a "
            "private address (unless ENGRAM_WEBHOOKS_ALLOW_PRIVATE)."
        ),
    )
    def post(self, request):
        _whole_tenant(request)
        data = self.CreateIn(data=request.data)
        data.is_valid(raise_exception=True)
        subscription = services.subscription_create(
            tenant=request.auth.tenant, actor=request_actor(request), **data.validated_data
        )
        return Response(WebhookWithSecretOut(subscription).data, status=status.HTTP_201_CREATED)


class WebhookDetailApi(APIView):
    required_scopes = ALL

    @extend_schema_serializer(component_name="WebhookUpdate")
    class UpdateIn(StrictSerializer):
        url = _url_field(required=False)
        events = _Events(required=False, max_length=len(EventKind.values))
        description = StrictCharField(max_length=200, required=False, allow_blank=True)
        is_active = StrictBooleanField(required=False)

    @extend_schema(operation_id="webhooks_get", responses={200: WebhookOut, **errors(404)})
    def get(self, request, webhook_id):
        return Response(
            WebhookOut(
                selectors.subscription_get(tenant=request.auth.tenant, webhook_id=webhook_id, token=request.auth)
            ).data
        )

    @extend_schema(operation_id="webhooks_update", request=UpdateIn, responses={200: WebhookOut, **errors(404, *BODY)})
    def patch(self, request, webhook_id):
        subscription = selectors.subscription_get(tenant=request.auth.tenant, webhook_id=webhook_id, token=request.auth)
        data = self.UpdateIn(data=request.data)
        data.is_valid(raise_exception=True)
        subscription = services.subscription_update(
            subscription=subscription, actor=request_actor(request), **data.validated_data
        )
        return Response(WebhookOut(subscription).data)

    @extend_schema(operation_id="webhooks_delete", responses={204: None, **errors(404)})
    def delete(self, request, webhook_id):
        subscription = selectors.subscription_get(tenant=request.auth.tenant, webhook_id=webhook_id, token=request.auth)
        services.subscription_delete(subscription=subscription, actor=request_actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookSecretApi(APIView):
    required_scopes = ALL

    @extend_schema(
        operation_id="webhooks_rotate_secret",
        request=None,
        responses={200: WebhookWithSecretOut, **errors(404)},
        description="Replace the signing secret; the new one is in the answer, shown only this once.",
    )
    def post(self, request, webhook_id):
        subscription = selectors.subscription_get(tenant=request.auth.tenant, webhook_id=webhook_id, token=request.auth)
        services.subscription_rotate_secret(subscription=subscription, actor=request_actor(request))
        return Response(WebhookWithSecretOut(subscription).data)


class AttemptOut(serializers.Serializer):
    number = serializers.IntegerField()
    at = serializers.DateTimeField()
    status_code = serializers.IntegerField(allow_null=True, help_text="null: no HTTP answer (see error)")
    error = serializers.CharField(help_text="empty for a 2xx answer")
    duration_ms = serializers.IntegerField()


class DeliveryOut(serializers.Serializer):
    id = serializers.IntegerField()
    event_id = serializers.IntegerField()
    event_kind = serializers.ChoiceField(choices=EventKind.choices)
    status = serializers.ChoiceField(choices=DeliveryStatus.choices)
    attempts = serializers.IntegerField()
    next_attempt_at = serializers.DateTimeField(allow_null=True)
    last_status_code = serializers.IntegerField(allow_null=True)
    last_error = serializers.CharField()
    created_at = serializers.DateTimeField()
    delivered_at = serializers.DateTimeField(allow_null=True)
    attempt_list = AttemptOut(source="attempt_rows.all", many=True, help_text="every attempt, oldest first")


class WebhookDeliveriesApi(APIView):
    required_scopes = ALL

    class Params(StrictSerializer):
        limit = page_size_field()
        offset = offset_field()
        status = serializers.ChoiceField(choices=DeliveryStatus.choices, required=False)

    @extend_schema(
        operation_id="webhooks_deliveries",
        parameters=[Params],
        responses={200: limit_offset_page("WebhookDeliveryPage", DeliveryOut(many=True)), **errors(400, 404)},
        description="The subscription's deliveries, newest first, each with every attempt.",
    )
    def get(self, request, webhook_id):
        subscription = selectors.subscription_get(tenant=request.auth.tenant, webhook_id=webhook_id, token=request.auth)
        params = self.Params(data=query_values(request.query_params))
        params.is_valid(raise_exception=True)
        deliveries = selectors.delivery_list(subscription=subscription, status=params.validated_data.get("status"))
        return list_response(request, self, deliveries, DeliveryOut)


class WebhookDeliveryRetryApi(APIView):
    required_scopes = ALL

    @extend_schema(
        operation_id="webhooks_delivery_retry",
        request=None,
        responses={200: DeliveryOut, **errors(404)},
        description="Send a delivery again at the worker's next run, with a fresh count of attempts.",
    )
    def post(self, request, delivery_id):
        delivery = selectors.delivery_get(tenant=request.auth.tenant, delivery_id=delivery_id, token=request.auth)
        delivery = services.delivery_retry(delivery=delivery, actor=request_actor(request))
        return Response(DeliveryOut(delivery).data)
