from django.urls import path

from maintenance import apis

urlpatterns = [
    path("buckets/<str:bucket_id>/conflicts", apis.ConflictListApi.as_view(), name="bucket-conflicts"),
    path(
        "buckets/<str:bucket_id>/conflicts/<str:conflict_id>/resolve",
        apis.ConflictResolveApi.as_view(),
        name="bucket-conflict-resolve",
    ),
    path(
        "buckets/<str:bucket_id>/conflicts/<str:conflict_id>/undo",
        apis.ConflictUndoApi.as_view(),
        name="bucket-conflict-undo",
    ),
]
