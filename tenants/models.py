"""Tenants, their buckets and their API tokens."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.functions import RandomUUID
from django.core.validators import MaxValueValidator
from django.db import models
from django.db.models.functions import Lower
from django.utils import timezone

from engram_site.db import TransactionNow
from engram_site.querysets import TenantScopedQuerySet


class TenantSettings:
    """Per-tenant settings stored in ``Tenant.settings`` with their defaults.

    Unknown keys are kept (forward compatible); readers go through ``get`` so a
    missing key always means the documented default.
    """

    DEFAULTS: dict = {
        # Asynchronous scope/topic classification (seed 000: costs money on long-tail tenants).
        "classification_enabled": True,
        # Retrieval defaults, overridable per request (see docs/RETRIEVAL.md).
        "retrieval": {},
        # Limits set in the console (tenants/quotas.py); a missing key means no limit.
        "quotas": {},
    }


class Tenant(models.Model):
    id = models.UUIDField(primary_key=True, db_default=RandomUUID(), editable=False)
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=100, unique=True)
    is_active = models.BooleanField(default=True, help_text="Inactive tenants' tokens are refused.")
    settings = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(db_default=TransactionNow(), editable=False)

    class Meta:
        db_table = "tenants"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def setting(self, key: str):
        value = (self.settings or {}).get(key)
        return TenantSettings.DEFAULTS.get(key) if value is None else value

    @property
    def classification_enabled(self) -> bool:
        return bool(self.setting("classification_enabled"))


DEFAULT_RETENTION_DAYS = 30
MAX_RETENTION_DAYS = 3650
BUCKET_NAME_MAX = 200


class BucketQuerySet(TenantScopedQuerySet):
    def named(self, name: str) -> BucketQuerySet:
        """Buckets called ``name`` regardless of case, compared as the unique index compares
        names: ``lower(name) = lower(%s)`` (PostgreSQL's lower(), so the same rule everywhere)."""
        return self.alias(name_key=Lower("name")).filter(name_key=Lower(models.Value(name)))


class Bucket(models.Model):
    """The user-facing namespace inside a tenant: a project, an agent, a user's memory space."""

    id = models.UUIDField(primary_key=True, db_default=RandomUUID(), editable=False)
    # The FK constraint is created by migration 0002 with ON DELETE CASCADE in the
    # database: deleting a tenant must not make Django load every row it owns.
    # (The unique (tenant, lower(name)) index serves lookups by tenant.)
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="buckets"
    )
    name = models.CharField(max_length=BUCKET_NAME_MAX)
    description = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(db_default=TransactionNow(), editable=False)
    # How long a deleted memory stays restorable, and an expired one visible with
    # include_expired, before the purge job removes it.
    retention_days = models.PositiveIntegerField(
        default=DEFAULT_RETENTION_DAYS,
        db_default=DEFAULT_RETENTION_DAYS,
        validators=[MaxValueValidator(MAX_RETENTION_DAYS)],
        help_text="Days a deleted memory can be restored (and an expired one still listed) before it is purged.",
    )

    # The embedding model whose vectors this bucket's memories hold and whose vectors its
    # searches compare (engram_site.providers.embedding.MODELS). It changes only in the one transaction
    # that swaps in the vectors of a finished switch (memories.services.embedding_switch).
    embedding_model = models.CharField(
        max_length=64, default="all-MiniLM-L6-v2", db_default="all-MiniLM-L6-v2", editable=False
    )
    # The model a switch in progress is re-embedding the bucket with ("" when none).
    embedding_model_next = models.CharField(max_length=64, blank=True, default="", db_default="", editable=False)

    objects = BucketQuerySet.as_manager()

    class Meta:
        db_table = "buckets"
        ordering = ["name"]
        constraints = [
            # One name per bucket in a tenant regardless of case ("Team" and "team" clash), as
            # lower() sees it. Serves BucketQuerySet.named: WHERE tenant_id = ? AND lower(name) =
            # lower(?), and the tenant's cascade. Migration 0004 renamed clashing names first.
            models.UniqueConstraint(
                models.F("tenant"),
                Lower("name"),
                name="buckets_tenant_name_ci_unique",
            )
        ]

    def __str__(self) -> str:
        return self.name


class Scope(models.TextChoices):
    READ = "read", "read"
    WRITE = "write", "write"
    ADMIN = "admin", "admin"


TOKEN_PREFIX = "egm_"


def hash_token(raw: str) -> str:
    # Tokens carry 256 bits of randomness, so a fast hash is enough: there is
    # nothing to brute-force that a slow KDF would protect.
    return hashlib.sha256(raw.encode()).hexdigest()


MAX_TOKEN_AGENTS = 50
MAX_AGENT_ID_CHARS = 200


@dataclass(frozen=True)
class AgentRestriction:
    """The agents a token is held to (docs/API.md, "Tokens held to agents").

    The token reads the memories whose ``agent_id`` is one of ``agent_ids`` (and, with
    ``include_shared``, the shared ones, whose ``agent_id`` is null), and writes only
    memories of those agents: shared memories are read-only to it. Everything a memory
    reaches (its history, the graph's entities and edges, the sources it came from) follows
    the memory. Applied in one place per kind of read: :meth:`q` for querysets (through
    ``visible_to`` on every table that holds or reaches memories) and :meth:`sql` for the
    search SQL (``MemoryFilters.agents``); writes are checked by tenants/agents.py.
    """

    agent_ids: tuple[str, ...]
    include_shared: bool = False

    def can_read(self, agent_id: str | None) -> bool:
        return agent_id in self.agent_ids if agent_id is not None else self.include_shared

    def can_write(self, agent_id: str | None) -> bool:
        return agent_id is not None and agent_id in self.agent_ids

    def q(self, field: str = "agent_id") -> models.Q:
        """The readable rows as an ORM condition on ``field`` (a text column or expression)."""
        condition = models.Q(**{f"{field}__in": list(self.agent_ids)})
        if self.include_shared:
            condition |= models.Q(**{f"{field}__isnull": True})
        return condition

    def sql(self, column: str) -> tuple[str, list]:
        """The readable rows as SQL on ``column``, with its one parameter."""
        shared = f" OR {column} IS NULL" if self.include_shared else ""
        return f"({column} = ANY(%s::text[]){shared})", [list(self.agent_ids)]


class ApiTokenQuerySet(TenantScopedQuerySet):
    def usable(self) -> ApiTokenQuerySet:
        return self.filter(revoked_at__isnull=True).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=timezone.now())
        )


class ApiToken(models.Model):
    """A tenant credential. Only a SHA-256 of the secret is stored; the secret is shown once."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=200)
    # The first characters of the token, stored in clear so operators can tell tokens apart.
    prefix = models.CharField(max_length=16, db_index=True, editable=False)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    scopes = ArrayField(models.CharField(max_length=16, choices=Scope.choices), default=list)
    # Optional restriction to a single bucket.
    bucket = models.ForeignKey(Bucket, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    # Optional restriction to agents (empty: every agent): the token reads, edits and deletes
    # only these agents' memories, and writes only with these agent ids (AgentRestriction).
    agent_ids = ArrayField(
        models.CharField(max_length=MAX_AGENT_ID_CHARS), default=list, blank=True,
        help_text="Only these agents' memories (empty: every agent's).",
    )  # fmt: skip
    include_shared = models.BooleanField(
        default=False, help_text="With agent ids: may also read the shared memories, those without an agent."
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        db_table = "api_tokens"
        ordering = ["-created_at"]

    # last_used_at is written at most this often per token, so busy agents do not
    # turn every read into a write.
    LAST_USED_RESOLUTION = timedelta(seconds=60)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @staticmethod
    def generate_secret() -> str:
        return TOKEN_PREFIX + secrets.token_urlsafe(32)

    def matches(self, raw: str) -> bool:
        return hmac.compare_digest(self.token_hash, hash_token(raw))

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    @property
    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def is_usable(self) -> bool:
        return not self.is_revoked and not self.is_expired and self.tenant.is_active

    def has_scope(self, scope: str) -> bool:
        # admin implies every scope; read and write are independent, so an
        # ingest-only agent can hold a token that cannot read anything back.
        granted = set(self.scopes)
        return Scope.ADMIN in granted or scope in granted

    def allows_bucket(self, bucket_id) -> bool:
        return self.bucket_id is None or str(self.bucket_id) == str(bucket_id)

    @property
    def agents(self) -> AgentRestriction | None:
        """The token's agent restriction, or None when it reaches every agent's memories."""
        if not self.agent_ids:
            return None
        return AgentRestriction(agent_ids=tuple(self.agent_ids), include_shared=self.include_shared)


class OperatorMembershipQuerySet(TenantScopedQuerySet):
    pass


class OperatorMembership(models.Model):
    """A staff user who operates one tenant in the console.

    Superusers operate every tenant and need no membership. Any other staff user sees
    and acts on only the tenants they are a member of (console/scoping.py); without a
    membership they see no tenant data at all. Managed by superusers in the admin.
    """

    # Deleting the user or the tenant deletes the membership (a handful of rows per tenant,
    # so Django's own cascade is fine here).
    # No index of its own: the unique (user, tenant) index leads with it.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, db_index=False, related_name="operator_memberships"
    )
    # Indexed: the cascade from a deleted tenant.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="operator_memberships")
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    objects = OperatorMembershipQuerySet.as_manager()

    class Meta:
        db_table = "operator_memberships"
        ordering = ["user_id", "tenant_id"]
        constraints = [
            # Also serves the lookup on every console request: WHERE user_id = ? (its leading column).
            models.UniqueConstraint(fields=["user", "tenant"], name="operator_memberships_user_tenant_unique")
        ]

    def __str__(self) -> str:
        return f"{self.user} operates {self.tenant}"


# --- usage: per tenant and day (tenants/usage.py records it, console draws it) -----------------


class TenantUsage(models.Model):
    """What one tenant did on one day (UTC): one row, counts added by batched upserts.

    ``latency_histogram`` counts searches per fixed latency bucket
    (``tenants.usage.LATENCY_BOUNDS_MS``), from which p50/p95 are estimated. ``memories_stored``
    and ``storage_bytes`` are the last measurement of that day (None until one ran).
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, db_index=False, related_name="+")
    day = models.DateField()
    memories_written = models.BigIntegerField(default=0, db_default=0)
    searches = models.BigIntegerField(default=0, db_default=0)
    tokens_returned = models.BigIntegerField(default=0, db_default=0)
    latency_histogram = ArrayField(
        models.BigIntegerField(),
        default=list,
        db_default=models.Value([], ArrayField(models.BigIntegerField())),
        blank=True,
    )
    memories_stored = models.BigIntegerField(null=True, blank=True)
    storage_bytes = models.BigIntegerField(null=True, blank=True)
    # Requests refused by a quota, by quota.
    refused_reads = models.BigIntegerField(default=0, db_default=0)
    refused_writes = models.BigIntegerField(default=0, db_default=0)
    refused_memories = models.BigIntegerField(default=0, db_default=0)
    refused_batch = models.BigIntegerField(default=0, db_default=0)
    refused_document_bytes = models.BigIntegerField(default=0, db_default=0)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        db_table = "tenant_usage"
        ordering = ["tenant_id", "day"]
        constraints = [
            # The upsert's conflict target, and the charts' read: WHERE tenant_id = ? AND day >= ?
            # (also the tenant's cascade, by its leading column).
            models.UniqueConstraint(fields=["tenant", "day"], name="tenant_usage_tenant_day_unique")
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.day}"
