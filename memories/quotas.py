"""The ``max_memories`` quota: a tenant's live memories, counted cheaply.

``count(*)`` over a tenant's rows on every write would cost tens of milliseconds at a
million rows, so the count is kept in the ``default`` cache for ``COUNT_SECONDS`` and this
process's own writes are added to it as they commit. Another process's writes and any
deletes are seen when the cached count expires: concurrent writers in several processes
can overshoot the limit by what they write within those seconds (never by more than one
batch per writer per request), and a tenant that just deleted memories may be refused for
those seconds. The other quotas are in tenants/quotas.py.
"""

from __future__ import annotations

import contextlib

from django.core.cache import cache

from memories.models import Memory
from tenants.models import Tenant
from tenants.quotas import quota_check_size, quota_limit

COUNT_SECONDS = 10


def _key(tenant_id) -> str:
    return f"quota-memories:{tenant_id}"


def tenant_memory_count(*, tenant: Tenant) -> int:
    """The tenant's live memories, at most ``COUNT_SECONDS`` old (plus this process's writes)."""
    count = cache.get(_key(tenant.pk))
    if count is None:
        count = Memory.objects.filter(tenant_id=tenant.pk).count()
        cache.set(_key(tenant.pk), count, COUNT_SECONDS)
    return count


def note_written(*, tenant_id, count: int) -> None:
    """Add committed new memories to the cached count (when one is cached)."""
    with contextlib.suppress(ValueError):  # not cached: the next check counts
        cache.incr(_key(tenant_id), count)


def quota_check_memories(*, tenant: Tenant, incoming: int) -> None:
    """403 ``quota_memories`` when the tenant's memories plus ``incoming`` would pass its
    ``max_memories`` (deduplicated items count as incoming: checked before the write)."""
    if quota_limit(tenant, "max_memories") is None:
        return
    asked = tenant_memory_count(tenant=tenant) + incoming
    quota_check_size(tenant=tenant, name="max_memories", asked=asked, refusal="memories")
