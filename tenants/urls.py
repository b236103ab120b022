from django.urls import path

from tenants import apis

urlpatterns = [
    path("buckets", apis.BucketListApi.as_view(), name="bucket-list"),
]
