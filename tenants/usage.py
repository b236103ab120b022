"""Usage per tenant and day (``tenant_usage``), recorded off the request path.

Searches, written memories, returned tokens and quota refusals are added to a write-behind
buffer (``engram_site/buffers.py``) and written by one batched upsert that adds them to the
day's row: by the platform's buffer thread every ``FLUSH_SECONDS`` (``ENGRAM_ACCESS_BACKGROUND``),
when ``FLUSH_SIZE`` events are waiting, and at exit. Tests call :func:`flush`. A crash loses at
most the last few seconds of counts, never anything else. Days are UTC days.

Search latency is counted in fixed buckets (``LATENCY_BOUNDS_MS``), so a day's p50/p95 are
estimated from its histogram (:func:`percentile`) without keeping any sample.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, timedelta

from django.db import connection
from django.utils import timezone

from engram_site.buffers import WriteBehindBuffer
from tenants.models import TenantUsage

FLUSH_SECONDS = 5.0
FLUSH_SIZE = 1_000

# Upper bounds (ms) of the latency buckets; the last bucket holds everything slower.
LATENCY_BOUNDS_MS = (5, 10, 25, 50, 100, 200, 400, 800, 1600, 3200)
BUCKETS = len(LATENCY_BOUNDS_MS) + 1

REFUSALS = ("reads", "writes", "memories", "batch", "document_bytes")


@dataclass
class _Counts:
    memories_written: int = 0
    searches: int = 0
    tokens_returned: int = 0
    latency: list[int] = field(default_factory=lambda: [0] * BUCKETS)
    refused: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REFUSALS, 0))


def _today() -> date:
    return timezone.now().date()  # USE_TZ: aware UTC, so a UTC day


def latency_bucket(ms: float) -> int:
    for index, bound in enumerate(LATENCY_BOUNDS_MS):
        if ms <= bound:
            return index
    return len(LATENCY_BOUNDS_MS)


def _add(tenant_id, change) -> None:
    key = (uuid.UUID(str(tenant_id)), _today())

    def add(pending: dict) -> int:
        change(pending[key])
        return 1  # FLUSH_SIZE counts events

    BUFFER.record(add)


def record_search(*, tenant_id, milliseconds: float, tokens: int) -> None:
    def change(counts: _Counts) -> None:
        counts.searches += 1
        counts.tokens_returned += tokens
        counts.latency[latency_bucket(milliseconds)] += 1

    _add(tenant_id, change)


def record_writes(*, tenant_id, count: int) -> None:
    if count <= 0:
        return

    def change(counts: _Counts) -> None:
        counts.memories_written += count

    _add(tenant_id, change)


def record_refusal(*, tenant_id, kind: str) -> None:
    if kind not in REFUSALS:
        raise ValueError(f"unknown refusal {kind!r}")

    def change(counts: _Counts) -> None:
        counts.refused[kind] += 1

    _add(tenant_id, change)


def _write(batch: dict[tuple[uuid.UUID, date], _Counts]) -> int:
    """Add a batch of counts to their ``tenant_usage`` rows; returns how many rows.

    One statement; rows in (tenant, day) order, so processes flushing together lock them in
    the same order. Counts of a tenant deleted meanwhile are dropped (the join).
    """
    keys = sorted(batch)
    rows = [batch[k] for k in keys]
    columns = [
        [str(k[0]) for k in keys],
        [k[1] for k in keys],
        [r.memories_written for r in rows],
        [r.searches for r in rows],
        [r.tokens_returned for r in rows],
        # A 2-D array cannot be unnested row by row: each histogram travels as text.
        ["{" + ",".join(map(str, r.latency)) + "}" for r in rows],
        *([r.refused[kind] for r in rows] for kind in REFUSALS),
    ]
    refused = [f"refused_{kind}" for kind in REFUSALS]
    with connection.cursor() as cur:
        cur.execute(
            f"""
            INSERT INTO tenant_usage (tenant_id, day, memories_written, searches, tokens_returned,
                                      latency_histogram, {", ".join(refused)})
            SELECT v.tenant_id, v.day, v.written, v.searches, v.tokens, v.latency::bigint[],
                   {", ".join(f"v.{c}" for c in refused)}
            FROM unnest(%s::uuid[], %s::date[], %s::bigint[], %s::bigint[], %s::bigint[], %s::text[],
                        {", ".join(["%s::bigint[]"] * len(refused))})
                 AS v(tenant_id, day, written, searches, tokens, latency, {", ".join(refused)})
            JOIN tenants t ON t.id = v.tenant_id
            ORDER BY v.tenant_id, v.day
            ON CONFLICT (tenant_id, day) DO UPDATE SET
                memories_written = tenant_usage.memories_written + EXCLUDED.memories_written,
                searches = tenant_usage.searches + EXCLUDED.searches,
                tokens_returned = tenant_usage.tokens_returned + EXCLUDED.tokens_returned,
                latency_histogram = ARRAY(
                    SELECT coalesce(a, 0) + coalesce(b, 0)
                    FROM unnest(tenant_usage.latency_histogram, EXCLUDED.latency_histogram) AS h(a, b)
                ),
                {", ".join(f"{c} = tenant_usage.{c} + EXCLUDED.{c}" for c in refused)}
            """,
            columns,
        )
        return cur.rowcount


BUFFER = WriteBehindBuffer(
    write=_write,
    flush_seconds=FLUSH_SECONDS,
    flush_size=FLUSH_SIZE,
    failure="could not record usage of %d tenant-days",
    new=lambda: defaultdict(_Counts),
)
# Add what is pending to the rows now (usage pages, tests; the buffer thread and exit do it
# otherwise), or forget it (tests).
flush = BUFFER.flush
discard = BUFFER.discard


def storage_record(*, measured: dict) -> None:
    """Set today's ``memories_stored`` and ``storage_bytes`` from ``{tenant_id: (count, bytes)}``."""
    if not measured:
        return
    ids = sorted(measured, key=str)
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO tenant_usage (tenant_id, day, memories_stored, storage_bytes)
            SELECT v.tenant_id, %s, v.stored, v.bytes
            FROM unnest(%s::uuid[], %s::bigint[], %s::bigint[]) AS v(tenant_id, stored, bytes)
            JOIN tenants t ON t.id = v.tenant_id
            ORDER BY v.tenant_id
            ON CONFLICT (tenant_id, day) DO UPDATE
            SET memories_stored = EXCLUDED.memories_stored, storage_bytes = EXCLUDED.storage_bytes
            """,
            [_today(), [str(i) for i in ids], [measured[i][0] for i in ids], [measured[i][1] for i in ids]],
        )


def percentile(histogram: list[int], q: float) -> float | None:
    """The q-quantile (0..1) of a latency histogram in ms, interpolated linearly inside its
    bucket; None without searches. The open last bucket answers its lower bound."""
    total = sum(histogram or [])
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for index, count in enumerate(histogram):
        if count and seen + count >= rank:
            low = 0 if index == 0 else LATENCY_BOUNDS_MS[index - 1]
            if index >= len(LATENCY_BOUNDS_MS):
                return float(low)
            high = LATENCY_BOUNDS_MS[index]
            return low + (high - low) * max(0.0, rank - seen) / count
        seen += count
    return float(LATENCY_BOUNDS_MS[-1])


@dataclass
class Day:
    day: date
    memories_written: int = 0
    searches: int = 0
    tokens_returned: int = 0
    p50_ms: float | None = None
    p95_ms: float | None = None
    memories_stored: int | None = None
    storage_bytes: int | None = None
    refused: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REFUSALS, 0))
    histogram: list[int] = field(default_factory=list)

    @property
    def refusals(self) -> int:
        return sum(self.refused.values())


def usage_days(*, tenant_ids, days: int = 30) -> dict[uuid.UUID, list[Day]]:
    """The last ``days`` UTC days (today included, oldest first) per tenant, zeros where
    nothing happened; storage carried forward from the last measured day."""
    today = _today()
    first = today - timedelta(days=days - 1)
    ids = list(tenant_ids)
    series = {tid: {first + timedelta(days=i): Day(first + timedelta(days=i)) for i in range(days)} for tid in ids}
    for row in TenantUsage.objects.filter(tenant_id__in=ids, day__gte=first, day__lte=today):
        day = series[row.tenant_id][row.day]
        day.memories_written, day.searches = row.memories_written, row.searches
        day.tokens_returned = row.tokens_returned
        day.histogram = list(row.latency_histogram)
        day.p50_ms, day.p95_ms = percentile(row.latency_histogram, 0.5), percentile(row.latency_histogram, 0.95)
        day.memories_stored, day.storage_bytes = row.memories_stored, row.storage_bytes
        day.refused = {kind: getattr(row, f"refused_{kind}") for kind in REFUSALS}
    result = {}
    for tid, by_day in series.items():
        ordered = [by_day[d] for d in sorted(by_day)]
        last = (None, None)
        for day in ordered:
            if day.memories_stored is None:
                day.memories_stored, day.storage_bytes = last
            last = (day.memories_stored, day.storage_bytes)
        result[tid] = ordered
    return result
