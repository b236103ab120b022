"""Tenant scoping shared by every tenant-owned table (infrastructure: no domain imports).

A tenant-owned row carries a ``tenant_id`` column, and a bucket-owned one ``bucket_id`` as
well. Reads reach such a table through :meth:`TenantScopedQuerySet.for_tenant` or
:meth:`BucketScopedQuerySet.for_bucket`, written once here rather than in every app, or
inside a tenant scope: ``as_manager()`` of these querysets is the tenant-scoped manager,
which refuses a query that names no tenant outside a scope (engram_site/scoping.py).
"""

from __future__ import annotations

from typing import Any, Protocol, Self

from django.db import models

from engram_site.scoping import TenantScopedManager, scoped_manager


class _Tenant(Protocol):
    pk: Any


class _Bucket(Protocol):
    pk: Any
    tenant_id: Any


class _Restriction(Protocol):
    def q(self, field: str = ...) -> models.Q: ...


class TenantScopedQuerySet(models.QuerySet):
    """A queryset over a table with a ``tenant_id`` column."""

    @classmethod
    def as_manager(cls) -> TenantScopedManager:  # type: ignore[override]
        # The model's default manager: narrowed to the tenant scope, refused without one.
        return scoped_manager(cls)

    as_manager.__func__.queryset_only = True  # type: ignore[attr-defined]

    def for_tenant(self, tenant: _Tenant) -> Self:
        return self.filter(tenant_id=tenant.pk)

    def visible_to(self, agents: _Restriction | None) -> Self:
        """The rows an agent-limited token may read (``agents``: its ``AgentRestriction``; None:
        every row). A model whose rows hold or reach memories says how in its ``agent_scope``
        (a classmethod from the restriction to a condition); other models are not narrowed."""
        scope = getattr(self.model, "agent_scope", None)
        if agents is None or scope is None:
            return self
        return self.filter(scope(agents))


class BucketScopedQuerySet(TenantScopedQuerySet):
    """A queryset over a table with ``tenant_id`` and ``bucket_id`` columns."""

    def for_bucket(self, bucket: _Bucket) -> Self:
        # tenant_id is repeated on purpose: every index that matters leads with it.
        return self.filter(tenant_id=bucket.tenant_id, bucket_id=bucket.pk)
