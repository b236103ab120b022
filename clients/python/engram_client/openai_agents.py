"""The OpenAI Agents SDK on Engram: :class:`EngramSession`, a ``Session`` that keeps a
conversation's items as memories, and :func:`engram_tools`, ``function_tool`` s for long-term
memory.

    from agents import Agent, Runner
    from engram_client.openai_agents import EngramSession, engram_tools

    agent = Agent(name="Assistant", tools=engram_tools(bucket="assistant"))
    session = EngramSession("chat-42", bucket="conversations")    # ENGRAM_URL, ENGRAM_TOKEN
    await Runner.run(agent, "Hello", session=session)

``pip install "engram-client[openai-agents]"``.

A session's items are memories of one bucket (``bucket``), with the session id as their
``run_id``: each item's text is the memory's content (so the conversation is searchable with
everything else, and each memory carries its predecessors as context, as a run's memories do)
and the item itself, exactly as the SDK gave it, is in ``metadata["openai_agents"]``. Items
come back in the order they were added. Engram keeps a text once per bucket: an item whose
text the bucket holds already ("ok", "thanks") gets a short mark appended to its text; the item
itself is unchanged. An item is at most 16 KB as JSON (Engram's limit on ``metadata``).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

try:
    from agents import FunctionTool, function_tool
    from agents.memory import SessionSettings
except ModuleNotFoundError as missing:  # the framework is the "openai-agents" extra, not a dependency
    raise ModuleNotFoundError(
        f'engram_client.openai_agents needs {missing.name}: pip install "engram-client[openai-agents]"',
        name=missing.name,
    ) from missing

from engram_client._async import AsyncEngram
from engram_client._bridge import Buckets, Connection, Steps, call, take
from engram_client._sync import Engram
from engram_client.errors import EngramError, NotFound
from engram_client.models import Memory

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

__all__ = ["EngramSession", "engram_tools"]

META = "openai_agents"
TAG = "openai-agents-session"


def _item_text(item: dict[str, Any]) -> str:
    """What an item says, as text: a message's text, a tool call's name and arguments, a tool's
    output; the item as JSON otherwise."""
    kind = item.get("type") or ("message" if "role" in item else None)
    if kind == "message":
        content = item.get("content")
        if isinstance(content, str):
            return content
        parts = [p.get("text") or p.get("refusal") or "" for p in content or [] if isinstance(p, dict)]
        return "\n".join(p for p in parts if p)
    if kind == "function_call":
        return f"{item.get('name')}({item.get('arguments') or ''})"
    if kind == "function_call_output":
        output = item.get("output")
        return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    return json.dumps(item, ensure_ascii=False, sort_keys=True)


def _attribution(item: dict[str, Any]) -> str | None:
    role = item.get("role")
    if role == "user":
        return "user"
    if role == "assistant" or item.get("type") == "function_call":
        return "assistant"
    return None


class EngramSession:
    """The SDK's ``Session`` protocol, kept in Engram: the items of session ``session_id`` are
    memories of ``bucket`` (a name or an id, created on the first write if the token may) with
    ``run_id=session_id``, and ``agent_id`` when given. ``url`` and ``token`` default to
    ``ENGRAM_URL`` and ``ENGRAM_TOKEN``; ``client`` / ``async_client`` reuse clients you made.
    ``session_settings``: the SDK's (``limit``: how many of the latest items ``get_items``
    returns by default)."""

    def __init__(
        self,
        session_id: str,
        *,
        bucket: str = "agent-sessions",
        agent_id: str | None = None,
        url: str | None = None,
        token: str | None = None,
        session_settings: SessionSettings | None = None,
        client: Engram | None = None,
        async_client: AsyncEngram | None = None,
    ) -> None:
        self.session_id = session_id
        self.bucket = bucket
        self.agent_id = agent_id
        self.session_settings = session_settings
        self._engram = Connection(url, token, client, async_client)
        self._buckets = Buckets()

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with ``limit``, the latest ``limit`` of them."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        rows = await self._engram.arun(self._rows(limit))
        return [row.metadata[META]["item"] for row in reversed(rows)]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        if items:
            await self._engram.arun(self._add([dict(item) for item in items]))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the latest item and return it (``None`` when the session is empty)."""
        return await self._engram.arun(self._pop())

    async def clear_session(self) -> None:
        """Delete every item of the session (restorable for the bucket's ``retention_days``)."""
        await self._engram.arun(self._clear())

    def close(self) -> None:
        self._engram.close()

    # --- steps ---------------------------------------------------------------------------------

    def _rows(self, limit: int | None) -> Steps[list[Memory]]:
        """The session's memories, newest first (``limit`` of them)."""
        if limit is not None and limit <= 0:
            return []
        bucket = yield from self._buckets.resolve(self.bucket, create=False)
        if bucket is None:
            return []
        page = min(limit or 500, 500)
        rows = yield take("list_memories", bucket, run_id=self.session_id, hint_tags=[TAG], page_size=page, n=limit)
        return [row for row in rows if isinstance((row.metadata or {}).get(META), dict)]

    def _add(self, items: list[dict[str, Any]]) -> Steps[None]:
        bucket = yield from self._buckets.resolve(self.bucket, create=True)
        # Explicit times keep the items' order, also for one written again after a collision.
        start = datetime.now(UTC)
        memories = []
        for i, item in enumerate(items):
            memory = {
                "content": _item_text(item).strip() or json.dumps(item, ensure_ascii=False, sort_keys=True),
                "run_id": self.session_id, "agent_id": self.agent_id, "attributed_to": _attribution(item),
                "hint_tags": [TAG], "created_at": (start + timedelta(microseconds=i)).isoformat(),
                "metadata": {META: {"session_id": self.session_id, "item": item}},
            }  # fmt: skip
            memories.append({k: v for k, v in memory.items() if v is not None})
        results = []
        for first in range(0, len(memories), 1000):
            results += yield call("add_memories", bucket, memories[first : first + 1000])
        # A text the bucket held already (another item's, another session's) was not written:
        # write it again, told apart by a mark.
        for memory, result in zip(memories, results, strict=True):
            if result.deduplicated:
                memory["content"] += f" ({uuid.uuid4().hex[:8]})"
                yield call("add_memories", bucket, [memory])

    def _pop(self) -> Steps[Any]:
        rows = yield from self._rows(1)
        if not rows:
            return None
        try:
            yield call("delete_memory", rows[0].id)
        except NotFound:
            return None  # popped meanwhile by another caller
        return rows[0].metadata[META]["item"]

    def _clear(self) -> Steps[None]:
        for row in (yield from self._rows(None)):
            with contextlib.suppress(NotFound):  # deleted meanwhile
                yield call("delete_memory", row.id)


def engram_tools(
    *,
    bucket: str,
    url: str | None = None,
    token: str | None = None,
    agent_id: str | None = None,
    run_id: str | None = None,
    recall_buckets: list[str] | None = None,
    token_budget: int = 800,
    client: Engram | None = None,
    async_client: AsyncEngram | None = None,
) -> list[FunctionTool]:
    """``remember`` and ``recall``, function tools for an ``Agent``'s long-term memory.

    ``remember`` writes a fact into ``bucket`` (a name or an id; created on the first write if
    the token may), as ``agent_id`` and in ``run_id`` when given; ``recall`` searches
    ``bucket`` (or ``recall_buckets`` together) and answers the memories that fit
    ``token_budget``, one per line, held to ``agent_id`` when given. What Engram refuses is
    the tool's answer (``Engram refused: …``), for the model to read."""
    engram = Connection(url, token, client, async_client)
    buckets = Buckets()
    filters = {"agent_id": agent_id} if agent_id else None

    def remember_steps(fact: str) -> Steps[str]:
        bucket_id = yield from buckets.resolve(bucket, create=True)
        written = yield call("add_memory", bucket_id, fact, agent_id=agent_id, run_id=run_id)
        return f"Already remembered: {fact}" if written.deduplicated else f"Remembered: {fact}"

    def recall_steps(query: str) -> Steps[str]:
        ids = []
        for name in recall_buckets or [bucket]:
            bucket_id = yield from buckets.resolve(name, create=False)
            if bucket_id is None:
                raise NotFound(f"No bucket {name!r} is visible to this token.", code="not_found", status=404)
            ids.append(bucket_id)
        answer = yield call("search_buckets", query, buckets=ids, token_budget=token_budget, filters=filters)
        return "\n".join(f"- {hit.content}" for hit in answer) or "Nothing remembered matches that."

    async def remember(fact: str) -> str:
        """Store one self-contained fact worth knowing in later conversations (a preference, a
        decision, a detail about the user or the work), written as a full sentence.

        Args:
            fact: The fact, as a sentence that makes sense on its own.
        """
        try:
            return await engram.arun(remember_steps(fact))
        except EngramError as exc:
            return f"Engram refused: {exc}"

    async def recall(query: str) -> str:
        """Search long-term memory for facts relevant to a question, before answering something
        that earlier conversations may have settled.

        Args:
            query: The question, in natural language.
        """
        try:
            return await engram.arun(recall_steps(query))
        except EngramError as exc:
            return f"Engram refused: {exc}"

    return [function_tool(remember), function_tool(recall)]
