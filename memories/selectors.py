"""Reads of single memories and memory listings (search lives in memories/retrieval/)."""

from __future__ import annotations

from django.db.models import QuerySet

from engram_site.exceptions import NotFound
from memories import access
from memories.filters import MemoryFilters
from memories.models import PENDING_ENRICHMENT, Memory
from tenants.models import ApiToken, Bucket, Tenant
from tenants.selectors import parse_uuid, token_scoped


def memory_get(*, tenant: Tenant, memory_id, token: ApiToken | None = None, for_update: bool = False) -> Memory:
    """The tenant's memory, or NotFound — also for another tenant's memory, a malformed
    id, or a memory outside the token's bucket restriction."""
    pk = parse_uuid(memory_id)
    if pk is None:
        raise NotFound("Memory not found.")
    queryset = token_scoped(Memory.objects.filter(pk=pk), tenant=tenant, token=token).select_related("bucket")
    memory = access.with_pending(queryset.defer("embedding", "context_embedding")).first()
    if memory is None:
        raise NotFound("Memory not found.")
    return memory


def memory_list(*, bucket: Bucket, filters: MemoryFilters, pending: bool | None = None) -> QuerySet[Memory]:
    queryset = access.with_pending(Memory.objects.for_bucket(bucket).defer("embedding", "context_embedding"))
    queryset = queryset.filter(filters.q())
    if pending is True:
        queryset = queryset.filter(PENDING_ENRICHMENT)
    elif pending is False:
        queryset = queryset.exclude(PENDING_ENRICHMENT)
    return queryset


def memory_count(*, bucket: Bucket) -> int:
    """How many memories ``bucket`` holds (idx_memories_tenant_bucket)."""
    return Memory.objects.for_bucket(bucket).count()
