from django.urls import path

from graph import apis, correction_apis

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
    # Operators' corrections (admin scope): graph/correction_apis.py.
    path("entities/<str:entity_id>/rename", correction_apis.EntityRenameApi.as_view(), name="entity-rename"),
    path("entities/<str:entity_id>/merge", correction_apis.EntityMergeApi.as_view(), name="entity-merge"),
    path("entities/<str:entity_id>/split", correction_apis.EntitySplitApi.as_view(), name="entity-split"),
    path("entities/<str:entity_id>/aliases", correction_apis.EntityAliasAddApi.as_view(), name="entity-alias-add"),
    path(
        "entities/<str:entity_id>/aliases/remove",
        correction_apis.EntityAliasRemoveApi.as_view(),
        name="entity-alias-remove",
    ),
    path("edges/<str:edge_id>", correction_apis.EdgeDeleteApi.as_view(), name="edge-detail"),
    path("edges/<str:edge_id>/fix", correction_apis.EdgeFixApi.as_view(), name="edge-fix"),
]
