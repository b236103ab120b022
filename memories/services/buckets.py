"""Buckets as containers of memories: creating and changing one, deleting one with its
memories, and merging one into another. Every write of a bucket lives here (a new tenant's
first bucket excepted: tenants.services.tenant_create, through the same
``tenants.services.bucket_insert``);
the bucket endpoints are memories/apis/buckets.py.

A bucket merge spans every app that keeps rows per bucket. It lives here, in the app
that owns the memories, and calls the apps above through their participants
(:mod:`memories.participants`: ``merge_plan``, ``merge_before``, ``merge_after``,
``bucket_delete``), all inside one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, connection, transaction
from django.db.models import Min

from audit.services import Actor, audit_record
from engram_site.exceptions import DomainError, NotFound
from memories.models import Memory
from memories.participants import Participant, collect, run
from memories.services.blocks import blocks_move_bucket
from memories.services.merge import memories_absorb, memories_move_bucket
from memories.services.ranking_learning import learned_forget
from memories.services.stats_cache import forget_stats
from tenants.models import ApiToken, Bucket, Tenant
from tenants.services import bucket_insert, bucket_name_clean, bucket_name_taken


def bucket_create(*, tenant: Tenant, name: str, description: str = "", actor: Actor | None = None) -> Bucket:
    """Create a bucket; audited as ``bucket.create`` (with an ``actor``) in the same transaction."""
    with transaction.atomic():
        bucket = bucket_insert(tenant=tenant, name=name, description=description)
        if actor is not None:
            audit_record(
                actor=actor, action="bucket.create", tenant=tenant, object_type="bucket", object_ids=[bucket.pk],
                details={"name": bucket.name},
            )  # fmt: skip
        return bucket


def bucket_update(
    *,
    bucket: Bucket,
    name: str | None = None,
    description: str | None = None,
    retention_days: int | None = None,
    actor: Actor | None = None,
) -> Bucket:
    """Rename, redescribe or set the retention window of a bucket; audited as ``bucket.update``
    (with an ``actor``) in the same transaction."""
    fields = []
    if retention_days is not None:
        bucket.retention_days = retention_days
        fields.append("retention_days")
    if name is not None:
        bucket.name = bucket_name_clean(name)
        fields.append("name")
    if description is not None:
        bucket.description = description
        fields.append("description")
    if fields:
        try:
            with transaction.atomic():
                bucket.save(update_fields=fields)
                if actor is not None:
                    audit_record(
                        actor=actor, action="bucket.update", tenant=bucket.tenant, object_type="bucket",
                        object_ids=[bucket.pk], details={"fields": sorted(fields)},
                    )  # fmt: skip
        except IntegrityError:
            raise bucket_name_taken(tenant=bucket.tenant, name=bucket.name) from None
    return bucket


@transaction.atomic
def bucket_delete(*, bucket: Bucket, actor: Actor | None = None) -> None:
    """Delete a bucket with its memories; what hangs off them in the database (graph rows,
    documents, review candidates) goes with them via ON DELETE CASCADE, after the
    participants' ``bucket_delete``. Audited as ``bucket.delete`` (with an ``actor``) in the same
    transaction."""
    bucket_id, name = bucket.pk, bucket.name
    run(Participant.bucket_delete, bucket=bucket)
    with connection.cursor() as cur:
        # idx_memories_tenant_bucket finds the rows.
        cur.execute("DELETE FROM memories WHERE tenant_id = %s AND bucket_id = %s", [bucket.tenant_id, bucket_id])
    bucket.delete()
    if actor is not None:
        audit_record(
            actor=actor, action="bucket.delete", tenant=bucket.tenant, object_type="bucket", object_ids=[bucket_id],
            details={"name": name},
        )  # fmt: skip
    transaction.on_commit(lambda: forget_stats([bucket_id]))


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


# The plan's counts the participants answer (Participant.merge_plan).
_PLANNED = ("entities", "entities_to_merge", "duplicate_candidates", "sources", "sources_to_dedup")
# The result's counts the participants answer (Participant.merge_before).
_MERGED = ("entities_merged",)


def _check_merge(source: Bucket, target: Bucket) -> None:
    if source.tenant_id != target.tenant_id:
        raise DomainError("Buckets of different tenants cannot be merged.", code="cross_tenant")
    if source.pk == target.pk:
        raise DomainError("A bucket cannot be merged into itself.", code="same_bucket")


def _collisions(source: Bucket, target: Bucket) -> dict:
    """Source memory id -> target memory id, for rows with the same text_hash
    (served by the unique index idx_memories_hash_unique on the target side)."""
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


def bucket_merge_preview(*, source: Bucket, target: Bucket) -> BucketMergePlan:
    """What :func:`bucket_merge` would do, changing nothing. Same tenant only."""
    _check_merge(source, target)
    memories = Memory.objects.for_bucket(source).count()
    collisions = len(_collisions(source, target))
    # The counts of the apps above (graph entities, review candidates, documents).
    counts = collect(Participant.merge_plan, reported=_PLANNED, source=source, target=target)
    return BucketMergePlan(
        source_id=str(source.pk),
        target_id=str(target.pk),
        memories=memories,
        memories_to_move=memories - collisions,
        memories_to_dedup=collisions,
        entities=counts.get("entities", 0),
        entities_to_merge=counts.get("entities_to_merge", 0),
        duplicate_candidates=counts.get("duplicate_candidates", 0),
        tokens_to_repoint=ApiToken.objects.filter(tenant_id=source.tenant_id, bucket_id=source.pk).count(),
        sources=counts.get("sources", 0),
        sources_to_dedup=counts.get("sources_to_dedup", 0),
    )


def _rows_left_in(bucket: Bucket) -> list[str]:
    """Tables (of every app) that still have rows with this bucket_id."""
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
    the target is absorbed by that target memory (:func:`memories_absorb`: tags and
    links united, references, graph mentions and edges re-pointed). Tokens restricted
    to the source follow. The apps above move what they keep per bucket as participants
    (:mod:`memories.participants`): ``merge_before`` before the memories move (graph entities
    with the same normalized name merge into the target's) and ``merge_after`` after
    (review candidates and documents follow, scan cursors are reset so the scans compare
    the moved memories with the target's, the graph's timelines are recomputed).
    Afterwards no table has a row left in the source (checked, for every table with a
    ``bucket_id``: anything left rolls the merge back). The source is then deleted
    (``remove_source``) or left empty. Audited as ``bucket.merge``; ``actor`` is an
    ``audit.services.Actor``.
    """
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
        merging = collect(Participant.merge_before, reported=_MERGED, source=source, target=target)
        mapping = _collisions(source, target)
        memories_absorb(mapping=mapping, actor=actor)
        oldest = Memory.objects.for_bucket(source).aggregate(oldest=Min("created_at"))["oldest"]
        moved = memories_move_bucket(source=source, target=target)
        blocks = blocks_move_bucket(source=source, target=target, actor=actor)
        # What the source learned from its ratings does not hold for the target (whose ratings
        # now include them: its next learning run sees them and learns again).
        learned_forget(tenant_id=source.tenant_id, bucket_ids=[source.pk])
        ApiToken.objects.filter(tenant_id=source.tenant_id, bucket_id=source.pk).update(bucket_id=target.pk)
        run(
            Participant.merge_after,
            source=source, target=target, oldest_moved=oldest, memory_ids=[*moved, *mapping.values()],
        )  # fmt: skip
        left = _rows_left_in(source)
        if left:
            raise DomainError(
                f"Rows of {', '.join(left)} are still in the source bucket after the merge; nothing was changed.",
                code="merge_incomplete",
            )
        if remove_source:
            bucket_delete(bucket=source, actor=None)
        result = BucketMergeResult(
            plan=plan,
            moved=len(moved),
            deduplicated=len(mapping),
            entities_merged=merging.get("entities_merged", 0),
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
                **blocks,
                # absorbed source memory -> the target memory that absorbed it (first 100)
                "deduplicated_into": {str(k): str(v) for k, v in list(mapping.items())[:100]},
            },
        )
    return result
