from django.urls import path

from graph import apis

urlpatterns = [
    path("buckets/<str:bucket_id>/entities", apis.EntityListApi.as_view(), name="bucket-entities"),
    path(
        "buckets/<str:bucket_id>/entities/<str:entity_id>/profile",
        apis.EntityProfileApi.as_view(),
        name="entity-profile",
    ),
    path("buckets/<str:bucket_id>/profile", apis.NamedProfileApi.as_view(), name="bucket-profile"),
    path("buckets/<str:bucket_id>/edges", apis.EdgeListApi.as_view(), name="bucket-edges"),
    path("entities/<str:entity_id>", apis.EntityDetailApi.as_view(), name="entity-detail"),
    path("edges/<str:edge_id>/memories", apis.EdgeMemoriesApi.as_view(), name="edge-memories"),
]
