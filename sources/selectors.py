"""Reads of sources, their chunks and the memories drawn from them. Every lookup is tenant-scoped."""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass

from django.db.models import QuerySet

from engram_site.exceptions import NotFound
from engram_site.scoping import scopes_disabled
from memories.models import Memory
from sources.models import Source, SourceChunk, SourceChunkMemory
from tenants.models import AgentRestriction, ApiToken, Bucket, Tenant
from tenants.selectors import parse_uuid, token_scoped


def source_tenant_ids(source_id: str) -> list:
    """The tenant of the source ``source_id`` (none if it is gone): the scope a task on the
    source runs in (its ``tenant_scope``, engram_site/scoping.py)."""
    # Cross-tenant: a task finds out whose source it was handed before it enters its scope.
    with scopes_disabled():
        return list(Source.objects.filter(pk=source_id).values_list("tenant_id", flat=True))


def source_get(*, tenant: Tenant, source_id, token: ApiToken | None = None) -> Source:
    """The tenant's source, or NotFound — also for another tenant's source, a malformed id,
    or a source outside the token's bucket or agent restriction."""
    pk = parse_uuid(source_id)
    if pk is None:
        raise NotFound("Source not found.")
    queryset = token_scoped(Source.objects.filter(pk=pk), tenant=tenant, token=token).select_related("bucket")
    # The submitted text and messages can be megabytes; the API does not return them.
    source = queryset.defer("text", "messages").first()
    if source is None:
        raise NotFound("Source not found.")
    return source


def source_list(
    *, bucket: Bucket, status: str | None = None, kind: str | None = None, agents: AgentRestriction | None = None
) -> QuerySet[Source]:
    queryset = Source.objects.for_bucket(bucket).visible_to(agents).defer("text", "messages")
    if status:
        queryset = queryset.filter(status=status)
    if kind:
        queryset = queryset.filter(kind=kind)
    return queryset


@dataclass
class ChunkView:
    chunk: SourceChunk
    memories: list[dict]


def source_chunks(
    *, source: Source, offset: int = 0, limit: int = 100, agents: AgentRestriction | None = None
) -> list[ChunkView]:
    """A page of the source's chunks in order, each with the memories drawn from it
    (``{"id", "content", "created", "position"}``, in statement order; ``agents``: those a
    token held to agents may read — a statement deduplicated onto another agent's memory is
    not shown)."""
    chunks = list(SourceChunk.objects.filter(source_id=source.pk).order_by("ordinal")[offset : offset + limit])
    links = (
        SourceChunkMemory.objects.filter(chunk_id__in=[c.pk for c in chunks])
        .order_by("chunk_id", "position", "id")
        .values("chunk_id", "memory_id", "created", "position")
    )
    by_chunk: dict[uuid.UUID, list[dict]] = defaultdict(list)
    rows = list(links)
    contents = dict(
        Memory.objects.filter(pk__in={r["memory_id"] for r in rows}, tenant_id=source.tenant_id)
        .visible_to(agents)
        .values_list("id", "content")
    )
    for row in rows:
        if row["memory_id"] in contents:
            by_chunk[row["chunk_id"]].append(
                {
                    "id": row["memory_id"],
                    "content": contents[row["memory_id"]],
                    "created": row["created"],
                    "position": row["position"],
                }
            )
    return [ChunkView(chunk=c, memories=by_chunk.get(c.pk, [])) for c in chunks]


def memory_source(*, memory: Memory, agents: AgentRestriction | None = None) -> dict | None:
    """Where a memory came from: ``{"source_id", "chunk_id", "kind", "title"}`` of the source
    that created it (else the first that stated it), or None for a memory written directly.
    ``agents``: among the sources a token held to agents may read (another agent's source that
    stated the same text is not named)."""
    links = SourceChunkMemory.objects.filter(memory_id=memory.pk, source__tenant_id=memory.tenant_id)
    if agents is not None:
        links = links.filter(source__in=Source.objects.visible_to(agents))
    link = links.order_by("-created", "id").values("source_id", "chunk_id", "source__kind", "source__title").first()
    if link is None:
        return None
    return {
        "source_id": link["source_id"],
        "chunk_id": link["chunk_id"],
        "kind": link["source__kind"],
        "title": link["source__title"],
    }
