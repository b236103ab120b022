"""What an erasure (memories.services.erasure, through sources/participants.py) does to sources."""

from __future__ import annotations

import logging

from django.db.models import Q

from sources.models import Source, SourceChunk, SourceChunkMemory
from sources.services.inputs import memory_input
from sources.services.locks import bucket_lock
from tenants.models import Tenant
from tenants.selectors import parse_uuid

logger = logging.getLogger(__name__)

# The fields of a chunk a source's memories take their identifiers from (_memory_input).
_CHUNK_FIELDS = ("source_id", "ordinal", "role", "name", "agent_id", "run_id", "timestamp")


def _submitted_with(*, tenant: Tenant, bucket_id, fields: dict[str, str]) -> list[Source]:
    """The tenant's sources (in one bucket, or all) with a chunk whose memories take all of
    ``fields`` — by the rule that gives them (:func:`~sources.services.inputs.memory_input`), so a
    source matches exactly when distilling it does (or did) write memories the erasure matches,
    whatever it distilled."""
    sources = Source.objects.for_tenant(tenant).defer("text", "messages")
    if bucket_id is not None:
        sources = sources.filter(bucket_id=bucket_id)
    identifiers = [v for k, v in fields.items() if k != "attributed_to"]
    if identifiers:
        # A first cut in SQL: the value is one the submission named (an option, a message's ids or
        # name, or the source's own id — the run of a source submitted without one). No index serves
        # source_chunks by these columns: an erasure reads the tenant's chunks once.
        value = identifiers[0]
        named = Q(pk__in=SourceChunk.objects.filter(Q(agent_id=value) | Q(run_id=value) | Q(name=value)).values(
            "source_id"
        ))  # fmt: skip
        for option in ("agent_id", "run_id", "source_actor_id", "speaker"):
            named |= Q(**{f"options__{option}": value})
        if (own_id := parse_uuid(value)) is not None:
            named |= Q(pk=own_id)
        sources = sources.filter(named)
    found = []
    for source in sources.order_by("pk"):
        for chunk in SourceChunk.objects.filter(source_id=source.pk).only(*_CHUNK_FIELDS).order_by("ordinal"):
            item = memory_input(source, chunk, "", 0)
            if all(getattr(item, name) == value for name, value in fields.items()):
                found.append(source)
                break
    return found


def sources_erasure_lock(*, tenant: Tenant, bucket_id, bucket_ids, fields: dict[str, str]) -> None:
    """Before an erasure chooses its memories: keep chunk processing out of the buckets that hold
    matching memories or sources submitted with the erased values until it commits, so no
    batch of a source being deleted commits memories the erasure would not see."""
    locked = {*bucket_ids, *(s.bucket_id for s in _submitted_with(tenant=tenant, bucket_id=bucket_id, fields=fields))}
    for locked_id in sorted(locked, key=str):  # in one order, so two erasures cannot deadlock
        bucket_lock(locked_id, shared=False)


def sources_erase(*, tenant: Tenant, bucket_id, memory_ids: list, fields: dict[str, str]) -> dict:
    """Delete the documents and conversations an erasure reaches, with their chunks: those that
    stated an erased memory (their text holds it) and those submitted with the erased values.
    Their other memories stay, without provenance. Returns the counts."""
    linked = SourceChunkMemory.objects.filter(memory_id__in=list(memory_ids)).values("source_id")
    ids = set(Source.objects.for_tenant(tenant).filter(pk__in=linked).values_list("pk", flat=True))
    ids |= {s.pk for s in _submitted_with(tenant=tenant, bucket_id=bucket_id, fields=fields)}
    if not ids:
        return {"sources": 0, "source_chunks": 0}
    chunks = SourceChunk.objects.filter(source_id__in=ids).count()
    # Chunks and their memory links go with them (ON DELETE CASCADE).
    deleted = Source.objects.filter(pk__in=ids).delete()[0]
    logger.info("erasure deleted %d sources with %d chunks", deleted, chunks)
    return {"sources": deleted, "source_chunks": chunks}
