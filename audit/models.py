"""The audit log: who changed what, when, in which tenant, on which rows.

Events store the ids of the objects they mention, never foreign keys to them, so
an event outlives the memories, buckets and tokens it talks about (a delete is
audited precisely because the row is gone afterwards). The one exception is the
tenant: deleting a tenant deletes its events with it, in the database
(migration 0001), like everything else the tenant owns.
"""

from __future__ import annotations

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone

from engram_site.querysets import TenantScopedQuerySet


class ActorKind(models.TextChoices):
    OPERATOR = "operator", "operator"
    TOKEN = "token", "API token"
    SYSTEM = "system", "system"


class AuditEventQuerySet(TenantScopedQuerySet):
    pass


class AuditEvent(models.Model):
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    actor_kind = models.CharField(max_length=16, choices=ActorKind.choices)
    # Operators: the user's id and username. Tokens: the token's id and its clear-text
    # prefix (what operators see in the token list). System: a job or command name.
    actor_id = models.CharField(max_length=64, blank=True, default="")
    actor_label = models.CharField(max_length=200, blank=True, default="")
    # NULL for events outside any tenant (an operator deleting a tenant, system events).
    # The constraint (ON DELETE CASCADE) is declared in the database by migration 0001.
    # Named, not imported: audit sits below tenants in the layers (docs/ARCHITECTURE.md).
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False,
        related_name="+",
    )  # fmt: skip
    # "<object type>.<verb>": memory.create, bucket.merge, duplicate.keep_both, token.revoke, ...
    action = models.CharField(max_length=64)
    object_type = models.CharField(max_length=64)
    # The first OBJECT_IDS_MAX ids (a 1,000-memory batch is one event); object_count is the total.
    object_ids = models.JSONField(default=list, blank=True, encoder=DjangoJSONEncoder)
    object_count = models.PositiveIntegerField(default=0)
    details = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    request_id = models.CharField(max_length=100, blank=True, default="")
    ip_address = models.GenericIPAddressField(null=True, blank=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        db_table = "audit_events"
        ordering = ["-created_at", "-id"]
        indexes = [
            # The log of one tenant, newest first: WHERE tenant_id = ? ORDER BY created_at DESC
            # (also serves the tenant cascade).
            models.Index(fields=["tenant", "-created_at"], name="audit_tenant_time"),
            # One kind of change in a tenant: WHERE tenant_id = ? AND action = ? ORDER BY created_at DESC.
            models.Index(fields=["tenant", "action", "-created_at"], name="audit_tenant_action_time"),
            # The unfiltered log and the date drill-down: ORDER BY created_at DESC.
            models.Index(fields=["-created_at"], name="audit_time"),
            # What one operator or token did: WHERE actor_kind = ? AND actor_id = ? ORDER BY created_at DESC.
            models.Index(fields=["actor_kind", "actor_id", "-created_at"], name="audit_actor_time"),
        ]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action}"

    @property
    def actor(self) -> str:
        return f"{self.actor_kind}:{self.actor_label or self.actor_id or '?'}"
