from django.urls import path

from tenants import apis

urlpatterns = [
    path("buckets", apis.BucketListApi.as_view(), name="bucket-list"),
    path("buckets/<str:bucket_id>", apis.BucketDetailApi.as_view(), name="bucket-detail"),
    path("buckets/<str:bucket_id>/merge", apis.BucketMergeApi.as_view(), name="bucket-merge"),
]
