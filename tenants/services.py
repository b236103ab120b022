"""Writes for tenants, buckets and tokens."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify

from engram_site.exceptions import Conflict, DomainError
from tenants.models import ApiToken, Bucket, Scope, Tenant, hash_token

BUCKET_NAME_MAX = 200


@dataclass(frozen=True)
class IssuedToken:
    token: ApiToken
    secret: str  # shown once, never stored


def tenant_create(*, name: str, slug: str | None = None, settings: dict | None = None) -> Tenant:
    name = (name or "").strip()
    if not name:
        raise DomainError("Tenant name must not be empty.")
    base = slugify(slug or name)[:90] or "tenant"
    candidate, n = base, 1
    while Tenant.objects.filter(slug=candidate).exists():
        n += 1
        candidate = f"{base}-{n}"
    return Tenant.objects.create(name=name, slug=candidate, settings=settings or {})


def parse_scopes(value: str | list[str]) -> list[str]:
    items = value.split(",") if isinstance(value, str) else list(value)
    scopes = sorted({item.strip().lower() for item in items if item.strip()})
    valid = set(Scope.values)
    unknown = [s for s in scopes if s not in valid]
    if unknown or not scopes:
        raise DomainError(f"Scopes must be a non-empty subset of {sorted(valid)}; got {unknown or scopes}.")
    return scopes


def token_issue(
    *,
    tenant: Tenant,
    name: str,
    scopes: list[str],
    bucket: Bucket | None = None,
    expires_at: datetime | None = None,
) -> IssuedToken:
    """Create a token and return it with its secret. Only a hash of the secret is stored."""
    if bucket is not None and bucket.tenant_id != tenant.pk:
        raise DomainError("The bucket belongs to another tenant.")
    if expires_at is not None and expires_at <= timezone.now():
        raise DomainError("expires_at must be in the future.")
    secret = ApiToken.generate_secret()
    token = ApiToken.objects.create(
        tenant=tenant,
        name=(name or "token").strip()[:200],
        prefix=secret[:12],
        token_hash=hash_token(secret),
        scopes=parse_scopes(scopes),
        bucket=bucket,
        expires_at=expires_at,
    )
    return IssuedToken(token=token, secret=secret)


def token_revoke(*, token: ApiToken) -> ApiToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token


def _clean_bucket_name(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise DomainError(
            "Bucket name must not be empty.", extra={"errors": {"name": ["This field may not be blank."]}}
        )
    if len(name) > BUCKET_NAME_MAX:
        raise DomainError(f"Bucket name is longer than {BUCKET_NAME_MAX} characters.")
    return name


def bucket_create(*, tenant: Tenant, name: str, description: str = "") -> Bucket:
    name = _clean_bucket_name(name)
    try:
        with transaction.atomic():
            return Bucket.objects.create(tenant=tenant, name=name, description=description or "")
    except IntegrityError:
        raise Conflict(f"A bucket named {name!r} already exists.", code="bucket_exists") from None


def bucket_update(*, bucket: Bucket, name: str | None = None, description: str | None = None) -> Bucket:
    fields = []
    if name is not None:
        bucket.name = _clean_bucket_name(name)
        fields.append("name")
    if description is not None:
        bucket.description = description
        fields.append("description")
    if fields:
        try:
            with transaction.atomic():
                bucket.save(update_fields=fields)
        except IntegrityError:
            raise Conflict(f"A bucket named {bucket.name!r} already exists.", code="bucket_exists") from None
    return bucket


def bucket_delete(*, bucket: Bucket) -> None:
    """Delete a bucket. Its memories (and everything hanging off them) go with it via
    ON DELETE CASCADE in the database, in one statement."""
    bucket.delete()
