from django.urls import path

from memories import apis, bucket_apis, erasure_apis

urlpatterns = [
    path("buckets/<str:bucket_id>", bucket_apis.BucketDetailApi.as_view(), name="bucket-detail"),
    path("buckets/<str:bucket_id>/merge", bucket_apis.BucketMergeApi.as_view(), name="bucket-merge"),
    path("buckets/<str:bucket_id>/memories", apis.BucketMemoriesApi.as_view(), name="bucket-memories"),
    path("buckets/<str:bucket_id>/search", apis.SearchApi.as_view(), name="bucket-search"),
    path("memories/<str:memory_id>", apis.MemoryDetailApi.as_view(), name="memory-detail"),
    path("erasure", erasure_apis.ErasureApi.as_view(), name="erasure"),
]
