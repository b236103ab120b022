from django.urls import path

from memories import apis, bucket_apis, erasure_apis, failure_apis, feed_apis, lifecycle_apis, transfer_apis

urlpatterns = [
    path("buckets/<str:bucket_id>", bucket_apis.BucketDetailApi.as_view(), name="bucket-detail"),
    path("buckets/<str:bucket_id>/merge", bucket_apis.BucketMergeApi.as_view(), name="bucket-merge"),
    path("buckets/<str:bucket_id>/memories", apis.BucketMemoriesApi.as_view(), name="bucket-memories"),
    path("buckets/<str:bucket_id>/search", apis.SearchApi.as_view(), name="bucket-search"),
    path("buckets/<str:bucket_id>/deleted", lifecycle_apis.DeletedMemoriesApi.as_view(), name="bucket-deleted"),
    path(
        "buckets/<str:bucket_id>/enrichment-failures",
        failure_apis.EnrichmentFailuresApi.as_view(),
        name="bucket-enrichment-failures",
    ),
    path("buckets/<str:bucket_id>/events", feed_apis.BucketEventsApi.as_view(), name="bucket-events"),
    path("buckets/<str:bucket_id>/export", transfer_apis.BucketExportApi.as_view(), name="bucket-export"),
    path("buckets/<str:bucket_id>/import", transfer_apis.BucketImportApi.as_view(), name="bucket-import"),
    path("memories/<str:memory_id>", apis.MemoryDetailApi.as_view(), name="memory-detail"),
    path("memories/<str:memory_id>/history", lifecycle_apis.MemoryHistoryApi.as_view(), name="memory-history"),
    path("memories/<str:memory_id>/restore", lifecycle_apis.MemoryRestoreApi.as_view(), name="memory-restore"),
    path("erasure", erasure_apis.ErasureApi.as_view(), name="erasure"),
    path("search", apis.CrossSearchApi.as_view(), name="search"),
]
