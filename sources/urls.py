from django.urls import path

from sources import apis

urlpatterns = [
    path("buckets/<str:bucket_id>/documents", apis.DocumentsApi.as_view(), name="bucket-documents"),
    path("buckets/<str:bucket_id>/conversations", apis.ConversationsApi.as_view(), name="bucket-conversations"),
    path("buckets/<str:bucket_id>/sources", apis.BucketSourcesApi.as_view(), name="bucket-sources"),
    path("sources/<str:source_id>", apis.SourceDetailApi.as_view(), name="source-detail"),
]
