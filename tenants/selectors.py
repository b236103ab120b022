"""Reads of tenants, buckets and tokens. Every lookup is scoped to a tenant."""

from __future__ import annotations

import re
import uuid

from django.db.models import QuerySet

from engram_site.exceptions import NotFound
from engram_site.scoping import scopes_disabled
from tenants.models import ApiToken, Bucket, Tenant

# The one written form of an id (docs/API.md): lowercase, hyphenated, 36 characters.
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def parse_uuid(value) -> uuid.UUID | None:
    """``value`` as a UUID when it is one, or a string in the canonical form; else None.
    Python's parser also takes uppercase, unhyphenated, ``{…}`` and ``urn:uuid:`` forms: one
    object would then answer to many addresses, which the API does not promise."""
    if isinstance(value, uuid.UUID):
        return value
    if not isinstance(value, str) or not _CANONICAL_UUID.fullmatch(value):
        return None
    return uuid.UUID(value)


def bucket_tenant_ids(bucket_id: str) -> list:
    """The tenant of the bucket ``bucket_id`` (none if it is gone): the scope a task on the
    bucket runs in (its ``tenant_scope``, engram_site/scoping.py)."""
    # Cross-tenant: a task finds out whose bucket it was handed before it enters its scope.
    with scopes_disabled():
        return list(Bucket.objects.filter(pk=bucket_id).values_list("tenant_id", flat=True))


_CANONICAL_ROW_ID = re.compile(r"[1-9][0-9]{0,18}")


def parse_row_id(value) -> int | None:
    """``value`` as a row's integer id when it is one written in its one form (ASCII digits, no
    sign, space or leading zero) and fits PostgreSQL's bigint; else None. Python's int() also
    takes ``" 3"``, ``"+3"``, ``"03"`` and other scripts' digits (``"٣"``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 < value < 2**63 else None
    if not isinstance(value, str) or not _CANONICAL_ROW_ID.fullmatch(value):
        return None
    number = int(value)
    return number if number < 2**63 else None


def token_scoped(queryset: QuerySet, *, tenant: Tenant, token: ApiToken | None) -> QuerySet:
    """``queryset`` (of a model with tenant and bucket) narrowed to ``tenant`` and, for a
    bucket-restricted token, to that bucket, and for an agent-limited one to the rows its
    agents may read (``visible_to``): whatever lies outside is missing to the caller."""
    queryset = queryset.filter(tenant_id=tenant.pk)
    if token is not None and token.bucket_id is not None:
        queryset = queryset.filter(bucket_id=token.bucket_id)
    if token is not None:
        queryset = queryset.visible_to(token.agents)
    return queryset


def bucket_list(*, tenant: Tenant, token: ApiToken | None = None) -> QuerySet[Bucket]:
    buckets = Bucket.objects.for_tenant(tenant)
    if token is not None and token.bucket_id is not None:
        buckets = buckets.filter(pk=token.bucket_id)
    return buckets.order_by("name", "id")


def bucket_get(*, tenant: Tenant, bucket_id, token: ApiToken | None = None) -> Bucket:
    """The tenant's bucket, or NotFound. Another tenant's bucket, a malformed id and a
    bucket outside the token's restriction all look exactly like a missing bucket."""
    pk = parse_uuid(bucket_id)
    if pk is None or (token is not None and not token.allows_bucket(pk)):
        raise NotFound("Bucket not found.")
    try:  # get(), not first(): a primary key needs no ORDER BY
        bucket = Bucket.objects.for_tenant(tenant).get(pk=pk)
    except Bucket.DoesNotExist:
        raise NotFound("Bucket not found.") from None
    bucket.tenant = tenant  # already loaded (with the token): no second query for its settings
    return bucket


def buckets_readable(
    *, tenant: Tenant, token: ApiToken | None, bucket_ids: list | None, at_most: int | None = None
) -> list[Bucket]:
    """The buckets a search across buckets reads: those named, in the order given, or (``None``)
    every bucket the token may read, by name (``at_most`` + 1 of them at most, so a caller can
    tell there are too many without reading them all). Like :func:`bucket_get`, a malformed
    id, another tenant's bucket and one outside the token's restriction are all missing
    (NotFound), and nothing says which id it was."""
    if bucket_ids is None:
        readable = bucket_list(tenant=tenant, token=token)
        buckets = list(readable if at_most is None else readable[: at_most + 1])
    else:
        pks = [parse_uuid(value) for value in bucket_ids]
        if any(pk is None or (token is not None and not token.allows_bucket(pk)) for pk in pks):
            raise NotFound("Bucket not found.")
        found = {bucket.pk: bucket for bucket in Bucket.objects.for_tenant(tenant).filter(pk__in=pks)}
        if len(found) != len(set(pks)):
            raise NotFound("Bucket not found.")
        buckets = [found[pk] for pk in pks]
    for bucket in buckets:
        bucket.tenant = tenant  # already loaded (with the token): no query for its settings
    return buckets
