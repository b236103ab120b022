"""Reads of single memories and memory listings (search lives in memories/retrieval/)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.conf import settings
from django.db.models import F, QuerySet

from engram_site.exceptions import NotFound
from engram_site.scoping import scopes_disabled
from memories import access
from memories.filters import MemoryFilters
from memories.models import (
    BLOCK_LABEL_PATTERN,
    PENDING_ENRICHMENT,
    BlockEdit,
    DeletedMemory,
    EnrichmentFailure,
    LearnedRanking,
    Memory,
    MemoryBlock,
    MemoryVersion,
    SearchFeedback,
)
from tenants.models import AgentRestriction, ApiToken, Bucket, Tenant
from tenants.selectors import parse_uuid, token_scoped


def memory_get(*, tenant: Tenant, memory_id, token: ApiToken | None = None, for_update: bool = False) -> Memory:
    """The tenant's memory, or NotFound — also for another tenant's memory, a malformed
    id, or a memory outside the token's bucket or agent restriction."""
    pk = parse_uuid(memory_id)
    if pk is None:
        raise NotFound("Memory not found.")
    queryset = token_scoped(Memory.objects.filter(pk=pk), tenant=tenant, token=token).select_related("bucket")
    memory = access.with_pending(queryset.defer("embedding", "context_embedding")).first()
    if memory is None:
        raise NotFound("Memory not found.")
    return memory


def memory_list(
    *, bucket: Bucket, filters: MemoryFilters, pending: bool | None = None, using: str | None = None
) -> QuerySet[Memory]:
    """The bucket's memories passing ``filters``, read from the database ``using`` (a replica's
    too, engram_site/replica.py; by default where the router sends reads)."""
    memories = Memory.objects.for_bucket(bucket)
    if using is not None:
        memories = memories.using(using)
    queryset = access.with_pending(memories.defer("embedding", "context_embedding"))
    queryset = queryset.filter(filters.q())
    if pending is True:
        queryset = queryset.filter(PENDING_ENRICHMENT)
    elif pending is False:
        queryset = queryset.exclude(PENDING_ENRICHMENT)
    return queryset


def memory_count(*, bucket: Bucket, agents: AgentRestriction | None = None) -> int:
    """How many memories ``bucket`` holds (idx_memories_tenant_bucket); ``agents``: how many of
    them a token held to agents may read."""
    return Memory.objects.for_bucket(bucket).visible_to(agents).count()


def deleted_memory_get(*, tenant: Tenant, memory_id, token: ApiToken | None = None) -> DeletedMemory:
    """The tenant's deleted (still restorable) memory, or NotFound, as :func:`memory_get`."""
    pk = parse_uuid(memory_id)
    deleted = None
    if pk is not None:
        deleted = token_scoped(DeletedMemory.objects.filter(pk=pk), tenant=tenant, token=token).first()
    if deleted is None:
        raise NotFound("No deleted memory with this id: never deleted, restored already, or purged.")
    return deleted


def deleted_memory_list(*, bucket: Bucket, agents: AgentRestriction | None = None) -> QuerySet[DeletedMemory]:
    return DeletedMemory.objects.for_bucket(bucket).visible_to(agents)


def enrichment_failure_list(
    *, bucket: Bucket, stage: str | None = None, agents: AgentRestriction | None = None
) -> QuerySet[EnrichmentFailure]:
    """The bucket's enrichment failures (idx_enrich_failures_bucket), of one stage if given."""
    failures = EnrichmentFailure.objects.for_bucket(bucket).visible_to(agents)
    return failures.filter(stage=stage) if stage else failures


def memory_history(*, tenant: Tenant, memory_id, token: ApiToken | None = None) -> tuple[str, QuerySet]:
    """(``"live"`` or ``"deleted"``, the memory's versions oldest first), or NotFound when the
    tenant has no such memory, live or restorable (a purged or erased one has no history left)."""
    pk = parse_uuid(memory_id)
    state = None
    if pk is not None:
        if token_scoped(Memory.objects.filter(pk=pk), tenant=tenant, token=token).exists():
            state = "live"
        elif token_scoped(DeletedMemory.objects.filter(pk=pk), tenant=tenant, token=token).exists():
            state = "deleted"
    if state is None:
        raise NotFound("Memory not found.")
    return state, MemoryVersion.objects.filter(memory_id=pk, tenant_id=tenant.pk).order_by("id")


def memories_tenant_ids(memory_ids: list[str]) -> list:
    """The tenants of the memories ``memory_ids``: the scope a task on them runs in (its
    ``tenant_scope``, engram_site/scoping.py). None for memories that are gone."""
    # Cross-tenant: a task finds out whose rows it was handed before it enters their scope.
    with scopes_disabled():
        return list(Memory.objects.filter(pk__in=memory_ids).values_list("tenant_id", flat=True).distinct())


def enrichment_backlog() -> dict[tuple, float]:
    """Memories of every tenant still missing a derived column (for /metrics): a count over
    the partial index idx_memories_enrich_pending, which holds only those rows."""
    return {(): float(Memory.objects.filter(PENDING_ENRICHMENT).count())}


def block_get(*, bucket: Bucket, label: str, agent_id: str | None, agents: AgentRestriction | None) -> MemoryBlock:
    """The bucket's block ``label`` of ``agent_id`` (None: the shared one), or NotFound — also
    for a label that cannot be one, and for a block the token's agent restriction hides."""
    if not re.match(BLOCK_LABEL_PATTERN, label) or (agents is not None and not agents.can_read(agent_id)):
        raise NotFound("Block not found.")
    # memory_blocks_owner_label: WHERE tenant_id, bucket_id, agent_id, label.
    block = MemoryBlock.objects.for_bucket(bucket).owned_by(agent_id).filter(label=label).first()
    if block is None:
        raise NotFound("Block not found.")
    return block


def block_list(*, bucket: Bucket, agents: AgentRestriction | None, agent_id: str | None = None) -> QuerySet:
    """The bucket's blocks the token may read, shared ones first, then by agent and label
    (memory_blocks_owner_label); ``agent_id``: that agent's only."""
    blocks = MemoryBlock.objects.for_bucket(bucket).visible_to(agents)
    if agent_id is not None:
        blocks = blocks.filter(agent_id=agent_id)
    return blocks.order_by("tenant_id", "bucket_id", F("agent_id").asc(nulls_first=True), "label")


def block_history(*, block: MemoryBlock) -> QuerySet[BlockEdit]:
    """The block's versions, newest first (block_edit_log_block_version)."""
    return BlockEdit.objects.filter(tenant_id=block.tenant_id, block_id=block.pk).order_by("-version")


@dataclass(frozen=True)
class LearnedRankingState:
    """What a bucket's ranking learned from its feedback, as the API answers it: ``row`` (None:
    never learned, or gone with a merge or an erasure), the bucket's ratings now, and the minimum
    a bucket needs before the nightly run learns it."""

    bucket: Bucket
    row: LearnedRanking | None
    ratings_now: int
    min_ratings: int

    @property
    def status(self) -> str:
        if self.row is None:
            return "none"
        if self.row.reset_at is not None:
            return "reset"
        return "in_use" if self.row.adopted else "defaults_kept"


def learned_ranking_get(*, bucket: Bucket) -> LearnedRankingState:
    """The bucket's learned ranking (learned_rankings_bucket: WHERE tenant_id AND bucket_id) and
    its rating count (the ratings' bucket index)."""
    row = LearnedRanking.objects.for_bucket(bucket).first()
    ratings = SearchFeedback.objects.for_bucket(bucket).count()
    return LearnedRankingState(
        bucket=bucket, row=row, ratings_now=ratings, min_ratings=settings.ENGRAM_LEARN_MIN_RATINGS
    )
