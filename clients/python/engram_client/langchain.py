"""LangChain on Engram: :class:`EngramRetriever`, a ``BaseRetriever`` over Engram's search, and
:func:`engram_tools`, the ``remember`` and ``recall`` tools for any tool-calling agent.

    from engram_client.langchain import EngramRetriever, engram_tools

    retriever = EngramRetriever(bucket="team", token_budget=800)   # ENGRAM_URL, ENGRAM_TOKEN
    docs = retriever.invoke("what did we decide about billing deploys?")
    tools = engram_tools(bucket="assistant", agent_id="planner")   # [remember, recall]

``pip install "engram-client[langchain]"``.
"""

from __future__ import annotations

from typing import Any, Literal

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.tools import BaseTool, StructuredTool, ToolException
    from pydantic import ConfigDict, Field, PrivateAttr
except ModuleNotFoundError as missing:  # the framework is the "langchain" extra, not a dependency
    raise ModuleNotFoundError(
        f'engram_client.langchain needs {missing.name}: pip install "engram-client[langchain]"', name=missing.name
    ) from missing

from engram_client._async import AsyncEngram
from engram_client._bridge import Buckets, Connection, Steps, call
from engram_client._sync import Engram
from engram_client.errors import EngramError, NotFound
from engram_client.models import SearchHit

__all__ = ["EngramRetriever", "engram_tools"]

SearchMode = Literal["hybrid", "vector", "keyword", "graph"]


def _hit_document(hit: SearchHit, bucket_id: str | None) -> Document:
    metadata = {
        "id": hit.id, "bucket_id": hit.bucket_id or bucket_id, "score": hit.score,
        "created_at": hit.created_at.isoformat() if hit.created_at else None, "attributed_to": hit.attributed_to,
        "agent_id": hit.agent_id, "run_id": hit.run_id, "hint_tags": hit.hint_tags or [],
        "metadata": hit.metadata or {}, "superseded": hit.superseded, "token_count": hit.token_count,
    }  # fmt: skip
    return Document(page_content=hit.content or "", metadata=metadata, id=hit.id)


def _search(
    buckets: Buckets, names: list[str], query: str, options: dict[str, Any]
) -> Steps[tuple[list[SearchHit], str | None]]:
    """Search the buckets named (all the token reads when none): one bucket's search, or one
    search across several, fused once and cut to one budget."""
    ids = []
    for name in names:
        bucket_id = yield from buckets.resolve(name, create=False)
        if bucket_id is None:
            raise NotFound(f"No bucket {name!r} is visible to this token.", code="not_found", status=404)
        ids.append(bucket_id)
    if len(ids) == 1:
        return list((yield call("search", ids[0], query, **options))), ids[0]
    return list((yield call("search_buckets", query, buckets=ids or None, **options))), None


class EngramRetriever(BaseRetriever):
    """Documents from Engram's search: each hit's content, with its id, bucket, score, time,
    agent, run, tags and metadata in the document's ``metadata``.

    ``bucket`` (a name or an id) or ``buckets`` (several, searched together: one ranking,
    one budget); neither: every bucket the token reads. ``token_budget`` returns the best
    hits whose tokens fit; ``limit`` caps their number; ``filters`` are the API's
    (``hint_tags``, ``agent_id``, ``run_id``, ``attributed_to``, ``created_after``, …);
    ``mode`` is ``hybrid`` (the default), ``vector``, ``keyword`` or ``graph``. ``url`` and
    ``token`` default to ``ENGRAM_URL`` and ``ENGRAM_TOKEN``; ``client`` / ``async_client``
    reuse clients you made.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    url: str | None = None
    token: str | None = Field(default=None, repr=False, exclude=True)
    bucket: str | None = None
    buckets: list[str] | None = None
    limit: int | None = None
    token_budget: int | None = None
    filters: dict[str, Any] | None = None
    mode: SearchMode | None = None
    client: Engram | None = Field(default=None, repr=False, exclude=True)
    async_client: AsyncEngram | None = Field(default=None, repr=False, exclude=True)

    _engram: Connection = PrivateAttr()
    _bucket_ids: Buckets = PrivateAttr(default_factory=Buckets)

    def model_post_init(self, context: Any, /) -> None:
        self._engram = Connection(self.url, self.token, self.client, self.async_client)

    def _steps(self, query: str) -> Steps[list[Document]]:
        names = [self.bucket] if self.bucket else list(self.buckets or [])
        options = {"limit": self.limit, "token_budget": self.token_budget, "filters": self.filters, "mode": self.mode}
        hits, bucket_id = yield from _search(self._bucket_ids, names, query, options)
        return [_hit_document(hit, bucket_id) for hit in hits]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return self._engram.run(self._steps(query))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return await self._engram.arun(self._steps(query))


def engram_tools(
    *,
    bucket: str,
    url: str | None = None,
    token: str | None = None,
    agent_id: str | None = None,
    run_id: str | None = None,
    recall_buckets: list[str] | None = None,
    token_budget: int = 800,
    limit: int | None = None,
    client: Engram | None = None,
    async_client: AsyncEngram | None = None,
) -> list[BaseTool]:
    """The ``remember`` and ``recall`` tools, for any LangChain tool-calling agent.

    ``remember`` writes a fact into ``bucket`` (a name or an id; created on the first write
    if the token may), as ``agent_id`` and in ``run_id`` when given. ``recall`` searches
    ``bucket`` (or ``recall_buckets``, together) and answers the memories that fit
    ``token_budget``, one per line, newest facts as Engram ranks them. What Engram refuses
    (a read-only token's write, a bucket the token does not reach) becomes the tool's answer
    — ``Engram refused: …`` — so the model reads why, and the agent goes on.
    """
    engram = Connection(url, token, client, async_client)
    buckets = Buckets()
    recall_filters = {"agent_id": agent_id} if agent_id else None

    def remember_steps(fact: str, tags: list[str] | None) -> Steps[str]:
        bucket_id = yield from buckets.resolve(bucket, create=True)
        written = yield call("add_memory", bucket_id, fact, hint_tags=tags or None, agent_id=agent_id, run_id=run_id)
        return f"Already remembered: {fact}" if written.deduplicated else f"Remembered: {fact}"

    def recall_steps(query: str) -> Steps[str]:
        names = recall_buckets or [bucket]
        options = {"token_budget": token_budget, "limit": limit, "filters": recall_filters}
        hits, _ = yield from _search(buckets, names, query, options)
        return "\n".join(f"- {hit.content}" for hit in hits) or "Nothing remembered matches that."

    def remember(fact: str, tags: list[str] | None = None) -> str:
        try:
            return engram.run(remember_steps(fact, tags))
        except EngramError as exc:
            raise ToolException(f"Engram refused: {exc}") from exc

    async def aremember(fact: str, tags: list[str] | None = None) -> str:
        try:
            return await engram.arun(remember_steps(fact, tags))
        except EngramError as exc:
            raise ToolException(f"Engram refused: {exc}") from exc

    def recall(query: str) -> str:
        try:
            return engram.run(recall_steps(query))
        except EngramError as exc:
            raise ToolException(f"Engram refused: {exc}") from exc

    async def arecall(query: str) -> str:
        try:
            return await engram.arun(recall_steps(query))
        except EngramError as exc:
            raise ToolException(f"Engram refused: {exc}") from exc

    return [
        StructuredTool.from_function(
            remember, coroutine=aremember, name="remember", handle_tool_error=True,
            description="Store one self-contained fact worth knowing in later conversations (a preference, "
            "a decision, a detail about the user or the work). Write it as a full sentence that makes sense "
            "on its own; optional tags group related facts.",
        ),
        StructuredTool.from_function(
            recall, coroutine=arecall, name="recall", handle_tool_error=True,
            description="Search long-term memory for facts relevant to a question, before answering "
            "something that earlier conversations may have settled. Ask in natural language.",
        ),
    ]  # fmt: skip
