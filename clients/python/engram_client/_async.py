"""The asynchronous client, :class:`AsyncEngram`: the same methods as :class:`~engram_client.Engram`,
awaited; the list and export methods return async iterators."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterable
from datetime import datetime
from typing import Any, Literal

import httpx

from engram_client import _core as core
from engram_client._core import UNSET, Call, Id, RetryPolicy
from engram_client.models import (
    Block,
    BlockVersion,
    Bucket,
    DeletedMemory,
    Edge,
    EdgeMemories,
    Entity,
    ErasureResult,
    Feedback,
    History,
    ImportResult,
    LearnedRanking,
    Memory,
    MergeResult,
    Profile,
    SearchHit,
    SearchResult,
    Source,
    SourceDeleted,
    SourceSubmitted,
    WriteResult,
)

Attribution = Literal["user", "assistant"]
SearchMode = Literal["hybrid", "vector", "keyword", "graph"]
Excerpt = Literal["auto", "passage", "whole"]
Signal = Literal["useful", "irrelevant"]
# What a change of a block is based on: its etag (or the Block read), or "*" for any version.
IfMatch = str | Block


class AsyncEngram:
    """An asynchronous client of Engram's HTTP API (``/api/v1``), on ``httpx.AsyncClient``.

    ``base_url`` and ``token`` default to ``ENGRAM_URL`` (else ``http://127.0.0.1:8000``) and
    ``ENGRAM_TOKEN``. ``timeout`` is in seconds (or an ``httpx.Timeout``; default 30 s, or the
    ``http_client``'s own). Reads, and calls the server certainly did not carry out, are
    retried up to ``retries`` times with exponential backoff and jitter (see
    :class:`~engram_client.RetryPolicy`). ``http_client`` (an
    ``httpx.AsyncClient`` you own) or ``transport`` replace the connection pool the client makes.

    Use it as an async context manager, or await :meth:`aclose`.
    """

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float | httpx.Timeout | None = None,
        retries: int = 2,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        http_client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self.base_url, token = core.resolve_config(base_url, token)
        self.retry = RetryPolicy(retries=retries, backoff=backoff, max_backoff=max_backoff)
        self._headers = core.default_headers(token)
        self._owns_http = http_client is None
        if timeout is None:
            # 30 s, or the own timeout of the http_client given.
            timeout = http_client.timeout if http_client is not None else core.DEFAULT_TIMEOUT
        self._http = http_client or httpx.AsyncClient(timeout=timeout, transport=transport)
        self._timeout = timeout

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncEngram:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- plumbing ----------------------------------------------------------------------------

    async def _send(self, call: Call[Any], *, stream: bool = False, **extra: Any) -> httpx.Response:
        url = self.base_url + call.path
        headers = extra.pop("headers", {**self._headers, **call.headers} if call.headers else self._headers)
        timeout = extra.pop("timeout", self._timeout)
        attempt = 0
        while True:
            request = self._http.build_request(
                call.method, url, params=call.params, json=call.json, headers=headers, timeout=timeout, **extra
            )
            try:
                response = await self._http.send(request, stream=stream)
            except httpx.TransportError as exc:
                wait = self.retry.delay(attempt, call, exc=exc)
                if wait is None:
                    raise core.transport_error(exc, call.method, url) from exc
            else:
                if response.status_code < 400:
                    return response
                if stream:
                    await response.aread()
                    await response.aclose()
                wait = self.retry.delay(attempt, call, response=response)
                if wait is None:
                    core.raise_for_status(response)
            await core.asleep(wait)
            attempt += 1

    async def _run(self, call: Call[core.T]) -> core.T:
        return call.parse(core.decode(await self._send(call)))

    async def _pages(self, call: Call[Any], item: Any) -> AsyncIterator[Any]:
        params = call.params
        while params is not None:
            page = core.decode(await self._send(Call(call.method, call.path, params=params)))
            for row in page.get("results", []):
                yield item(row)
            params = core.next_params(page)

    # --- buckets -----------------------------------------------------------------------------

    def list_buckets(self, *, page_size: int | None = None) -> AsyncIterator[Bucket]:
        """Every bucket the token sees (one, for a token restricted to a bucket), page by page."""
        return self._pages(Call("GET", "buckets", params=core.query(limit=page_size)), Bucket.from_api)

    async def create_bucket(self, name: str, *, description: str | None = None) -> Bucket:
        """Create a bucket (scope ``write``); :class:`~engram_client.Conflict` if the name exists."""
        return await self._run(Call("POST", "buckets", json=core.body(name=name, description=description),
                              parse=Bucket.from_api))  # fmt: skip

    async def get_bucket(self, bucket_id: Id) -> Bucket:
        """A bucket, with its ``memory_count`` and ``pending_enrichment``."""
        return await self._run(Call("GET", core.path("buckets", bucket_id), parse=Bucket.from_api))

    async def update_bucket(
        self, bucket_id: Id, *, name: str = UNSET, description: str = UNSET, retention_days: int = UNSET
    ) -> Bucket:
        """Rename a bucket, or change its description or ``retention_days`` (only what is given)."""
        fields = core.body(name=name, description=description, retention_days=retention_days, drop_none=False)
        return await self._run(Call("PATCH", core.path("buckets", bucket_id), json=fields, parse=Bucket.from_api))

    async def delete_bucket(self, bucket_id: Id) -> None:
        """Delete a bucket and its memories for good (scope ``admin``)."""
        await self._run(Call("DELETE", core.path("buckets", bucket_id)))

    async def merge_bucket(
        self, bucket_id: Id, target_bucket_id: Id, *, remove_source: bool | None = None, dry_run: bool | None = None
    ) -> MergeResult:
        """Move every memory of ``bucket_id`` into ``target_bucket_id`` (scope ``admin``);
        ``dry_run=True`` only counts."""
        fields = core.body(target_bucket_id=target_bucket_id, remove_source=remove_source, dry_run=dry_run)
        return await self._run(Call("POST", core.path("buckets", bucket_id, "merge"), json=fields,
                              parse=MergeResult.from_api))  # fmt: skip

    async def get_learned_ranking(self, bucket_id: Id) -> LearnedRanking:
        """What the bucket's ranking learned from its ratings: the settings in use, when, on how
        many ratings, and their held-back score against the defaults' (docs/RETRIEVAL.md)."""
        return await self._run(
            Call("GET", core.path("buckets", bucket_id, "learned-ranking"), parse=LearnedRanking.from_api)
        )

    async def reset_learned_ranking(self, bucket_id: Id) -> LearnedRanking:
        """Forget what the bucket's ranking learned (scope ``write``): its searches use the
        defaults until its ratings change. Audited; answers the state after."""
        return await self._run(
            Call("DELETE", core.path("buckets", bucket_id, "learned-ranking"), parse=LearnedRanking.from_api)
        )

    # --- memories ----------------------------------------------------------------------------

    async def add_memory(
        self,
        bucket_id: Id,
        content: str,
        *,
        attributed_to: Attribution | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        source_actor_id: str | None = None,
        hint_root: str | None = None,
        hint_tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        importance: float | None = None,
        expires_at: datetime | str | None = None,
        ttl_seconds: int | None = None,
        created_at: datetime | str | None = None,
    ) -> WriteResult:
        """Write one memory; if the bucket holds the same text, its id with ``deduplicated=True``."""
        item = core.body(
            content=content, attributed_to=attributed_to, agent_id=agent_id, run_id=run_id,
            source_actor_id=source_actor_id, hint_root=hint_root, hint_tags=hint_tags, metadata=metadata,
            importance=importance, expires_at=expires_at, ttl_seconds=ttl_seconds, created_at=created_at,
        )  # fmt: skip
        return await self._run(core.write_call(bucket_id, item, parse=lambda b: WriteResult.from_api(b["results"][0])))

    async def add_memories(
        self, bucket_id: Id, memories: Iterable[str | dict[str, Any]], *, sequence: bool | None = None
    ) -> list[WriteResult]:
        """Write a batch (up to 1,000) in one transaction: strings, or dicts with the fields of
        :meth:`add_memory`. Results come in input order. ``sequence=False``: the items are
        unrelated facts, not a sequence whose members give each other context."""
        items = [{"content": m} if isinstance(m, str) else core.jsonable(m) for m in memories]
        batch = core.body(memories=items, sequence=sequence)
        return await self._run(core.write_call(bucket_id, batch, parse=core.write_results))

    async def get_memory(self, memory_id: Id) -> Memory:
        return await self._run(Call("GET", core.path("memories", memory_id), parse=Memory.from_api))

    async def update_memory(
        self,
        memory_id: Id,
        *,
        content: str = UNSET,
        attributed_to: Attribution | None = UNSET,
        agent_id: str | None = UNSET,
        run_id: str | None = UNSET,
        source_actor_id: str | None = UNSET,
        hint_root: str | None = UNSET,
        hint_tags: list[str] | None = UNSET,
        metadata: dict[str, Any] | None = UNSET,
        created_at: datetime | str = UNSET,
        classified_scope: str | None = UNSET,
        classified_topic: str | None = UNSET,
        importance: float | None = UNSET,
        expires_at: datetime | str | None = UNSET,
        ttl_seconds: int = UNSET,
    ) -> Memory:
        """Change the fields given (``None`` clears one); the previous values go to the memory's
        history. New content colliding with another memory: :class:`~engram_client.Conflict`
        with ``code == "duplicate_content"`` and ``existing_id``."""
        fields = core.body(
            content=content, attributed_to=attributed_to, agent_id=agent_id, run_id=run_id,
            source_actor_id=source_actor_id, hint_root=hint_root, hint_tags=hint_tags, metadata=metadata,
            created_at=created_at, classified_scope=classified_scope, classified_topic=classified_topic,
            importance=importance, expires_at=expires_at, ttl_seconds=ttl_seconds, drop_none=False,
        )  # fmt: skip
        return await self._run(Call("PATCH", core.path("memories", memory_id), json=fields, parse=Memory.from_api))

    async def delete_memory(self, memory_id: Id) -> None:
        """Delete a memory; it stays restorable for its bucket's ``retention_days``."""
        await self._run(Call("DELETE", core.path("memories", memory_id)))

    async def restore_memory(self, memory_id: Id) -> Memory:
        """Put a deleted memory back, under the same id."""
        return await self._run(Call("POST", core.path("memories", memory_id, "restore"), parse=Memory.from_api))

    async def rate(
        self,
        memory: Id | SearchHit,
        signal: Signal,
        *,
        query: str,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> Feedback:
        """Say that a memory (its id, or a hit of a search) was ``useful`` for ``query`` or
        ``irrelevant`` to it. Later searches of its bucket lift a memory rated useful for
        questions like ``query`` and demote one rated irrelevant (docs/RETRIEVAL.md, Feedback)."""
        memory_id = memory.id if isinstance(memory, SearchHit) else memory
        fields = core.body(signal=signal, query=query, agent_id=agent_id, run_id=run_id)
        return await self._run(
            Call("POST", core.path("memories", memory_id, "feedback"), json=fields, parse=Feedback.from_api)
        )

    async def get_memory_history(self, memory_id: Id) -> History:
        """Every change of a memory, oldest first, with the values before it."""
        return await self._run(Call("GET", core.path("memories", memory_id, "history"), parse=History.from_api))

    def list_memories(
        self,
        bucket_id: Id,
        *,
        page_size: int | None = None,
        hint_tags: list[str] | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        attributed_to: Attribution | None = None,
        classified_scope: str | None = None,
        classified_topic: str | None = None,
        created_after: datetime | str | None = None,
        created_before: datetime | str | None = None,
        importance_min: float | None = None,
        metadata: dict[str, Any] | None = None,
        include_expired: bool | None = None,
        pending: bool | None = None,
    ) -> AsyncIterator[Memory]:
        """A bucket's memories, newest first, fetched a page at a time as the iteration goes.
        ``metadata``: only memories whose metadata contains this object (JSON containment)."""
        params = core.query(
            page_size=page_size, hint_tags=hint_tags, agent_id=agent_id, run_id=run_id, attributed_to=attributed_to,
            classified_scope=classified_scope, classified_topic=classified_topic, created_after=created_after,
            created_before=created_before, importance_min=importance_min, metadata=metadata,
            include_expired=include_expired, pending=pending,
        )  # fmt: skip
        return self._pages(Call("GET", core.path("buckets", bucket_id, "memories"), params=params), Memory.from_api)

    def list_deleted_memories(self, bucket_id: Id, *, page_size: int | None = None) -> AsyncIterator[DeletedMemory]:
        """A bucket's deleted memories that can still be restored, most recently deleted first."""
        call = Call("GET", core.path("buckets", bucket_id, "deleted"), params=core.query(page_size=page_size))
        return self._pages(call, DeletedMemory.from_api)

    async def search(
        self,
        bucket_id: Id,
        query: str,
        *,
        mode: SearchMode | None = None,
        limit: int | None = None,
        token_budget: int | None = None,
        filters: dict[str, Any] | None = None,
        explain: bool | None = None,
        ranking: dict[str, Any] | None = None,
        now: datetime | str | None = None,
        excerpt: Excerpt | None = None,
        include_blocks: bool | list[str] | None = None,
    ) -> SearchResult:
        """The memories that answer ``query`` best (``hybrid`` by default), within ``limit``
        and ``token_budget``. ``filters``: ``hint_tags``, ``agent_id``, ``run_id``,
        ``attributed_to``, ``created_after``, ``created_before``, ``importance_min``, ``metadata``,
        ``include_expired``, ``include_superseded``, ``as_of``, … (docs/API.md). ``excerpt``:
        how much of a long memory a hit returns (``auto``, the server's default: its matched
        passage when the whole would not fit the budget; ``passage``; ``whole``).
        ``include_blocks``: ``True`` or a list of labels: the memory blocks come first in the
        answer (``blocks``), inside ``token_budget``; those that did not fit are
        ``blocks_left_out``."""
        fields = core.body(query=query, mode=mode, limit=limit, token_budget=token_budget, filters=filters,
                           explain=explain, ranking=ranking, now=now, excerpt=excerpt,
                           include_blocks=include_blocks)  # fmt: skip
        return await self._run(core.search_call(bucket_id, fields))

    async def search_buckets(
        self,
        query: str,
        *,
        buckets: list[Id] | None = None,
        mode: SearchMode | None = None,
        limit: int | None = None,
        token_budget: int | None = None,
        filters: dict[str, Any] | None = None,
        explain: bool | None = None,
        ranking: dict[str, Any] | None = None,
        now: datetime | str | None = None,
        excerpt: Excerpt | None = None,
        include_blocks: bool | list[str] | None = None,
    ) -> SearchResult:
        """One search over several buckets (default: every bucket the token can read), fused
        once and cut to one ``limit`` and one ``token_budget``; each hit's ``bucket_id`` names
        its bucket, and ``buckets`` of the answer lists those searched. Otherwise as
        :meth:`search`."""
        fields = core.body(query=query, buckets=None if buckets is None else [str(b) for b in buckets], mode=mode,
                           limit=limit, token_budget=token_budget, filters=filters, explain=explain, ranking=ranking,
                           now=now, excerpt=excerpt, include_blocks=include_blocks)  # fmt: skip
        return await self._run(core.search_across_call(fields))

    # --- memory blocks -------------------------------------------------------------------------

    def list_blocks(
        self, bucket_id: Id, *, agent_id: str | None = None, page_size: int | None = None
    ) -> AsyncIterator[Block]:
        """The bucket's memory blocks the token may read (``agent_id``: that agent's only)."""
        params = core.query(agent_id=agent_id, limit=page_size)
        return self._pages(Call("GET", core.path("buckets", bucket_id, "blocks"), params=params), Block.from_api)

    async def get_block(self, bucket_id: Id, label: str, *, agent_id: str | None = None) -> Block:
        """The block ``label`` (``agent_id``: that agent's; else the bucket's shared block)."""
        return await self._run(core.block_call("GET", bucket_id, label, agent_id))

    async def put_block(
        self,
        bucket_id: Id,
        label: str,
        content: str,
        *,
        agent_id: str | None = None,
        max_tokens: int | None = None,
        reason: str | None = None,
        if_match: IfMatch | None = None,
        create_only: bool = False,
    ) -> Block:
        """Set the block's whole text. A missing block is created without ``if_match``
        (``create_only``: only if it is missing, else :class:`~engram_client.PreconditionFailed`);
        an existing one is replaced only with ``if_match`` — the etag (or the :class:`Block`)
        the text replaces, or ``"*"`` — else :class:`~engram_client.PreconditionRequired`;
        :class:`~engram_client.PreconditionFailed` if it changed since."""
        fields = core.body(content=content, max_tokens=max_tokens, reason=reason)
        call = core.block_call("PUT", bucket_id, label, agent_id, json=fields, if_match=if_match,
                               create_only=create_only)  # fmt: skip
        return await self._run(call)

    async def edit_block(
        self,
        bucket_id: Id,
        label: str,
        *,
        if_match: IfMatch,
        content: str | None = None,
        append: str | None = None,
        replace: str | None = None,
        replace_with: str | None = None,
        max_tokens: int | None = None,
        reason: str | None = None,
        agent_id: str | None = None,
    ) -> Block:
        """Change a block: its whole text (``content``), a line added (``append``), its first
        ``replace`` replaced by ``replace_with``, and/or ``max_tokens``. ``if_match``: the etag
        (or :class:`Block`) the change is based on — :class:`~engram_client.PreconditionFailed`
        if the block changed since — or ``"*"``, applied to the text as it is then."""
        fields = core.body(content=content, append=append, replace=replace, replace_with=replace_with,
                           max_tokens=max_tokens, reason=reason)  # fmt: skip
        return await self._run(core.block_call("PATCH", bucket_id, label, agent_id, json=fields, if_match=if_match))

    async def delete_block(self, bucket_id: Id, label: str, *, if_match: IfMatch, agent_id: str | None = None) -> None:
        """Delete a block and its history (``if_match``: its etag, its :class:`Block`, or ``"*"``)."""
        await self._run(core.block_call("DELETE", bucket_id, label, agent_id, if_match=if_match))

    def get_block_history(
        self, bucket_id: Id, label: str, *, agent_id: str | None = None, page_size: int | None = None
    ) -> AsyncIterator[BlockVersion]:
        """Every version of a block, newest first: its text, who wrote it, when and why."""
        call = Call("GET", core.path("buckets", bucket_id, "blocks", label, "history"),
                    params=core.query(agent_id=agent_id, limit=page_size))  # fmt: skip
        return self._pages(call, BlockVersion.from_api)

    # --- export and import -------------------------------------------------------------------

    async def export_bucket(
        self,
        bucket_id: Id,
        *,
        versions: bool = False,
        embeddings: bool = False,
        blocks: bool = False,
        feedback: bool = False,
    ) -> AsyncIterator[dict]:
        """A bucket's memories as the export's JSON objects, one per line, oldest first, read
        as the server streams them (the connection stays open until the iteration ends).
        ``blocks``: then one ``{"block": {...}}`` object per memory block (an import sets them);
        ``feedback``: then one ``{"feedback": {...}}`` object per rating (an import restores them)."""
        call = Call("GET", core.path("buckets", bucket_id, "export"),
                    params=core.query(versions=versions or None, embeddings=embeddings or None,
                                      blocks=blocks or None, feedback=feedback or None))  # fmt: skip
        response = await self._send(call, stream=True)
        try:
            async for line in response.aiter_lines():
                if line.strip():
                    yield json.loads(line)
        except httpx.TransportError as exc:
            raise core.transport_error(exc, call.method, self.base_url + call.path) from exc
        finally:
            await response.aclose()

    async def import_bucket(
        self,
        bucket_id: Id,
        lines: core.AsyncJsonLines,
        *,
        skip_invalid: bool = False,
        timeout: float | httpx.Timeout | None = None,
    ) -> ImportResult:
        """Import JSON Lines: an export's objects or plain ``{"content": …}`` dicts, text lines,
        a path to a ``.jsonl`` file or a binary file object. Streamed; all or nothing unless
        ``skip_invalid``. The answer comes once every line is written: give a larger
        ``timeout`` for big files. Not retried (a write)."""
        call = Call("POST", core.path("buckets", bucket_id, "import"),
                    params=core.query(skip_invalid=skip_invalid or None), parse=ImportResult.from_api,
                    replayable=False)  # fmt: skip
        extra: dict[str, Any] = {"headers": {**self._headers, "Content-Type": core.NDJSON}}
        if timeout is not None:
            extra["timeout"] = timeout
        if isinstance(lines, (str, os.PathLike)):
            with open(lines, "rb") as handle:
                return call.parse(core.decode(await self._send(call, content=core.afile_chunks(handle), **extra)))
        if hasattr(lines, "read"):
            return call.parse(core.decode(await self._send(call, content=core.afile_chunks(lines), **extra)))  # type: ignore[arg-type]
        return call.parse(core.decode(await self._send(call, content=core.andjson_lines(lines), **extra)))  # type: ignore[arg-type]

    # --- documents and conversations ---------------------------------------------------------

    async def submit_document(
        self,
        bucket_id: Id,
        title: str,
        text: str,
        *,
        metadata: dict[str, Any] | None = None,
        created_at: datetime | str | None = None,
        attributed_to: Attribution | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        source_actor_id: str | None = None,
    ) -> SourceSubmitted:
        """Submit a document (text or Markdown), distilled into memories in the background:
        follow it with :meth:`get_source`."""
        fields = core.body(
            title=title, text=text, metadata=metadata, created_at=created_at, attributed_to=attributed_to,
            agent_id=agent_id, run_id=run_id, source_actor_id=source_actor_id,
        )  # fmt: skip
        return await self._run(Call("POST", core.path("buckets", bucket_id, "documents"), json=fields,
                              parse=SourceSubmitted.from_api))  # fmt: skip

    async def submit_conversation(
        self,
        bucket_id: Id,
        messages: list[dict[str, Any]],
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        speaker: str | None = None,
        resolve_first_person: bool | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        source_actor_id: str | None = None,
    ) -> SourceSubmitted:
        """Submit a conversation: ``messages`` of ``{"role": "user"|"assistant", "content",
        "timestamp"?, "name"?, "agent_id"?, "run_id"?}``, distilled in the background."""
        fields = core.body(
            messages=messages, title=title, metadata=metadata, speaker=speaker,
            resolve_first_person=resolve_first_person, agent_id=agent_id, run_id=run_id,
            source_actor_id=source_actor_id,
        )  # fmt: skip
        return await self._run(Call("POST", core.path("buckets", bucket_id, "conversations"), json=fields,
                              parse=SourceSubmitted.from_api))  # fmt: skip

    def list_sources(
        self,
        bucket_id: Id,
        *,
        status: str | None = None,
        kind: Literal["document", "conversation"] | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[Source]:
        """A bucket's documents and conversations, newest first."""
        params = core.query(status=status, kind=kind, page_size=page_size)
        return self._pages(Call("GET", core.path("buckets", bucket_id, "sources"), params=params), Source.from_api)

    async def get_source(
        self, source_id: Id, *, chunk_offset: int | None = None, chunk_limit: int | None = None
    ) -> Source:
        """A source's status and progress, and its chunks with the memories each produced."""
        params = core.query(chunk_offset=chunk_offset, chunk_limit=chunk_limit)
        return await self._run(Call("GET", core.path("sources", source_id), params=params, parse=Source.from_api))

    async def delete_source(self, source_id: Id) -> SourceDeleted:
        """Delete a source and the memories it created (those also stated elsewhere stay)."""
        return await self._run(Call("DELETE", core.path("sources", source_id), parse=SourceDeleted.from_api))

    # --- knowledge graph ---------------------------------------------------------------------

    def list_entities(
        self, bucket_id: Id, *, q: str | None = None, type: str | None = None, page_size: int | None = None
    ) -> AsyncIterator[Entity]:
        """A bucket's entities, most mentioned first; ``q`` matches names and aliases."""
        params = core.query(q=q, type=type, limit=page_size)
        return self._pages(Call("GET", core.path("buckets", bucket_id, "entities"), params=params), Entity.from_api)

    async def get_entity(self, entity_id: Id, *, as_of: datetime | str | None = None) -> Entity:
        """An entity with its current and historical edges (as they stood at ``as_of``)."""
        params = core.query(as_of=as_of)
        return await self._run(Call("GET", core.path("entities", entity_id), params=params, parse=Entity.from_api))

    def list_edges(
        self,
        bucket_id: Id,
        *,
        valid_at: datetime | str | None = None,
        entity: Id | None = None,
        predicate: str | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[Edge]:
        """A bucket's edges: valid at a time, touching an entity, of a predicate."""
        params = core.query(valid_at=valid_at, entity=entity, predicate=predicate, limit=page_size)
        return self._pages(Call("GET", core.path("buckets", bucket_id, "edges"), params=params), Edge.from_api)

    async def get_edge_memories(self, edge_id: Id) -> EdgeMemories:
        """An edge and the memories stating it."""
        return await self._run(Call("GET", core.path("edges", edge_id, "memories"), parse=EdgeMemories.from_api))

    async def get_profile(
        self,
        bucket_id: Id,
        *,
        name: str | None = None,
        entity_id: Id | None = None,
        type: str | None = None,
        as_of: datetime | str | None = None,
        budget: int | None = None,
        limit: int | None = None,
    ) -> Profile:
        """What the bucket's memories say about an entity, by ``name`` (as extraction resolves it:
        a name, an alias, a lone first name; :class:`~engram_client.Conflict` with ``candidates``
        when it denotes several, which ``type`` or ``entity_id`` tell apart) or by ``entity_id``:
        its current facts and their history (as they stood at ``as_of``), related entities, and
        with ``budget`` a ``digest`` of at most that many tokens for a system prompt."""
        if (name is None) == (entity_id is None):
            raise ValueError("give name or entity_id (one of them)")
        params = core.query(as_of=as_of, budget=budget, limit=limit)
        if entity_id is not None:
            where = core.path("buckets", bucket_id, "entities", entity_id, "profile")
        else:
            where, params = core.path("buckets", bucket_id, "profile"), {**core.query(name=name, type=type), **params}
        return await self._run(Call("GET", where, params=params, parse=Profile.from_api))

    # --- erasure -----------------------------------------------------------------------------

    async def erase(
        self,
        *,
        agent_id: str | None = None,
        run_id: str | None = None,
        attributed_to: Attribution | None = None,
        source_actor_id: str | None = None,
        bucket_id: Id | None = None,
        dry_run: bool | None = None,
    ) -> ErasureResult:
        """Delete for good every memory of the tenant carrying all the identifiers given, with
        everything Engram keeps about them (scope ``admin``); ``dry_run=True`` only counts."""
        fields = core.body(agent_id=agent_id, run_id=run_id, attributed_to=attributed_to,
                           source_actor_id=source_actor_id, bucket_id=bucket_id, dry_run=dry_run)  # fmt: skip
        return await self._run(Call("POST", "erasure", json=fields, parse=ErasureResult.from_api))
