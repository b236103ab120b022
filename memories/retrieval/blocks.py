"""Memory blocks in a search's answer (``include_blocks``): which blocks, and what they take of
the token budget before the memories get the rest.

Which blocks: those of the searched buckets that the search is for — the shared ones (when the
token may read them) and the blocks of the agent the search names in ``filters.agent_id`` or,
without one, of the agents a token held to agents is held to; ``include_blocks`` as a list
of labels narrows them to those labels. Order: the labels' order when listed (else by
label), and within a label the buckets' order, the shared block before an agent's.

The budget: blocks are taken in that order while they fit; one that does not fit is left out
(and named as left out), and a smaller one after it may still fit. The memories are then cut
to what is left, so blocks and memories together never exceed the budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Q

from memories.filters import MemoryFilters
from memories.models import MemoryBlock
from tenants.models import Bucket

# At most this many labels in one ``include_blocks`` list.
MAX_BLOCK_LABELS = 50


@dataclass
class BlockPick:
    """The blocks a search returns (``included``), those that did not fit (``left_out``) and
    the tokens the included ones take (``tokens``)."""

    included: list[MemoryBlock] = field(default_factory=list)
    left_out: list[MemoryBlock] = field(default_factory=list)
    tokens: int = 0


def search_blocks(
    *, buckets: list[Bucket], labels: list[str] | None, filters: MemoryFilters, using: str | None = None
) -> list[MemoryBlock]:
    """The blocks a search over ``buckets`` asks for (see the module), in answer order."""
    owners = Q(agent_id__isnull=True)
    if filters.agent_id is not None:
        owners |= Q(agent_id=filters.agent_id)
    elif filters.agents is not None:
        owners |= Q(agent_id__in=list(filters.agents.agent_ids))
    blocks = MemoryBlock.objects.filter(tenant_id=buckets[0].tenant_id, bucket_id__in=[b.pk for b in buckets])
    if using is not None:
        blocks = blocks.using(using)
    # memory_blocks_owner_label serves it: WHERE tenant_id, bucket_id = ANY(...).
    blocks = blocks.filter(owners).visible_to(filters.agents)
    if labels is not None:
        blocks = blocks.filter(label__in=labels)
    position = {b.pk: i for i, b in enumerate(buckets)}
    rank = {label: i for i, label in enumerate(labels or [])}

    def order(block: MemoryBlock) -> tuple:
        return (rank.get(block.label, 0), block.label, position[block.bucket_id], block.agent_id is not None,
                block.agent_id or "")  # fmt: skip

    return sorted(blocks, key=order)


def blocks_within_budget(blocks: list[MemoryBlock], token_budget: int | None) -> BlockPick:
    """``blocks`` in order while they fit ``token_budget`` (all of them without a budget)."""
    pick = BlockPick()
    for block in blocks:
        if token_budget is not None and pick.tokens + block.token_count > token_budget:
            pick.left_out.append(block)
            continue
        pick.included.append(block)
        pick.tokens += block.token_count
    return pick
