"""Usage charts as server-rendered SVG: bars per day, drawn by console/templates/console/_chart.html.

Only numbers and geometry are computed here; labels go through the template's escaping.
No script and no inline style (the console's Content-Security-Policy): colours are classes
in console.css.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tenants.usage import BUCKETS, Day, percentile

WIDTH = 600
HEIGHT = 150
TOP = 12
BOTTOM = 20  # room for the day labels
LEFT = 44  # room for the scale


@dataclass
class Bar:
    x: float
    y: float
    width: float
    height: float
    series: int
    title: str  # the tooltip: "2026-11-26 searches: 12"


@dataclass
class Chart:
    key: str
    title: str
    unit: str
    maximum: float
    bars: list[Bar] = field(default_factory=list)
    labels: list[tuple[float, str]] = field(default_factory=list)
    legend: list[str] = field(default_factory=list)
    today: str = ""  # the last day's values, as text
    scale: str = ""  # the maximum, as text

    width: int = WIDTH
    height: int = HEIGHT
    baseline: int = HEIGHT - BOTTOM
    left: int = LEFT


def _format(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "bytes":
        for suffix in ("B", "KB", "MB", "GB", "TB"):
            if abs(value) < 1024 or suffix == "TB":
                return f"{value:.0f} {suffix}" if suffix == "B" else f"{value:.1f} {suffix}"
            value /= 1024
    if unit == "ms":
        return f"{value:.1f} ms"
    return f"{int(value):,}"


def bar_chart(*, key: str, title: str, days: list[Day], series: list[tuple[str, object]], unit: str = "") -> Chart:
    """Grouped bars: one group per day, one bar per ``(name, day -> value)`` series."""
    values = [[getter(day) for _, getter in series] for day in days]
    maximum = max([v for row in values for v in row if v is not None] or [0]) or 1
    plot_width = WIDTH - LEFT - 4
    plot_height = HEIGHT - TOP - BOTTOM
    group = plot_width / max(len(days), 1)
    bar_width = max(1.0, (group - 2) / len(series))
    chart = Chart(key=key, title=title, unit=unit, maximum=maximum, legend=[name for name, _ in series])
    chart.scale = _format(maximum, unit)
    for index, (day, row) in enumerate(zip(days, values, strict=True)):
        for s, value in enumerate(row):
            if not value:
                continue
            height = max(1.0, plot_height * value / maximum)
            chart.bars.append(
                Bar(
                    x=round(LEFT + index * group + 1 + s * bar_width, 2),
                    y=round(HEIGHT - BOTTOM - height, 2),
                    width=round(bar_width, 2),
                    height=round(height, 2),
                    series=s,
                    title=f"{day.day.isoformat()} {series[s][0]}: {_format(value, unit)}",
                )
            )
        if index % 7 == len(days) % 7 - 1 or index == len(days) - 1:
            chart.labels.append((round(LEFT + index * group + group / 2, 2), day.day.strftime("%m-%d")))
    if days:
        last = values[-1]
        chart.today = ", ".join(f"{name} {_format(v, unit)}" for (name, _), v in zip(series, last, strict=True))
    return chart


def usage_charts(days: list[Day]) -> list[Chart]:
    """The six charts of a usage page."""
    return [
        bar_chart(
            key="writes", title="Memories written", days=days, series=[("written", lambda d: d.memories_written)]
        ),
        bar_chart(key="searches", title="Searches", days=days, series=[("searches", lambda d: d.searches)]),
        bar_chart(
            key="latency",
            title="Search latency p50 / p95",
            days=days,
            unit="ms",
            series=[("p50", lambda d: d.p50_ms), ("p95", lambda d: d.p95_ms)],
        ),  # fmt: skip
        bar_chart(key="tokens", title="Tokens returned", days=days, series=[("tokens", lambda d: d.tokens_returned)]),
        bar_chart(
            key="storage",
            title="Memories stored",
            days=days,
            series=[("memories", lambda d: d.memories_stored)],
        ),  # fmt: skip
        bar_chart(
            key="refusals",
            title="Requests refused by a quota",
            days=days,
            series=[
                ("rate", lambda d: d.refused["reads"] + d.refused["writes"]),
                ("size", lambda d: d.refused["memories"] + d.refused["batch"] + d.refused["document_bytes"]),
            ],
        ),  # fmt: skip
    ]


def combine(series: list[list[Day]]) -> list[Day]:
    """Several tenants' days added up (latency percentiles from the summed histograms)."""
    if not series:
        return []
    total = []
    for same_day in zip(*series, strict=True):
        day = Day(same_day[0].day)
        day.histogram = [0] * BUCKETS
        for d in same_day:
            day.histogram = [a + b for a, b in zip(day.histogram, d.histogram or [0] * BUCKETS, strict=False)]
            day.memories_written += d.memories_written
            day.searches += d.searches
            day.tokens_returned += d.tokens_returned
            if d.memories_stored is not None:
                day.memories_stored = (day.memories_stored or 0) + d.memories_stored
                day.storage_bytes = (day.storage_bytes or 0) + (d.storage_bytes or 0)
            for kind, n in d.refused.items():
                day.refused[kind] += n
        day.p50_ms, day.p95_ms = percentile(day.histogram, 0.5), percentile(day.histogram, 0.95)
        total.append(day)
    return total
