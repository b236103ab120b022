from django.urls import path

from webhooks import apis

urlpatterns = [
    path("webhooks", apis.WebhookListApi.as_view(), name="webhook-list"),
    path("webhooks/<str:webhook_id>", apis.WebhookDetailApi.as_view(), name="webhook-detail"),
    path("webhooks/<str:webhook_id>/secret", apis.WebhookSecretApi.as_view(), name="webhook-secret"),
    path("webhooks/<str:webhook_id>/deliveries", apis.WebhookDeliveriesApi.as_view(), name="webhook-deliveries"),
    path("webhook-deliveries/<str:delivery_id>/retry", apis.WebhookDeliveryRetryApi.as_view(), name="webhook-retry"),
]
