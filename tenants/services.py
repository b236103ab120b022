"""Writes for tenants, buckets and tokens."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Min
from django.utils import timezone
from django.utils.text import slugify

from engram_site.exceptions import Conflict, DomainError, NotFound
from tenants.models import ApiToken, Bucket, OperatorMembership, Scope, Tenant, hash_token

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


# --- bucket merges ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class BucketMergePlan:
    """What merging ``source`` into ``target`` will do (counts taken under the merge's locks)."""

    source_id: str
    target_id: str
    memories: int  # in the source
    memories_to_move: int
    memories_to_dedup: int  # same text_hash as a target memory: absorbed by it
    entities: int  # graph entities of the source
    entities_to_merge: int  # same normalized name as a target entity
    duplicate_candidates: int
    tokens_to_repoint: int  # tokens restricted to the source bucket
    sources: int = 0  # documents / conversations (sources app)
    sources_to_dedup: int = 0  # identical to one of the target's

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class BucketMergeResult:
    plan: BucketMergePlan
    moved: int
    deduplicated: int
    entities_merged: int
    source_removed: bool

    def as_dict(self) -> dict:
        return {
            **self.plan.as_dict(),
            "moved": self.moved,
            "deduplicated": self.deduplicated,
            "entities_merged": self.entities_merged,
            "source_removed": self.source_removed,
        }


def _check_merge(source: Bucket, target: Bucket) -> None:
    if source.tenant_id != target.tenant_id:
        raise DomainError("Buckets of different tenants cannot be merged.", code="cross_tenant")
    if source.pk == target.pk:
        raise DomainError("A bucket cannot be merged into itself.", code="same_bucket")


def _collisions(source: Bucket, target: Bucket) -> dict:
    """Source memory id -> target memory id, for rows with the same text_hash
    (served by the unique index idx_memories_hash_unique on the target side)."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT s.id, t.id FROM memories s
            JOIN memories t ON t.tenant_id = s.tenant_id AND t.bucket_id = %s AND t.text_hash = s.text_hash
            WHERE s.tenant_id = %s AND s.bucket_id = %s AND s.text_hash IS NOT NULL
            """,
            [target.pk, source.tenant_id, source.pk],
        )
        return dict(cur.fetchall())


def _source_model():
    """The sources app's Source model, when that app is installed."""
    from django.apps import apps

    if not apps.is_installed("sources"):
        return None
    try:
        return apps.get_model("sources", "Source")
    except LookupError:
        return None


def _sources_plan(source: Bucket, target: Bucket) -> tuple[int, int]:
    model = _source_model()
    if model is None:
        return 0, 0
    mine = model.objects.filter(tenant_id=source.tenant_id, bucket_id=source.pk)
    theirs = model.objects.filter(tenant_id=target.tenant_id, bucket_id=target.pk)
    same = mine.filter(content_hash__in=theirs.values("content_hash")).values_list("kind", "content_hash")
    keys = set(theirs.values_list("kind", "content_hash"))
    return mine.count(), sum(1 for key in same if key in keys)


def bucket_merge_preview(*, source: Bucket, target: Bucket) -> BucketMergePlan:
    """What :func:`bucket_merge` would do, changing nothing. Same tenant only."""
    from graph.services import graph_merge_preview
    from maintenance.models import DuplicateCandidate
    from memories.models import Memory

    _check_merge(source, target)
    memories = Memory.objects.for_bucket(source).count()
    collisions = len(_collisions(source, target))
    graph = graph_merge_preview(source=source, target=target)
    sources, sources_to_dedup = _sources_plan(source, target)
    return BucketMergePlan(
        source_id=str(source.pk),
        target_id=str(target.pk),
        memories=memories,
        memories_to_move=memories - collisions,
        memories_to_dedup=collisions,
        entities=graph["entities"],
        entities_to_merge=graph["entities_to_merge"],
        duplicate_candidates=DuplicateCandidate.objects.for_bucket(source).count(),
        tokens_to_repoint=ApiToken.objects.filter(tenant_id=source.tenant_id, bucket_id=source.pk).count(),
        sources=sources,
        sources_to_dedup=sources_to_dedup,
    )


def _move_sources(source: Bucket, target: Bucket) -> None:
    """Documents and conversations follow their memories; one identical to a source the
    target already has (same kind and content hash, unique per bucket) is dropped with its
    chunks (the memories it produced stay, in the target)."""
    model = _source_model()
    if model is None:
        return
    theirs = model.objects.filter(tenant_id=target.tenant_id, bucket_id=target.pk)
    keys = set(theirs.values_list("kind", "content_hash"))
    mine = model.objects.filter(tenant_id=source.tenant_id, bucket_id=source.pk)
    dropped = [pk for pk, kind, digest in mine.values_list("pk", "kind", "content_hash") if (kind, digest) in keys]
    if dropped:
        # Chunks and their memory links go with it (ON DELETE CASCADE in the database).
        model.objects.filter(pk__in=dropped).delete()
    mine.update(bucket_id=target.pk)


def _rows_left_in(bucket: Bucket) -> list[str]:
    """Tables (of every app) that still have rows with this bucket_id."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT c.table_name FROM information_schema.columns c
            JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
            WHERE c.table_schema = current_schema() AND c.column_name = 'bucket_id' AND t.table_type = 'BASE TABLE'
            ORDER BY c.table_name
            """
        )
        tables = [row[0] for row in cur.fetchall()]
        left = []
        for table in tables:
            cur.execute(f'SELECT EXISTS (SELECT 1 FROM "{table}" WHERE bucket_id = %s)', [bucket.pk])
            if cur.fetchone()[0]:
                left.append(table)
    return left


def bucket_merge(*, source: Bucket, target: Bucket, remove_source: bool, actor) -> BucketMergeResult:
    """Merge ``source`` into ``target`` (same tenant) in one transaction.

    Every memory of the source moves to the target; one whose ``text_hash`` exists in
    the target is absorbed by that target memory (``memories.merge.memories_absorb``:
    tags and links united, references, graph mentions and edges re-pointed). Graph
    entities with the same normalized name merge into the target's; review
    candidates, tokens restricted to the source and sources (documents) follow; scan
    cursors are reset so the scans compare the moved memories with the target's.
    Afterwards no table has a row left in the source (checked, for every table with a
    ``bucket_id``: anything left rolls the merge back). The source is then deleted
    (``remove_source``) or left empty. Audited as ``bucket.merge``; ``actor`` is an
    ``audit.services.Actor``.
    """
    from audit.services import audit_record
    from graph.services import graph_merge_buckets, graph_recompute
    from maintenance.services import maintenance_bucket_merge
    from memories.merge import memories_absorb, memories_move_bucket
    from memories.models import Memory

    _check_merge(source, target)
    source_id, source_name = source.pk, source.name  # the instance loses its pk when deleted
    with transaction.atomic():
        # Lock both buckets (in one order, so two merges cannot deadlock). FOR UPDATE also
        # makes concurrent writes into them (whose foreign key check takes FOR KEY SHARE)
        # wait until the merge is over.
        locked = list(Bucket.objects.select_for_update().filter(pk__in=[source.pk, target.pk]).order_by("pk"))
        if len(locked) != 2:
            raise NotFound("Bucket not found.")
        plan = bucket_merge_preview(source=source, target=target)
        graph = graph_merge_buckets(source=source, target=target)
        mapping = _collisions(source, target)
        memories_absorb(mapping=mapping)
        oldest = Memory.objects.for_bucket(source).aggregate(oldest=Min("created_at"))["oldest"]
        moved = memories_move_bucket(source=source, target=target)
        maintenance_bucket_merge(source=source, target=target, oldest_moved=oldest)
        ApiToken.objects.filter(tenant_id=source.tenant_id, bucket_id=source.pk).update(bucket_id=target.pk)
        _move_sources(source, target)
        graph_recompute(bucket=target, memory_ids=[*moved, *mapping.values()])
        left = _rows_left_in(source)
        if left:
            raise DomainError(
                f"Rows of {', '.join(left)} are still in the source bucket after the merge; nothing was changed.",
                code="merge_incomplete",
            )
        if remove_source:
            bucket_delete(bucket=source)
        result = BucketMergeResult(
            plan=plan,
            moved=len(moved),
            deduplicated=len(mapping),
            entities_merged=graph["entities_merged"],
            source_removed=remove_source,
        )
        audit_record(
            actor=actor,
            action="bucket.merge",
            tenant=target.tenant,
            object_type="bucket",
            object_ids=[source_id, target.pk],
            details={
                **result.as_dict(),
                "source_name": source_name,
                "target_name": target.name,
                # absorbed source memory -> the target memory that absorbed it (first 100)
                "deduplicated_into": {str(k): str(v) for k, v in list(mapping.items())[:100]},
            },
        )
    return result


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
    "maintenance.view_duplicatecandidate", "maintenance.change_duplicatecandidate",
    "audit.view_auditevent",
    "sources.view_source", "sources.delete_source",
)  # fmt: skip


def operator_group_ensure():
    """The "Tenant operators" group with :data:`OPERATOR_PERMISSIONS` (created or topped up)."""
    from django.contrib.auth.models import Group, Permission
    from django.db.models import Q

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
    from audit.services import audit_record

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
    from audit.services import audit_record

    audit_record(
        actor=actor, action="operator.revoke", tenant=membership.tenant, object_type="user",
        object_ids=[membership.user_id], details={"username": membership.user.get_username()},
    )  # fmt: skip
    membership.delete()
