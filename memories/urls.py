from django.urls import path

from memories.apis import (
    blocks,
    buckets,
    erasure,
    failures,
    feed,
    feedback,
    learned,
    lifecycle,
    memories,
    search,
    transfer,
)

urlpatterns = [
    path("buckets", buckets.BucketListApi.as_view(), name="bucket-list"),
    path("buckets/<str:bucket_id>", buckets.BucketDetailApi.as_view(), name="bucket-detail"),
    path("buckets/<str:bucket_id>/merge", buckets.BucketMergeApi.as_view(), name="bucket-merge"),
    path("buckets/<str:bucket_id>/memories", memories.BucketMemoriesApi.as_view(), name="bucket-memories"),
    path("buckets/<str:bucket_id>/blocks", blocks.BlockListApi.as_view(), name="bucket-blocks"),
    path("buckets/<str:bucket_id>/blocks/<str:label>", blocks.BlockDetailApi.as_view(), name="block-detail"),
    path("buckets/<str:bucket_id>/blocks/<str:label>/history", blocks.BlockHistoryApi.as_view(), name="block-history"),
    path("buckets/<str:bucket_id>/search", search.SearchApi.as_view(), name="bucket-search"),
    path("buckets/<str:bucket_id>/deleted", lifecycle.DeletedMemoriesApi.as_view(), name="bucket-deleted"),
    path(
        "buckets/<str:bucket_id>/enrichment-failures",
        failures.EnrichmentFailuresApi.as_view(),
        name="bucket-enrichment-failures",
    ),
    path("buckets/<str:bucket_id>/events", feed.BucketEventsApi.as_view(), name="bucket-events"),
    path("buckets/<str:bucket_id>/learned-ranking", learned.LearnedRankingApi.as_view(), name="bucket-learned-ranking"),
    path("buckets/<str:bucket_id>/export", transfer.BucketExportApi.as_view(), name="bucket-export"),
    path("buckets/<str:bucket_id>/import", transfer.BucketImportApi.as_view(), name="bucket-import"),
    path("memories/<str:memory_id>", memories.MemoryDetailApi.as_view(), name="memory-detail"),
    path("memories/<str:memory_id>/history", lifecycle.MemoryHistoryApi.as_view(), name="memory-history"),
    path("memories/<str:memory_id>/feedback", feedback.MemoryFeedbackApi.as_view(), name="memory-feedback"),
    path("memories/<str:memory_id>/restore", lifecycle.MemoryRestoreApi.as_view(), name="memory-restore"),
    path("erasure", erasure.ErasureApi.as_view(), name="erasure"),
    path("search", search.CrossSearchApi.as_view(), name="search"),
]
