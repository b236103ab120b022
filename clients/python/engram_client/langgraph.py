"""LangGraph's long-term memory store on Engram: :class:`EngramStore`, a ``BaseStore``.

    from engram_client.langgraph import EngramStore

    store = EngramStore()                        # ENGRAM_URL, ENGRAM_TOKEN
    store.put(("users", "ana"), "food", {"memory": "Ana is vegetarian."})
    store.get(("users", "ana"), "food").value    # {"memory": "Ana is vegetarian."}
    store.search(("users", "ana"), query="what does Ana eat?")

How LangGraph's items are kept (``pip install "engram-client[langgraph]"``):

- **Namespace → bucket.** With ``bucket=`` every namespace lives in that bucket (a name or an
  id; the only choice for a token restricted to one bucket). Without it, a namespace's first
  label names its bucket, created on the first write (``("users", "ana")`` → bucket ``users``).
  ``agent_position`` / ``run_position`` name the namespace labels that are also the memory's
  ``agent_id`` / ``run_id`` (``agent_position=1``: ``("agents", "planner")`` writes as agent
  ``planner``, which a token held to agents checks).
- **Item → memory.** One memory per (namespace, key). Its ``content`` is the item's text — the
  fields ``index`` names (the store's ``index={"fields": [...]}`` or the put's ``index=``), the
  whole value by default — which Engram embeds and indexes for hybrid search. The value
  itself, the namespace and the key are kept in the memory's ``metadata["langgraph"]``; tags
  (``hint_tags``) mark the item's key and each prefix of its namespace, which is how ``get``
  and the namespace-prefix of ``search`` find it. A ``put`` on an existing key edits that
  memory (Engram keeps the earlier value in the memory's history); ``delete`` deletes it
  (restorable for the bucket's ``retention_days``).
- **Search.** ``query=`` is Engram's hybrid search (vector + BM25 + graph, fused) in the
  namespace prefix; ``filter`` (exact values and ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``,
  ``$lte`` on the value's fields): its exact values and ``$eq`` go to the server as a
  metadata filter (JSON containment, so the server sends only candidates), and the whole filter
  is then applied to the hits, of which at most 100 are read: ``offset + limit`` beyond 100 is
  cut there. Without a query, items come newest first.
  Items put with ``index=False`` are not returned for a query (they are for a filter).
- **TTL.** ``ttl`` (minutes) becomes the memory's ``expires_at``, moved on by reads unless
  ``refresh_ttl=False`` (``supports_ttl`` is true). Engram leaves an expired memory out of
  every read at once; its purge job removes it later.
- Two items whose text is the same in one bucket would be one memory in Engram (a bucket
  holds a text once): the second gets its namespace and key appended to its text.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Literal

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        IndexConfig,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        TTLConfig,
        get_text_at_path,
        tokenize_path,
        validate_op_namespace,
    )
except ModuleNotFoundError as missing:  # the framework is the "langgraph" extra, not a dependency
    raise ModuleNotFoundError(
        f'engram_client.langgraph needs {missing.name}: pip install "engram-client[langgraph]"', name=missing.name
    ) from missing

from engram_client._async import AsyncEngram
from engram_client._bridge import Buckets, Connection, Steps, call, take
from engram_client._sync import Engram
from engram_client.errors import Conflict, NotFound
from engram_client.models import Memory, SearchHit

__all__ = ["EngramStore"]

META = "langgraph"  # the metadata key holding the item
MARK = "langgraph"  # the tag every item carries
MAX_HITS = 100  # the API's largest search limit
MAX_DEPTH = 47  # a memory takes 50 tags: the mark, the key and one per namespace prefix


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()[:32]


def prefix_tag(namespace: tuple[str, ...]) -> str:
    return f"lgns-{_digest(*namespace)}" if namespace else MARK


def key_tag(namespace: tuple[str, ...], key: str) -> str:
    return f"lgkey-{_digest(list(namespace), key)}"


def _matches(value: Any, wanted: Any) -> bool:
    """LangGraph's filter semantics (``langgraph.store.memory``): exact values, nested objects,
    and the comparison operators."""
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_compare(value, op, operand) for op, operand in wanted.items())
        return isinstance(value, dict) and all(_matches(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, (list, tuple)):
        return (isinstance(value, (list, tuple)) and len(value) == len(wanted)
                and all(_matches(a, b) for a, b in zip(value, wanted, strict=True)))  # fmt: skip
    return value == wanted


def _compare(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return value == operand
    if op == "$ne":
        return value != operand
    if op not in ("$gt", "$gte", "$lt", "$lte"):
        raise ValueError(f"Unsupported operator: {op}")
    try:
        a, b = float(value), float(operand)
    except (TypeError, ValueError):
        return False
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]


def _does_match(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = condition.path
    if len(namespace) < len(path):
        return False
    pairs = zip(namespace, path, strict=False) if condition.match_type == "prefix" else \
        zip(reversed(namespace), reversed(path), strict=False)  # fmt: skip
    return all(p == "*" or n == p for n, p in pairs)


class EngramStore(BaseStore):
    """LangGraph's ``BaseStore`` kept in Engram (see the module's docstring for the mapping).

    ``url`` and ``token`` default to ``ENGRAM_URL`` and ``ENGRAM_TOKEN``; ``client`` /
    ``async_client`` reuse clients you made. ``index``: LangGraph's index configuration, of
    which ``fields`` is read (Engram embeds with its own model: ``dims`` and ``embed`` are
    ignored). ``ttl``: LangGraph's ``TTLConfig`` (``default_ttl``, ``refresh_on_read``).
    ``mode``: the search mode (``hybrid``, ``vector``, ``keyword``, ``graph``).
    """

    supports_ttl = True

    def __init__(
        self,
        *,
        url: str | None = None,
        token: str | None = None,
        bucket: str | None = None,
        agent_position: int | None = None,
        run_position: int | None = None,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        mode: Literal["hybrid", "vector", "keyword", "graph"] = "hybrid",
        client: Engram | None = None,
        async_client: AsyncEngram | None = None,
    ) -> None:
        self._engram = Connection(url, token, client, async_client)
        self.bucket = bucket
        self.agent_position = agent_position
        self.run_position = run_position
        self.index_config = index
        self._fields = list((index or {}).get("fields") or ["$"])
        self.ttl_config = ttl
        self.mode = mode
        self._buckets = Buckets()

    def close(self) -> None:
        """Close the connections the store opened (not those of a ``client`` given)."""
        self._engram.close()

    # --- BaseStore ---------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._engram.run(self._batch(list(ops)))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await self._engram.arun(self._batch(list(ops)))

    # --- the operations, as steps (engram_client._bridge) -------------------------------------

    def _batch(self, ops: list[Op]) -> Steps[list[Result]]:
        for op in ops:
            validate_op_namespace(op)
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append((yield from self._get(op)))
            elif isinstance(op, PutOp):
                yield from self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append((yield from self._search(op)))
            elif isinstance(op, ListNamespacesOp):
                results.append((yield from self._list_namespaces(op)))
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
        return results

    def _bucket_of(self, namespace: tuple[str, ...], *, create: bool) -> Steps[str | None]:
        name = self.bucket or namespace[0]
        return (yield from self._buckets.resolve(name, create=create))

    def _find(
        self, bucket: str, namespace: tuple[str, ...], key: str, *, expired: bool = False
    ) -> Steps[Memory | None]:
        rows = yield take("list_memories", bucket, hint_tags=[key_tag(namespace, key)], page_size=1, n=1,
                          include_expired=expired or None)  # fmt: skip
        return rows[0] if rows else None

    def _get(self, op: GetOp) -> Steps[Item | None]:
        bucket = yield from self._bucket_of(op.namespace, create=False)
        if bucket is None:
            return None
        memory = yield from self._find(bucket, op.namespace, op.key)
        if memory is None:
            return None
        yield from self._refresh([memory], op.refresh_ttl)
        return _item(memory, Item)

    def _put(self, op: PutOp) -> Steps[None]:
        if len(op.namespace) > MAX_DEPTH:
            raise ValueError(f"EngramStore keeps namespaces of at most {MAX_DEPTH} labels")
        bucket = yield from self._bucket_of(op.namespace, create=op.value is not None)
        if bucket is None:
            return  # deleting from a bucket that does not exist: nothing to do
        existing = yield from self._find(bucket, op.namespace, op.key, expired=True)
        if op.value is None:
            if existing is not None:
                with contextlib.suppress(NotFound):  # deleted meanwhile
                    yield call("delete_memory", existing.id)
            return
        value = dict(op.value)
        now = datetime.now(UTC).isoformat()
        kept = {"namespace": list(op.namespace), "key": op.key, "value": value, "updated_at": now,
                "ttl": op.ttl, "indexed": op.index is not False}  # fmt: skip
        if existing is not None:
            kept["created_at"] = ((existing.metadata or {}).get(META) or {}).get("created_at")
        kept["created_at"] = kept.get("created_at") or now
        fields: dict[str, Any] = {
            "metadata": {META: kept},
            "hint_tags": [MARK, key_tag(op.namespace, op.key)]
            + [prefix_tag(op.namespace[:i]) for i in range(1, len(op.namespace) + 1)],
        }
        for name, position in (("agent_id", self.agent_position), ("run_id", self.run_position)):
            if position is not None and position < len(op.namespace):
                fields[name] = op.namespace[position]
        text = self._text(value, op.index)
        # A bucket holds a text once: an item whose text another item of the bucket has is
        # told apart by its place (and, if even that is taken, by a random mark).
        for content in (text, f"{text}\n({'/'.join(op.namespace)}/{op.key})", f"{text}\n({uuid.uuid4().hex})"):
            if existing is not None:
                try:
                    expiry = {"ttl_seconds": _seconds(op.ttl)} if op.ttl else {"expires_at": None}
                    yield call("update_memory", existing.id, content=content, **expiry, **fields)
                    return
                except Conflict as exc:
                    if exc.code != "duplicate_content":
                        raise
            else:
                written = yield call("add_memory", bucket, content, **fields,
                                     **({"ttl_seconds": _seconds(op.ttl)} if op.ttl else {}))  # fmt: skip
                if not written.deduplicated:
                    return
        raise Conflict(f"could not store {op.key!r}: its text collides with other memories of the bucket")

    def _text(self, value: dict[str, Any], index: Literal[False] | list[str] | None) -> str:
        fields = index or self._fields
        if fields == ["$"]:
            strings = [v for v in value.values() if isinstance(v, str)]
            texts = strings if len(strings) == len(value) == 1 else [f"{k}: {_plain(v)}" for k, v in value.items()]
        else:
            texts = [t for path in fields for t in get_text_at_path(value, tokenize_path(path))]
        text = "\n".join(t for t in texts if t.strip()).strip()
        return text or json.dumps(value, ensure_ascii=False, sort_keys=True)

    def _search(self, op: SearchOp) -> Steps[list[SearchItem]]:
        tag = prefix_tag(op.namespace_prefix)
        want = op.offset + op.limit
        if op.query:
            if op.namespace_prefix or self.bucket:
                bucket = yield from self._bucket_of(op.namespace_prefix or ("",), create=False)
                if bucket is None:
                    return []
                answer = yield call("search", bucket, op.query, mode=self.mode,
                                    filters=_server_filters(tag, op.filter),
                                    limit=MAX_HITS if op.filter else min(want, MAX_HITS))  # fmt: skip
            else:  # the whole store: every bucket the token reads
                answer = yield call("search_buckets", op.query, mode=self.mode,
                                    filters=_server_filters(tag, op.filter),
                                    limit=MAX_HITS if op.filter else min(want, MAX_HITS))  # fmt: skip
            rows: list[Memory | SearchHit] = [
                hit for hit in answer if _kept(hit).get("indexed", True) and _passes(hit, op.filter)
            ]
        else:
            buckets: list[str | None]
            if op.namespace_prefix or self.bucket:
                buckets = [(yield from self._bucket_of(op.namespace_prefix or ("",), create=False))]
            else:
                buckets = [row.id for row in (yield take("list_buckets", page_size=500))]
            rows = []
            for bucket in buckets:
                if bucket is None:
                    continue
                found = yield take("list_memories", bucket, hint_tags=[tag], page_size=min(max(want, 1), 500),
                                   metadata=_server_filters(tag, op.filter).get("metadata"),
                                   n=None if op.filter else want)  # fmt: skip
                rows += [row for row in found if _passes(row, op.filter)]
        rows = rows[op.offset : op.offset + op.limit]
        yield from self._refresh(rows, op.refresh_ttl)
        return [_item(row, SearchItem) for row in rows]

    def _list_namespaces(self, op: ListNamespacesOp) -> Steps[list[tuple[str, ...]]]:
        if self.bucket:
            bucket = yield from self._bucket_of(("",), create=False)
            buckets = [bucket] if bucket else []
        else:
            buckets = [row.id for row in (yield take("list_buckets", page_size=500))]
        seen: set[tuple[str, ...]] = set()
        for bucket in buckets:
            for row in (yield take("list_memories", bucket, hint_tags=[MARK], page_size=500)):
                namespace = tuple(_kept(row).get("namespace") or ())
                if namespace and all(_does_match(c, namespace) for c in op.match_conditions or ()):
                    seen.add(namespace if op.max_depth is None else namespace[: op.max_depth])
        return sorted(seen)[op.offset : op.offset + op.limit]

    def _refresh(self, rows: list[Any], refresh: bool) -> Steps[None]:
        """Move the expiry of the items read that have a TTL (LangGraph's refresh on read)."""
        if not refresh:
            return
        for row in rows:
            ttl = _kept(row).get("ttl")
            if ttl:
                with contextlib.suppress(NotFound):  # deleted meanwhile
                    yield call("update_memory", row.id, ttl_seconds=_seconds(ttl))


def _kept(row: Memory | SearchHit) -> dict[str, Any]:
    kept = (row.metadata or {}).get(META)
    return kept if isinstance(kept, dict) else {}


def _contained(wanted: Any) -> Any:
    """The part of a LangGraph filter the server can test by JSON containment: exact values and
    ``$eq`` operands (an exact list or object is contained in itself); ``None`` when nothing is.
    Containment is weaker than equality (a longer list contains a shorter one), so it only
    narrows what the server sends, and :func:`_passes` still decides."""
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return wanted.get("$eq")  # None: nothing the server can test
        parts = {k: c for k, v in wanted.items() if (c := _contained(v)) is not None}
        return parts or None
    return wanted


def _server_filters(tag: str, wanted: dict[str, Any] | None) -> dict[str, Any]:
    """The search's filters: the namespace's tag, and what of ``wanted`` containment can test."""
    filters: dict[str, Any] = {"hint_tags": [tag]}
    contained = _contained(wanted) if wanted else None
    if contained:
        filters["metadata"] = {META: {"value": contained}}
    return filters


def _passes(row: Memory | SearchHit, wanted: dict[str, Any] | None) -> bool:
    value = _kept(row).get("value") or {}
    return not wanted or all(_matches(value.get(k), v) for k, v in wanted.items())


def _item(row: Memory | SearchHit, kind: type[Item]) -> Any:
    kept = _kept(row)
    created = _when(kept.get("created_at")) or row.created_at
    updated = _when(kept.get("updated_at")) or created
    fields = {"namespace": tuple(kept.get("namespace") or ()), "key": kept.get("key", ""),
              "value": kept.get("value") or {}, "created_at": created, "updated_at": updated}  # fmt: skip
    if kind is SearchItem:
        return SearchItem(**fields, score=getattr(row, "score", None))
    return Item(**fields)


def _when(value: Any) -> datetime | None:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return value if isinstance(value, datetime) else None


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _seconds(ttl_minutes: float) -> int:
    return max(1, math.ceil(ttl_minutes * 60))
