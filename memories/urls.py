from django.urls import path

from memories import apis, bucket_apis, transfer_apis

urlpatterns = [
    path("buckets/<str:bucket_id>", bucket_apis.BucketDetailApi.as_view(), name="bucket-detail"),
    path("buckets/<str:bucket_id>/merge", bucket_apis.BucketMergeApi.as_view(), name="bucket-merge"),
    path("buckets/<str:bucket_id>/memories", apis.BucketMemoriesApi.as_view(), name="bucket-memories"),
    path("buckets/<str:bucket_id>/search", apis.SearchApi.as_view(), name="bucket-search"),
    path("buckets/<str:bucket_id>/export", transfer_apis.BucketExportApi.as_view(), name="bucket-export"),
    path("buckets/<str:bucket_id>/import", transfer_apis.BucketImportApi.as_view(), name="bucket-import"),
    path("memories/<str:memory_id>", apis.MemoryDetailApi.as_view(), name="memory-detail"),
]
