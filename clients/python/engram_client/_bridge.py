"""What the framework adapters (:mod:`engram_client.langgraph`, :mod:`engram_client.langchain`,
:mod:`engram_client.openai_agents`) share.

An adapter's logic is written once, as a generator of *steps* — each one client call — that
receives each call's result (or has the call's :class:`~engram_client.EngramError` thrown into
it). :func:`run_sync` drives it with an :class:`~engram_client.Engram`, :func:`run_async` with
an :class:`~engram_client.AsyncEngram`, so the synchronous and the asynchronous paths of an
adapter cannot drift apart.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Generator
from typing import Any, TypeVar

from engram_client._async import AsyncEngram
from engram_client._sync import Engram
from engram_client.errors import Conflict, EngramError

T = TypeVar("T")
# ("call", method, args, kwargs): the method's result. ("take", method, args, kwargs, n): the
# first n items of the iterator the method returns (all of them when n is None).
Step = tuple[Any, ...]
Steps = Generator[Step, Any, T]


def call(method: str, *args: Any, **kwargs: Any) -> Step:
    return ("call", method, args, kwargs)


def take(method: str, *args: Any, n: int | None = None, **kwargs: Any) -> Step:
    return ("take", method, args, kwargs, n)


def run_sync(steps: Steps[T], client: Engram) -> T:
    value: Any = None
    error: EngramError | None = None
    while True:
        try:
            step = steps.throw(error) if error is not None else steps.send(value)
        except StopIteration as stop:
            return stop.value
        value, error = None, None
        try:
            method = getattr(client, step[1])
            if step[0] == "call":
                value = method(*step[2], **step[3])
            else:
                value = []
                for item in method(*step[2], **step[3]):
                    value.append(item)
                    if step[4] is not None and len(value) >= step[4]:
                        break
        except EngramError as exc:
            error = exc


async def run_async(steps: Steps[T], client: AsyncEngram) -> T:
    value: Any = None
    error: EngramError | None = None
    while True:
        try:
            step = steps.throw(error) if error is not None else steps.send(value)
        except StopIteration as stop:
            return stop.value
        value, error = None, None
        try:
            method = getattr(client, step[1])
            if step[0] == "call":
                value = await method(*step[2], **step[3])
            else:
                value = []
                items: AsyncIterator[Any] = method(*step[2], **step[3])
                async for item in items:
                    value.append(item)
                    if step[4] is not None and len(value) >= step[4]:
                        break
                await items.aclose()  # type: ignore[attr-defined]
        except EngramError as exc:
            error = exc


def is_uuid(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False


class Buckets:
    """Buckets named by name or id, resolved to ids once per adapter (names are unique in a
    tenant regardless of case, as the API has them)."""

    def __init__(self) -> None:
        self._ids: dict[str, str] = {}

    def resolve(self, bucket: str, *, create: bool) -> Steps[str | None]:
        """The id of ``bucket`` (a name or an id); a name the token does not see is created
        when ``create`` (the API refuses a read-only or bucket-restricted token: 403), else
        ``None``."""
        wanted = bucket if is_uuid(bucket) else bucket.casefold()
        if wanted in self._ids:
            return self._ids[wanted]
        for _ in range(2):
            for row in (yield take("list_buckets", page_size=500)):
                self._ids[row.id] = row.id
                if row.name:
                    self._ids[row.name.casefold()] = row.id
            if wanted in self._ids or not create or is_uuid(bucket):
                return self._ids.get(wanted)
            try:
                made = yield call("create_bucket", bucket)
            except Conflict:
                continue  # created meanwhile by another writer: read the list again
            self._ids[wanted] = self._ids[made.id] = made.id
            return made.id
        return self._ids.get(wanted)

    def forget(self, bucket: str) -> None:
        self._ids.pop(bucket if is_uuid(bucket) else bucket.casefold(), None)


class Connection:
    """The clients of an adapter: those given, or made from ``url`` and ``token``
    (``ENGRAM_URL`` / ``ENGRAM_TOKEN`` when left out). The synchronous one is made at once, so
    a missing token is said when the adapter is made. An asynchronous one made here belongs to
    the event loop it is first used in (as its ``httpx.AsyncClient`` does): a call from another
    loop gets a new one."""

    def __init__(
        self, url: str | None, token: str | None, client: Engram | None, async_client: AsyncEngram | None
    ) -> None:
        self._url, self._token = url, token
        self.sync = client or Engram(url, token)
        self._given = async_client
        self._made: tuple[asyncio.AbstractEventLoop, AsyncEngram] | None = None

    @property
    def async_(self) -> AsyncEngram:
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        if self._made is None or self._made[0] is not loop:
            self._made = (loop, AsyncEngram(self._url, self._token))
        return self._made[1]

    def run(self, steps: Steps[T]) -> T:
        return run_sync(steps, self.sync)

    async def arun(self, steps: Steps[T]) -> T:
        return await run_async(steps, self.async_)

    def close(self) -> None:
        self.sync.close()

    async def aclose(self) -> None:
        if self._made is not None:
            await self._made[1].aclose()
            self._made = None
