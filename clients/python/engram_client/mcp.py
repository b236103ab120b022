"""Engram's memory as MCP tools, on the official MCP SDK (``mcp`` 2.x): the package's ``mcp``
extra, ``pip install "engram-client[mcp]"`` (the rest of the client needs only httpx).

:func:`create_server` defines the tools once; what serves them decides where each call's
:class:`~engram_client.AsyncEngram` comes from (``client_for``, given the tool call's
context):

- ``engram-mcp`` (and ``./engram mcp``) serves them over stdio for a desktop agent, with one
  client configured from ``--url``/``--token``/``--bucket`` or ``ENGRAM_URL``/``ENGRAM_TOKEN``/
  ``ENGRAM_BUCKET``;
- Engram's own ``/mcp`` endpoint serves them over streamable HTTP, with a client per request
  carrying that request's bearer token, and a default bucket per request from its
  ``X-Engram-Bucket`` header or ``?bucket=`` query parameter.

Every tool goes through the HTTP API with that client's token, so its scopes, its bucket
restriction and its tenant decide what a tool may do; an API error becomes a tool error with
the API's message.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

try:
    from mcp.server import MCPServer
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import CallToolResult, TextContent, ToolAnnotations
    from pydantic import Field
except ModuleNotFoundError as missing:  # the SDK is the "mcp" extra, not a dependency of the client
    raise ModuleNotFoundError(
        f'engram_client.mcp needs {missing.name}: pip install "engram-client[mcp]"', name=missing.name
    ) from missing

from engram_client import _core as core
from engram_client._async import AsyncEngram
from engram_client.errors import Conflict, EngramError, NotFound, PreconditionFailed, PreconditionRequired
from engram_client.models import Block, Bucket, Memory, Profile, ProfileFact

ClientFor = Callable[[Context], AsyncEngram | Awaitable[AsyncEngram]]
# A default bucket for every call, or one chosen per call from its context (the HTTP request).
DefaultBucket = str | Callable[[Context], str | None] | None
# search_memories(buckets=["*"]): every bucket the token can read.
ALL_BUCKETS = "*"

_MAX_LISTED_BUCKETS = 100
# Facts per list a get_profile answer carries (the digest chooses from all of them).
_PROFILE_FACTS = 25

INSTRUCTIONS = """\
Engram is long-term memory. Store durable, self-contained facts worth remembering across
conversations with add_memories (one fact per string, written so it makes sense on its own:
"Ana's sister lives in Porto", not "she lives there"). Before answering questions that may
depend on what you were told before, call search_memories with a natural-language question.
To know what is known about someone or something (the user, a person, a project), call
get_profile with the name. Use update_memory when a stored fact changed and delete_memory when
it was wrong. When a search returned a memory that clearly answered the question, or one that
clearly did not belong, say so with rate_memory (useful or irrelevant, with the query). Memories
live in buckets; list_buckets shows them, and a tool's bucket argument picks one by id or name
(it can be left out when a default bucket is configured or only one exists); search_memories
can search several at once with buckets. Memory blocks are a few short named texts you keep in
view every turn (your persona, what you know of the human): read them with get_blocks and change
them with edit_block."""

BucketArg = Annotated[
    str | None,
    Field(description="Bucket id (or name) to use; leave out for the default bucket. See list_buckets."),
]
MemoryId = Annotated[str, Field(description="The memory's id, as add_memories or search_memories returned it.")]


def create_server(client_for: ClientFor, *, default_bucket: DefaultBucket = None, name: str = "engram") -> MCPServer:
    """An MCP server with Engram's ten memory tools (get_blocks and edit_block for memory blocks).

    ``client_for(ctx)`` returns (or returns an awaitable of) the :class:`AsyncEngram` a tool
    call uses; the tools never close it. ``default_bucket`` (an id or a name, or a function of
    the call's context returning one or None) is used when a call names no bucket; without it,
    a token that sees exactly one bucket uses that one.
    """
    server = MCPServer(name, instructions=INSTRUCTIONS, version=core.__version__)

    def default_of(ctx: Context) -> str | None:
        return (default_bucket(ctx) if callable(default_bucket) else default_bucket) or None

    async def engram(ctx: Context) -> AsyncEngram:
        client = client_for(ctx)
        if inspect.isawaitable(client):
            client = await client
        return client

    async def bucket_id(api: AsyncEngram, bucket: str | None, ctx: Context) -> str:
        return await _resolve_bucket(api, bucket or default_of(ctx))

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True))
    async def add_memories(
        ctx: Context,
        contents: Annotated[
            str | list[str],
            Field(
                description="One fact, or a list of facts, to remember. Each should make sense on its own; "
                "a list is stored as a sequence (later items are understood in the light of earlier ones)."
            ),
        ],
        bucket: BucketArg = None,
        attributed_to: Annotated[
            Literal["user", "assistant"] | None,
            Field(description="Who stated it: 'user' or 'assistant'."),
        ] = None,
        agent_id: Annotated[str | None, Field(description="Id of the agent writing, to filter on later.")] = None,
        run_id: Annotated[
            str | None, Field(description="Id of the conversation or run; memories of one run give each other context.")
        ] = None,
        tags: Annotated[
            list[str] | None, Field(description="Short tags to filter searches by, e.g. ['family'].")
        ] = None,
        metadata: Annotated[
            dict[str, Any] | None, Field(description="Any JSON object kept with each memory (not searched).")
        ] = None,
    ) -> CallToolResult:
        """Remember: store facts worth keeping beyond this conversation (what the user said about
        themselves, their preferences, decisions, names, dates, plans). Call it when you learn such
        a fact; pass several at once as a list. Not for facts already stored (search first when
        unsure; the same text stored twice is kept once and answered as deduplicated) nor for
        changing one (update_memory). Returns each memory's id."""
        items = [contents] if isinstance(contents, str) else list(contents)
        if not items:
            raise ToolError("contents is empty: give a fact, or a list of facts.")
        fields = core.body(attributed_to=attributed_to, agent_id=agent_id, run_id=run_id, hint_tags=tags,
                           metadata=metadata)  # fmt: skip
        async with _api_errors():
            api = await engram(ctx)
            target = await bucket_id(api, bucket, ctx)
            written = await api.add_memories(target, [{"content": text, **fields} for text in items])
        return _result({"bucket": target, "memories": [{"id": w.id, "deduplicated": w.deduplicated} for w in written]})

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def search_memories(
        ctx: Context,
        query: Annotated[str, Field(description="What to recall, as a natural-language question or keywords.")],
        bucket: BucketArg = None,
        buckets: Annotated[
            list[str] | None,
            Field(
                description="Search several buckets together instead of one: their ids or names, or ['*'] for every "
                "bucket this token can read. One ranking, one limit and one token budget; each result names its "
                "bucket. Leave out to search bucket (or the default bucket)."
            ),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=100, description="At most this many memories (1-100).")] = 10,
        token_budget: Annotated[
            int | None, Field(ge=1, description="Return only the best memories whose text fits in this many tokens.")
        ] = None,
        mode: Annotated[
            Literal["hybrid", "vector", "keyword", "graph"] | None,
            Field(description="Retrieval: 'hybrid' (default: meaning and words), 'vector', 'keyword' or 'graph'."),
        ] = None,
        filters: Annotated[
            dict[str, Any] | None,
            Field(
                description="Optional filters: hint_tags (list, all present), agent_id, run_id, attributed_to, "
                "created_after / created_before (ISO 8601), importance_min (0-1), include_superseded (bool), "
                "as_of (ISO 8601: memory as it stood then)."
            ),
        ] = None,
        excerpt: Annotated[
            Literal["auto", "passage", "whole"] | None,
            Field(
                description="How much of a long memory a result holds: 'auto' (default) its passage that matched, "
                "with a little context, when the whole memory would not fit token_budget; 'passage' always that "
                "passage; 'whole' always the whole memory (one that does not fit is left out). A result that is a "
                "passage says excerpt: true; get_memory reads the whole memory."
            ),
        ] = None,
    ) -> CallToolResult:
        """Recall: find the stored memories that best answer a question, best first, each with its id,
        content, date (when it was stated) and relevance score. Call it before answering anything that
        may depend on what you were told earlier (the user's preferences, people, past decisions),
        and before storing a fact, to see whether it is known. For everything about one person or
        thing at once, get_profile is shorter."""
        if bucket and buckets is not None:
            raise ToolError("Give bucket or buckets, not both.")
        fields: dict[str, Any] = {"limit": limit, "token_budget": token_budget, "mode": mode, "filters": filters,
                                  "excerpt": excerpt}  # fmt: skip
        async with _api_errors():
            api = await engram(ctx)
            if buckets is None:
                found = await api.search(await bucket_id(api, bucket, ctx), query, **fields)
            else:
                chosen = None if ALL_BUCKETS in buckets else await _resolve_buckets(api, buckets)
                found = await api.search_buckets(query, buckets=chosen, **fields)
        results = []
        for hit in found:
            row: dict[str, Any] = {"id": hit.id}
            if buckets is not None:
                row["bucket"] = hit.bucket_id
            row |= {"content": hit.content, "date": _date(hit.created_at),
                    "score": round(hit.score, 4) if hit.score is not None else None}  # fmt: skip
            if hit.excerpt:
                row["excerpt"] = True  # content is the matched passage of a longer memory
            if hit.superseded:
                row["superseded"] = True  # a later memory replaced this fact
            results.append(row)
        answer: dict[str, Any] = {"results": results}
        if buckets is not None:
            answer["buckets"] = [_compact({"id": b.get("id"), "name": b.get("name")}) for b in found.buckets]
        if found.warnings:
            answer["warnings"] = found.warnings
        return _result(answer)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def get_memory(ctx: Context, id: MemoryId) -> CallToolResult:
        """Read one memory whole by its id (from search_memories or add_memories): its content, when it
        was stated, by whom, its tags and metadata. Use it when a search result is an excerpt of a longer
        memory or you need its details; to find memories, use search_memories."""
        async with _api_errors():
            memory = await (await engram(ctx)).get_memory(id)
        return _result(_memory(memory))

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True))
    async def update_memory(
        ctx: Context,
        id: MemoryId,
        content: Annotated[str, Field(description="The memory's new text, replacing the old (kept in its history).")],
    ) -> CallToolResult:
        """Correct a memory: replace its text when the user corrects a stored fact or it changed
        (moved, new job, new preference). Find its id with search_memories first; the old text stays in
        the memory's history. To add a new, separate fact use add_memories."""
        async with _api_errors():
            memory = await (await engram(ctx)).update_memory(id, content=content)
        return _result({"updated": True, **_memory(memory)})

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True))
    async def delete_memory(ctx: Context, id: MemoryId) -> CallToolResult:
        """Forget a memory: when the user asks you to forget something, or a stored fact was never
        true. A fact that changed is better corrected with update_memory. An operator can still restore
        it for a while."""
        async with _api_errors():
            await (await engram(ctx)).delete_memory(id)
        return _result({"id": id, "deleted": True})

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False))
    async def rate_memory(
        ctx: Context,
        id: MemoryId,
        signal: Annotated[
            Literal["useful", "irrelevant"],
            Field(description="'useful': it helped answer the query; 'irrelevant': it did not belong in the answer."),
        ],
        query: Annotated[str, Field(description="The query search_memories was asked when it returned the memory.")],
    ) -> CallToolResult:
        """Teach recall: say a memory search_memories returned was useful for the query or irrelevant to it.
        Later searches with similar questions rank a useful memory higher and an irrelevant one lower."""
        async with _api_errors():
            rated = await (await engram(ctx)).rate(id, signal, query=query)
        return _result({"id": id, "rated": rated.signal})

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def get_profile(
        ctx: Context,
        name: Annotated[
            str | None,
            Field(description="Who or what: a name or alias ('Maya', 'Maya Patel', 'user sister'), or 'user'."),
        ] = None,
        entity_id: Annotated[
            str | None, Field(description="The entity's id instead of a name (from an earlier answer's candidates).")
        ] = None,
        bucket: BucketArg = None,
        as_of: Annotated[
            str | None, Field(description="ISO 8601: what was known as of this time (default: now).")
        ] = None,
        budget: Annotated[int, Field(ge=1, le=4000, description="Tokens the digest may take (default 300).")] = 300,
    ) -> CallToolResult:
        """What is known about a person, place or thing right now: a short digest to rely on, the
        current facts (with the ids of the memories stating them) and what changed before. Use it
        before answering about someone the user has talked about ('user' for the user); it makes no
        search, so for a question about an event or a topic use search_memories."""
        if (name is None) == (entity_id is None):
            raise ToolError("Give name or entity_id (one of them).")
        async with _api_errors():
            api = await engram(ctx)
            target = await bucket_id(api, bucket, ctx)
            try:
                profile = await api.get_profile(target, name=name, entity_id=entity_id, as_of=as_of, budget=budget,
                                                limit=_PROFILE_FACTS)  # fmt: skip
            except Conflict as exc:
                if exc.code != "ambiguous_name":
                    raise
                choices = "; ".join(f"{c['name']} ({c['type']}, entity_id {c['id']})" for c in exc.candidates)
                raise ToolError(f"{exc.message} Candidates: {choices}.") from exc
        return _result(_profile(profile))

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def list_buckets(ctx: Context) -> CallToolResult:
        """List the memory buckets this token can use (id, name, description) and which one is the
        default. Use it when a tool asks which bucket, or to choose buckets for search_memories."""
        async with _api_errors():
            api = await engram(ctx)
            buckets = []
            async for bucket in api.list_buckets():
                buckets.append(bucket)
                if len(buckets) > _MAX_LISTED_BUCKETS:
                    break
            default = _default_of(buckets, default_of(ctx))
        answer: dict[str, Any] = {
            "buckets": [_bucket(b) for b in buckets[:_MAX_LISTED_BUCKETS]],
            "default": default,
        }
        if len(buckets) > _MAX_LISTED_BUCKETS:
            answer["truncated"] = True
        return _result(answer)

    # --- memory blocks --------------------------------------------------------------------------

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def get_blocks(
        ctx: Context,
        bucket: BucketArg = None,
        labels: Annotated[
            list[str] | None, Field(description="Only these blocks, e.g. ['persona', 'human']; default: all.")
        ] = None,
        agent_id: Annotated[
            str | None,
            Field(description="Your agent id: your own blocks and the shared ones (default: all you may read)."),
        ] = None,
    ) -> CallToolResult:
        """Read your memory blocks: short named texts kept in view every turn (persona, human, or any
        label), each with its etag. Call it at the start of a conversation, and before edit_block
        replaces a block's whole text (pass the etag you read)."""
        async with _api_errors():
            api = await engram(ctx)
            target = await bucket_id(api, bucket, ctx)
            blocks = [
                b async for b in api.list_blocks(target)
                if (labels is None or b.label in labels) and (agent_id is None or b.agent_id in (None, agent_id))
            ]  # fmt: skip
        return _result({"bucket": target, "blocks": [_block(b) for b in blocks]})

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False))
    async def edit_block(
        ctx: Context,
        label: Annotated[str, Field(description="The block's name: lower-case letters, digits, _ and -.")],
        bucket: BucketArg = None,
        append: Annotated[
            str | None, Field(description="A line to add at the end (creates the block if missing).")
        ] = None,
        replace: Annotated[
            str | None, Field(description="Text in the block to replace (its first occurrence) …")
        ] = None,
        replace_with: Annotated[str | None, Field(description="… by this text.")] = None,
        content: Annotated[
            str | None, Field(description="The block's whole new text (needs etag if the block exists).")
        ] = None,
        etag: Annotated[
            str | None,
            Field(description="The etag get_blocks gave: the change is refused if the block changed since."),
        ] = None,
        reason: Annotated[str | None, Field(description="Why, in a few words (kept in the block's history).")] = None,
        agent_id: Annotated[
            str | None, Field(description="Your agent id, for your own block; default: shared.")
        ] = None,
        max_tokens: Annotated[int | None, Field(ge=1, le=32768, description="The block's token limit.")] = None,
    ) -> CallToolResult:
        """Change a memory block: append a line, replace a part, or set its whole text (content, with
        the etag from get_blocks). An append or replacement without etag applies to the block as it
        is now, so no one else's edit is lost; a whole-text change based on an old read is refused.
        Say why in reason. Text over the block's token limit is refused and nothing changes."""
        edits = [
            name
            for name, value in (("append", append), ("replace", replace), ("content", content))
            if value is not None
        ]
        if len(edits) > 1 or (replace is None) != (replace_with is None):
            raise ToolError("Give one of append, replace (with replace_with) and content.")
        if not edits and max_tokens is None:
            raise ToolError("Give append, replace with replace_with, content or max_tokens.")
        async with _api_errors():
            api = await engram(ctx)
            target = await bucket_id(api, bucket, ctx)
            try:
                block = await _edit(api, target, label, agent_id=agent_id, append=append, replace=replace,
                                    replace_with=replace_with, content=content, etag=etag, reason=reason,
                                    max_tokens=max_tokens)  # fmt: skip
            except PreconditionRequired as exc:
                raise ToolError(
                    f"The block {label!r} exists: to replace its whole text pass the etag from get_blocks "
                    f"(now {exc.etag}), or use append or replace."
                ) from exc
            except PreconditionFailed as exc:
                if exc.etag is None:
                    raise ToolError(f"The block {label!r} is gone: read the blocks again with get_blocks.") from exc
                raise ToolError(
                    f"The block {label!r} changed since you read it (now version {exc.version}, etag {exc.etag}): "
                    "read it again with get_blocks and reapply your change."
                ) from exc
        return _result({"edited": True, **_block(block)})

    return server


async def _edit(api: AsyncEngram, bucket: str, label: str, *, agent_id, append, replace, replace_with, content, etag,
                reason, max_tokens) -> Block:  # fmt: skip
    """edit_block's request: a whole text is a PUT (a create without etag); the rest a PATCH,
    with the etag or on any version. An append to a block that does not exist creates it."""
    if content is not None:
        return await api.put_block(bucket, label, content, agent_id=agent_id, max_tokens=max_tokens, reason=reason,
                                   if_match=etag)  # fmt: skip
    try:
        return await api.edit_block(bucket, label, if_match=etag or "*", append=append, replace=replace,
                                    replace_with=replace_with, max_tokens=max_tokens, reason=reason,
                                    agent_id=agent_id)  # fmt: skip
    except NotFound:
        if append is None or etag is not None:
            raise
    # No such block yet: the append is its first text (a create only; a block made meanwhile: 412).
    return await api.put_block(bucket, label, append, agent_id=agent_id, max_tokens=max_tokens, reason=reason,
                               create_only=True)  # fmt: skip


@asynccontextmanager
async def _api_errors() -> AsyncIterator[None]:
    """Turns an API error into a tool error carrying the API's message and code (the model
    reads it; a traceback would tell it nothing)."""
    try:
        yield
    except EngramError as exc:
        raise ToolError(str(exc)) from exc


async def _resolve_buckets(api: AsyncEngram, chosen: list[str]) -> list[str]:
    """The ids of ``chosen`` (ids or names), in order, each once; names are looked up in one
    listing of the token's buckets."""
    if not chosen:
        raise ToolError("buckets is empty: name the buckets to search, or ['*'] for all of them.")
    ids: dict[str, str] = {}
    names = [b for b in chosen if _as_uuid(b) is None]
    by_name: dict[str, str] = {}
    if names:
        async for bucket in api.list_buckets(page_size=_MAX_LISTED_BUCKETS):
            by_name.setdefault(bucket.name, bucket.id)
    for wanted in chosen:
        bucket_id = _as_uuid(wanted) or by_name.get(wanted)
        if bucket_id is None:
            raise ToolError(f"No bucket named {wanted!r} is visible to this token; list_buckets shows them.")
        ids.setdefault(bucket_id, wanted)
    return list(ids)


async def _resolve_bucket(api: AsyncEngram, chosen: str | None) -> str:
    """The bucket a call acts on: the one given (an id, or a bucket's name), else the only one
    the token sees."""
    if chosen:
        if (bucket_id := _as_uuid(chosen)) is not None:
            return bucket_id
        async for bucket in api.list_buckets():
            if bucket.name == chosen:
                return bucket.id
        raise ToolError(f"No bucket named {chosen!r} is visible to this token; list_buckets shows them.")
    first = []
    async for bucket in api.list_buckets(page_size=_MAX_LISTED_BUCKETS):
        first.append(bucket)
        if len(first) > 20:
            break
    if len(first) == 1:
        return first[0].id
    if not first:
        raise ToolError("This token sees no bucket: create one in Engram first.")
    names = ", ".join(f"{b.name} ({b.id})" for b in first[:20])
    raise ToolError(
        "Several buckets are available and no default bucket is configured: pass bucket (an id or a name), "
        f"one of {names}{', …' if len(first) > 20 else ''}."
    )


def _default_of(buckets: list[Bucket], default_bucket: str | None) -> str | None:
    if default_bucket:
        wanted = _as_uuid(default_bucket) or default_bucket
        for bucket in buckets:
            if wanted in (bucket.id, bucket.name):
                return bucket.id
        return _as_uuid(default_bucket)
    return buckets[0].id if len(buckets) == 1 else None


def _as_uuid(value: str) -> str | None:
    """``value`` as the API writes ids (lowercase, hyphenated) if it is one in any spelling."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


def _result(answer: dict[str, Any]) -> CallToolResult:
    """A tool's answer: compact JSON for the model to read (no indentation: a context window is
    counted in tokens), the same object as structured content for programs."""
    text = json.dumps(answer, ensure_ascii=False, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=answer)


def _block(block: Block) -> dict[str, Any]:
    return _compact({
        "label": block.label, "agent_id": block.agent_id, "content": block.content, "tokens": block.token_count,
        "max_tokens": block.max_tokens, "version": block.version, "etag": block.etag,
    }) | ({"content": ""} if block.content == "" else {})  # fmt: skip


def _bucket(bucket: Bucket) -> dict[str, Any]:
    return _compact({"id": bucket.id, "name": bucket.name, "description": bucket.description})


def _memory(memory: Memory) -> dict[str, Any]:
    """What a model needs of a memory (a write-only token's answer is its id alone)."""
    return _compact({
        "id": memory.id,
        "bucket": memory.bucket_id,
        "content": memory.content,
        "date": _date(memory.created_at),
        "attributed_to": memory.attributed_to,
        "agent_id": memory.agent_id,
        "run_id": memory.run_id,
        "tags": memory.hint_tags,
        "metadata": memory.metadata,
        "importance": memory.importance,
        "expires_at": _date(memory.expires_at),
        "superseded_by": memory.superseded_by,
    })  # fmt: skip


def _profile(profile: Profile) -> dict[str, Any]:
    """A profile as a model reads it: the digest first, then the facts with their dates and the
    ids of the memories stating them (for update_memory or delete_memory)."""
    entity = profile.entity
    return _compact({
        "entity": _compact({"id": entity.id, "name": entity.name, "type": entity.type, "aliases": entity.aliases})
        if entity is not None else None,
        "as_of": _date(profile.as_of),
        "digest": profile.digest,
        "current": [_fact(f) for f in profile.current],
        "history": [_fact(f) for f in profile.history],
        "truncated": profile.truncated or None,
    })  # fmt: skip


def _fact(fact: ProfileFact) -> dict[str, Any]:
    return _compact({
        "relation": fact.relation if fact.direction == "out" else f"{fact.relation} (of this entity)",
        "value": fact.value,
        "entity_id": fact.entity.id if fact.entity is not None else None,
        "from": _date(fact.valid_from),
        "to": _date(fact.valid_to),
        "memories": [m.id for m in fact.memories],
    })  # fmt: skip


def _compact(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v not in (None, [], {}, "")}


def _date(value: datetime | str | None) -> str | None:
    """A time as the model reads it best: UTC, to the second."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC)
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    return value


# --- the stdio server: engram-mcp -----------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    """``engram-mcp``: the tools over stdio, talking to a running Engram with one token."""
    parser = argparse.ArgumentParser(
        prog="engram-mcp",
        description="Serve Engram's memory tools to an MCP client over stdio.",
    )
    parser.add_argument("--url", help="Engram's address (default: $ENGRAM_URL, else http://127.0.0.1:8000)")
    parser.add_argument("--token", help="an API token (default: $ENGRAM_TOKEN)")
    parser.add_argument("--bucket", help="the default bucket, an id or a name (default: $ENGRAM_BUCKET)")
    parser.add_argument("--timeout", type=float, default=core.DEFAULT_TIMEOUT, help="seconds per request")
    args = parser.parse_args(argv)
    try:
        client = AsyncEngram(args.url, args.token, timeout=args.timeout)
    except EngramError as exc:
        parser.error(str(exc))
    server = create_server(lambda ctx: client, default_bucket=args.bucket or os.environ.get("ENGRAM_BUCKET") or None)
    # The SDK logs to stderr (stdout is the protocol); one line per HTTP request is noise there.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    server.run("stdio")


if __name__ == "__main__":
    main()
