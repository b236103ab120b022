"""Writes for tenants, tokens and operators, and the bucket row's insert and name rules. A
tenant's buckets are written by memories.services.buckets (a new tenant's first bucket
excepted, below): deleting or merging a bucket moves its memories."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings as site_settings
from django.contrib.auth.models import Group, Permission
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.text import slugify

from audit.services import Actor, audit_record, audit_record_per_tenant
from engram_site.exceptions import Conflict, DomainError
from tenants.models import (
    BUCKET_NAME_MAX,
    MAX_AGENT_ID_CHARS,
    MAX_TOKEN_AGENTS,
    ApiToken,
    Bucket,
    OperatorMembership,
    Scope,
    Tenant,
    hash_token,
)


@dataclass(frozen=True)
class IssuedToken:
    token: ApiToken
    secret: str  # shown once, never stored


# --- the bucket row: its name rules and its insert ------------------------------------------------
# Every bucket write is memories.services.buckets (deleting and merging a bucket move its
# memories) except a new tenant's first bucket, below; both go through these, so the rules and
# the 409 are written once, here, where tenants needs them without importing memories.


def bucket_name_clean(name: str) -> str:
    """``name`` stripped; empty or longer than :data:`BUCKET_NAME_MAX` is a DomainError (400)."""
    name = (name or "").strip()
    if not name:
        raise DomainError(
            "Bucket name must not be empty.", extra={"errors": {"name": ["This field may not be blank."]}}
        )
    if len(name) > BUCKET_NAME_MAX:
        raise DomainError(f"Bucket name is longer than {BUCKET_NAME_MAX} characters.")
    return name


def bucket_name_taken(*, tenant: Tenant, name: str) -> Conflict:
    """The 409 for a name another bucket of the tenant has, in any case: it names that bucket."""
    taken = Bucket.objects.for_tenant(tenant).named(name).values_list("name", flat=True).first() or name
    return Conflict(
        f"A bucket named {taken!r} already exists (bucket names are unique regardless of case).",
        code="bucket_exists",
    )


def bucket_insert(*, tenant: Tenant, name: str, description: str = "") -> Bucket:
    """Insert a bucket of ``tenant`` (embedded with the deployment's model), its name cleaned; a
    name the tenant has already, in any case, raises :func:`bucket_name_taken`'s 409. Not
    audited: the callers audit it with the rest of their change."""
    name = bucket_name_clean(name)
    try:
        with transaction.atomic():
            return Bucket.objects.create(
                tenant=tenant,
                name=name,
                description=description or "",
                embedding_model=site_settings.ENGRAM_EMBEDDING_MODEL,
            )
    except IntegrityError:
        raise bucket_name_taken(tenant=tenant, name=name) from None


@transaction.atomic
def tenant_create(
    *,
    name: str,
    slug: str | None = None,
    settings: dict | None = None,
    first_bucket: str | None = None,
    actor: Actor | None = None,
) -> Tenant:
    """Create a tenant (a free slug derived from ``slug`` or ``name``); audited as ``tenant.create``
    (with an ``actor``) in the same transaction. ``first_bucket`` also creates a bucket of that
    name, audited as ``bucket.create``: a new, empty bucket touches no row of another app, so
    tenants makes it here (:func:`bucket_insert`) without reaching up to
    memories.services.buckets, where every other bucket write lives."""
    name = (name or "").strip()
    if not name:
        raise DomainError("Tenant name must not be empty.")
    base = slugify(slug or name)[:90] or "tenant"
    candidate, n = base, 1
    while Tenant.objects.filter(slug=candidate).exists():
        n += 1
        candidate = f"{base}-{n}"
    tenant = Tenant.objects.create(name=name, slug=candidate, settings=settings or {})
    if actor is not None:
        audit_record(actor=actor, action="tenant.create", tenant=tenant, object_type="tenant", object_ids=[tenant.pk])
    if first_bucket is not None:
        bucket = bucket_insert(tenant=tenant, name=first_bucket)
        if actor is not None:
            audit_record(
                actor=actor, action="bucket.create", tenant=tenant, object_type="bucket", object_ids=[bucket.pk],
                details={"name": bucket.name},
            )  # fmt: skip
    return tenant


def parse_scopes(value: str | list[str]) -> list[str]:
    items = value.split(",") if isinstance(value, str) else list(value)
    scopes = sorted({item.strip().lower() for item in items if item.strip()})
    valid = set(Scope.values)
    unknown = [s for s in scopes if s not in valid]
    if unknown or not scopes:
        raise DomainError(f"Scopes must be a non-empty subset of {sorted(valid)}; got {unknown or scopes}.")
    return scopes


def parse_agent_ids(value: str | list[str] | None) -> list[str]:
    """Agent ids of a token (a list, or a comma-separated string): stripped, each once, in the
    order given; empty means the token is not held to agents. 400 on an empty or over-long id."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    agents: list[str] = []
    for item in items:
        if not isinstance(item, str) or not item.strip():
            if isinstance(value, str) and isinstance(item, str):
                continue  # "a, ,b" or a trailing comma in a command line
            raise DomainError("An agent id must be a non-empty string.", code="invalid_agent_ids")
        agent = item.strip()
        if len(agent) > MAX_AGENT_ID_CHARS:
            raise DomainError(f"An agent id is at most {MAX_AGENT_ID_CHARS} characters.", code="invalid_agent_ids")
        if agent not in agents:
            agents.append(agent)
    if len(agents) > MAX_TOKEN_AGENTS:
        raise DomainError(f"A token is held to at most {MAX_TOKEN_AGENTS} agents.", code="invalid_agent_ids")
    return agents


def token_issue(
    *,
    tenant: Tenant,
    name: str,
    scopes: list[str],
    bucket: Bucket | None = None,
    expires_at: datetime | None = None,
    agent_ids: list[str] | str | None = None,
    include_shared: bool = False,
    actor: Actor | None = None,
) -> IssuedToken:
    """Create a token and return it with its secret. Only a hash of the secret is stored.
    Audited as ``token.create`` (with an ``actor``) in the same transaction.

    ``agent_ids`` holds the token to those agents' memories (``include_shared``: and the
    shared ones, read-only). Such a token cannot have the admin scope: admin operations
    (deleting or merging a bucket, erasure) act on every agent's memories."""
    if bucket is not None and bucket.tenant_id != tenant.pk:
        raise DomainError("The bucket belongs to another tenant.")
    agents = parse_agent_ids(agent_ids)
    scopes = parse_scopes(scopes)
    if agents and Scope.ADMIN in scopes:
        raise DomainError(
            "A token held to agents cannot have the admin scope: admin operations reach every agent's memories.",
            code="invalid_agent_ids",
        )
    if include_shared and not agents:
        raise DomainError(
            "include_shared only applies to a token held to agents: give agent_ids too.", code="invalid_agent_ids"
        )
    if expires_at is not None and expires_at <= timezone.now():
        raise DomainError("expires_at must be in the future.")
    secret = ApiToken.generate_secret()
    with transaction.atomic():
        token = ApiToken.objects.create(
            tenant=tenant,
            name=(name or "token").strip()[:200],
            prefix=secret[:12],
            token_hash=hash_token(secret),
            scopes=scopes,
            bucket=bucket,
            expires_at=expires_at,
            agent_ids=agents,
            include_shared=include_shared,
        )
        if actor is not None:
            audit_record(
                actor=actor, action="token.create", tenant=tenant, object_type="token", object_ids=[token.pk],
                details={"name": token.name, "prefix": token.prefix, "scopes": token.scopes,
                         "bucket_id": str(token.bucket_id) if token.bucket_id else None,
                         "agent_ids": token.agent_ids, "include_shared": token.include_shared},
            )  # fmt: skip
    return IssuedToken(token=token, secret=secret)


def token_revoke(*, token: ApiToken) -> ApiToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token


def _token_prefixes(tokens: list[ApiToken]) -> dict:
    return {"prefixes": [t.prefix for t in tokens]}


@transaction.atomic
def tokens_revoke(*, tokens: list[ApiToken], actor: Actor) -> list[ApiToken]:
    """Revoke ``tokens``; audited as one ``token.revoke`` event per tenant, in the same transaction."""
    revoked = [token_revoke(token=token) for token in tokens]
    audit_record_per_tenant(
        actor=actor, action="token.revoke", object_type="token", rows=revoked, details=_token_prefixes
    )
    return revoked


@transaction.atomic
def tokens_delete(*, tokens: list[ApiToken], actor: Actor) -> None:
    """Delete ``tokens``; audited as one ``token.delete`` event per tenant, in the same transaction."""
    audit_record_per_tenant(
        actor=actor, action="token.delete", object_type="token", rows=tokens, details=_token_prefixes
    )
    ApiToken.objects.filter(pk__in=[t.pk for t in tokens]).delete()


# --- tenant operators (console/scoping.py) ---------------------------------------------------------

OPERATOR_GROUP = "Tenant operators"
# What the console pages and model pages need (docs/CONSOLE.md), for the tenants an operator is
# a member of. Not "add tenant" (superusers create tenants) and nothing outside tenants (users,
# schedules, job runs, memberships are superusers' alone, whatever the permissions say).
OPERATOR_PERMISSIONS = (
    "tenants.view_tenant", "tenants.change_tenant",
    "tenants.view_bucket", "tenants.add_bucket", "tenants.change_bucket", "tenants.delete_bucket",
    "tenants.view_apitoken", "tenants.add_apitoken", "tenants.delete_apitoken",
    "memories.view_memory", "memories.change_memory", "memories.delete_memory",
    "memories.view_learnedranking", "memories.delete_learnedranking",
    "maintenance.view_duplicatecandidate", "maintenance.change_duplicatecandidate",
    "maintenance.view_conflictcandidate", "maintenance.change_conflictcandidate",
    "audit.view_auditevent",
    "sources.view_source", "sources.delete_source",
    "webhooks.view_webhooksubscription", "webhooks.add_webhooksubscription",
    "webhooks.change_webhooksubscription", "webhooks.delete_webhooksubscription",
    "webhooks.view_webhookdelivery",
)  # fmt: skip


def operator_group_ensure():
    """The "Tenant operators" group with :data:`OPERATOR_PERMISSIONS` (created or topped up)."""
    group, _ = Group.objects.get_or_create(name=OPERATOR_GROUP)
    wanted = Q(pk__in=[])
    for name in OPERATOR_PERMISSIONS:
        app_label, codename = name.split(".")
        wanted |= Q(content_type__app_label=app_label, codename=codename)
    group.permissions.add(*Permission.objects.filter(wanted))
    return group


@transaction.atomic
def operator_grant(*, user, tenant: Tenant, actor) -> OperatorMembership:
    """Let the staff ``user`` operate ``tenant`` in the console (idempotent); audited."""
    membership, created = OperatorMembership.objects.get_or_create(user=user, tenant=tenant)
    if created:
        audit_record(
            actor=actor, action="operator.grant", tenant=tenant, object_type="user", object_ids=[user.pk],
            details={"username": user.get_username()},
        )  # fmt: skip
    return membership


@transaction.atomic
def operator_revoke(*, membership: OperatorMembership, actor) -> None:
    """Take ``membership``'s tenant away from its user; audited."""
    audit_record(
        actor=actor, action="operator.revoke", tenant=membership.tenant, object_type="user",
        object_ids=[membership.user_id], details={"username": membership.user.get_username()},
    )  # fmt: skip
    membership.delete()
