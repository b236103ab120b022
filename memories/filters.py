"""The filters a search or a listing narrows a bucket's memories by, defined once.

Each filter is a field of :class:`MemoryFilters` whose metadata names the column it tests
and how (:data:`LOOKUPS`). The same definition writes the raw SQL the retrieval signals
run (:meth:`MemoryFilters.sql`), the ORM condition the listings use
(:meth:`MemoryFilters.q`) and the API's input fields (``memories/serializers.py``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from django.db.models import Q
from django.db.models.functions import Now

from memories.models import Attribution, Scope
from tenants.models import AgentRestriction

# lookup → (SQL operator and placeholder, Django lookup). A filter whose value is None (or,
# for tags, empty) is not applied.
LOOKUPS = {
    "exact": ("= %s", "exact"),
    "contains": ("@> %s::text[]", "contains"),
    # jsonb containment: every key given, with the same value (objects and arrays by containment).
    # The column is named twice: "<alias>.metadata @> %s::jsonb AND <alias>.metadata <> '{}'", the
    # second half so that the partial index idx_memories_metadata (rows with metadata) answers.
    "json_contains": ("@> %s::jsonb AND {column} <> '{{}}'::jsonb", "contains"),
    "gte": (">= %s", "gte"),
    "lt": ("< %s", "lt"),
    "lte": ("<= %s", "lte"),
}


def bucket_list(buckets) -> list:
    """``buckets`` as a list: one bucket, or a non-empty sequence of buckets of one tenant."""
    found = list(buckets) if isinstance(buckets, Sequence) else [buckets]
    if not found or len({b.tenant_id for b in found}) != 1:
        raise ValueError("a search reads one or more buckets of one tenant")
    return found


def in_buckets(buckets, alias: str | None = "m") -> tuple[list[str], list]:
    """The tenant and bucket predicates that lead every statement over ``buckets`` (a bucket,
    or several of one tenant) and their params: one bucket is ``bucket_id = %s``, as ever;
    several are ``bucket_id = ANY(%s::uuid[])`` (the same indexes answer). ``alias`` None:
    the columns unqualified."""
    found = bucket_list(buckets)
    at = f"{alias}." if alias else ""
    if len(found) == 1:
        return [f"{at}tenant_id = %s", f"{at}bucket_id = %s"], [found[0].tenant_id, found[0].pk]
    return [f"{at}tenant_id = %s", f"{at}bucket_id = ANY(%s::uuid[])"], [found[0].tenant_id, [b.pk for b in found]]


def _param(lookup: str, value: Any) -> Any:
    """A filter's value as its SQL placeholder takes it."""
    if lookup == "contains":
        return list(value)
    if lookup == "json_contains":
        return json.dumps(value)
    return value


def _filter(column: str, lookup: str, kind: str, **api: Any) -> Any:
    """A filter field: its ``column`` tested by ``lookup``; ``kind`` and ``api`` describe
    the value the API accepts for it (memories/serializers.py)."""
    return field(default=None, metadata={"column": column, "lookup": lookup, "kind": kind, "api": api})


MAX_ID_CHARS = 200
MAX_TOPIC_CHARS = 100


@dataclass(frozen=True)
class MemoryFilters:
    hint_tags: list[str] | None = _filter("hint_tags", "contains", "tags")
    agent_id: str | None = _filter("agent_id", "exact", "text", max_length=MAX_ID_CHARS)
    run_id: str | None = _filter("run_id", "exact", "text", max_length=MAX_ID_CHARS)
    attributed_to: str | None = _filter("attributed_to", "exact", "choice", choices=Attribution.choices)
    classified_scope: str | None = _filter("classified_scope", "exact", "choice", choices=Scope.choices)
    classified_topic: str | None = _filter("classified_topic", "exact", "text", max_length=MAX_TOPIC_CHARS)
    created_after: datetime | None = _filter("created_at", "gte", "datetime")
    created_before: datetime | None = _filter("created_at", "lt", "datetime")
    importance_min: float | None = _filter(
        "importance", "gte", "fraction", help_text="only memories whose importance is at least this (0 to 1)"
    )
    metadata: dict | None = _filter(
        "metadata",
        "json_contains",
        "metadata",
        help_text="only memories whose metadata contains this object: each key given with the same value "
        '(JSON containment: {"project": "apollo"} matches {"project": "apollo", "sprint": 3}; nested objects '
        "match by containment, an array holds the values given)",
    )
    # Expiry: memories past their expires_at are left out unless asked for.
    include_expired: bool = field(
        default=False,
        metadata={"kind": "flag", "api": {"help_text": "include memories past their expires_at (default false)"}},
    )
    # Supersession (graph app): include historical memories (demoted) or not, and
    # evaluate memory as it stood at a past time.
    include_superseded: bool = field(
        default=True,
        metadata={
            "kind": "flag",
            "api": {"help_text": "include memories a newer fact has superseded (demoted; default true)"},
        },
    )
    as_of: datetime | None = _filter(
        "created_at",
        "lte",
        "datetime",
        help_text="search memory as it stood at this time (newer memories and facts are ignored)",
    )
    # The query time supersession is evaluated at when as_of is not given (set by the search,
    # not by a caller's input).
    reference_time: datetime | None = None
    # The agents the request's token is held to (never a caller's input: the API sets it from
    # request.auth.agents). Every search signal and listing reads through sql() / q(), so a
    # token held to agents never meets another agent's memory.
    agents: AgentRestriction | None = None

    def _applied(self):
        """(column, lookup, value) of every filter given, in declaration order."""
        for spec in fields(self):
            lookup = spec.metadata.get("lookup")
            if lookup is None:
                continue
            value = getattr(self, spec.name)
            if value is None or (lookup in ("contains", "json_contains") and not value):
                continue
            yield spec.metadata["column"], lookup, value

    def _superseded_moment(self) -> datetime | None:
        return self.as_of or self.reference_time

    def sql(self, bucket, alias: str = "m") -> tuple[str, list]:
        """WHERE clause (tenant and bucket first, as every index leads with them) and its params.
        ``bucket``: one bucket, or several of one tenant (a search across buckets)."""
        clauses, params = in_buckets(bucket, alias)
        for column, lookup, value in self._applied():
            clauses.append(f"{alias}.{column} {LOOKUPS[lookup][0].format(column=f'{alias}.{column}')}")
            params.append(_param(lookup, value))
        if not self.include_superseded:
            moment = self._superseded_moment()
            if moment is None:
                clauses.append(f"{alias}.superseded_at IS NULL")
            else:
                clauses.append(f"({alias}.superseded_at IS NULL OR {alias}.superseded_at > %s)")
                params.append(moment)
        if not self.include_expired:
            # Expired now, whatever time a search evaluates dates at (and no parameter, so the
            # statement is the same from one search to the next: retrieval.stats caches by it).
            clauses.append(f"({alias}.expires_at IS NULL OR {alias}.expires_at > now())")
        if self.agents is not None:
            clause, agent_params = self.agents.sql(f"{alias}.agent_id")
            clauses.append(clause)
            params += agent_params
        return " AND ".join(clauses), params

    def q(self) -> Q:
        """The same filters as an ORM condition (the bucket is the queryset's: ``for_bucket``)."""
        condition = Q()
        for column, lookup, value in self._applied():
            condition &= Q(**{f"{column}__{LOOKUPS[lookup][1]}": list(value) if lookup == "contains" else value})
            if lookup == "json_contains":
                condition &= ~Q(**{column: {}})  # as the SQL form says it, for the partial index
        if not self.include_superseded:
            moment = self._superseded_moment()
            current = Q(superseded_at__isnull=True)
            condition &= current if moment is None else current | Q(superseded_at__gt=moment)
        if not self.include_expired:
            condition &= Q(expires_at__isnull=True) | Q(expires_at__gt=Now())
        if self.agents is not None:
            condition &= self.agents.q("agent_id")
        return condition
