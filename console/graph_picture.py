"""An entity's neighbourhood and the timeline of its facts, as server-rendered SVG, drawn by
console/templates/console/_entity_graph.html and _entity_timeline.html.

Only geometry is computed here, from the entity's profile (graph.selectors.profile); names and
values go through the template's escaping. No script and no inline style (the console's
Content-Security-Policy): colours and dashes are classes in console.css, and a label's angle
is a ``transform`` attribute.

The neighbourhood puts the entity in the middle and what its facts relate it to on a circle
around it: one curve per fact (several facts with one neighbour bend apart), its relation and
dates along it, an arrow pointing to the fact's object, dashed once a newer fact ended it.
Entities are circles linking to their own page; values (texts such as "designer") are squares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from graph.selectors.profile import Fact, Profile

WIDTH = 960
HEIGHT = 600
RADIUS = 235  # of the circle of neighbours
CENTRE_R = 26
NODE_R = 9
BEND = 34  # px between the curves of several facts with one neighbour
# Neighbours drawn at most (the current ones, then those with the most facts, come first).
MAX_NEIGHBOURS = 18
NAME_CHARS = 26
LABEL_CHARS = 30

TIMELINE_WIDTH = 960
TIMELINE_LEFT = 250  # room for the row labels
TIMELINE_ROW = 18
TIMELINE_TOP = 8
TIMELINE_AXIS = 26
MAX_ROWS = 60


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _day(moment: datetime | None) -> str:
    return moment.date().isoformat() if moment else ""


def dates(fact: Fact) -> str:
    if fact.valid_to is None:
        return f"since {_day(fact.valid_from)}"
    return f"{_day(fact.valid_from)} – {_day(fact.valid_to)}"


@dataclass
class Node:
    key: str
    label: str
    title: str
    x: float
    y: float
    entity_id: str | None  # None: a value, not an entity
    kind: str  # the entity's type, or "value"
    label_x: float = 0.0
    label_y: float = 0.0
    anchor: str = "middle"
    current: bool = False

    @property
    def square(self) -> tuple[float, float, float]:
        return self.x - NODE_R, self.y - NODE_R, NODE_R * 2


@dataclass
class Link:
    path: str  # the curve, from the fact's subject to its object
    current: bool
    relation: str
    dates: str
    title: str
    label_x: float
    label_y: float
    angle: float


@dataclass
class Picture:
    centre: Node
    nodes: list[Node] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    hidden: int = 0  # neighbours left out (MAX_NEIGHBOURS)
    width: int = WIDTH
    height: int = HEIGHT
    centre_r: int = CENTRE_R
    node_r: int = NODE_R


def _neighbour_key(fact: Fact) -> str:
    return f"e:{fact.other.pk}" if fact.other is not None else f"v:{fact.value.casefold()}"


def _round(value: float) -> float:
    return round(value, 1)


def neighbourhood(profile: Profile) -> Picture:
    """The entity, what its facts relate it to, and one labelled curve per fact."""
    entity = profile.entity
    cx, cy = WIDTH / 2, HEIGHT / 2
    centre = Node(
        key=f"e:{entity.pk}", label=_short(entity.name, NAME_CHARS), title=f"{entity.name} ({entity.type})",
        x=cx, y=cy, entity_id=str(entity.pk), kind=entity.type, label_x=cx, label_y=cy + CENTRE_R + 16,
        current=True,
    )  # fmt: skip
    picture = Picture(centre=centre)
    facts = profile.current + profile.history
    by_neighbour: dict[str, list[Fact]] = {}
    for fact in facts:
        by_neighbour.setdefault(_neighbour_key(fact), []).append(fact)
    # Current neighbours first, then the most connected, then by name: a stable picture.
    order = sorted(
        by_neighbour.items(),
        key=lambda item: (not any(f.current for f in item[1]), -len(item[1]), item[1][0].value.casefold(), item[0]),
    )
    picture.hidden = max(0, len(order) - MAX_NEIGHBOURS)
    shown = order[:MAX_NEIGHBOURS]
    count = len(shown)
    for index, (key, neighbour_facts) in enumerate(shown):
        # Clockwise from the top, a little off the vertical (labels along a vertical line are hard to read).
        theta = -math.pi / 2 + math.pi / 9 + 2 * math.pi * index / max(count, 1)
        ux, uy = math.cos(theta), math.sin(theta)
        x, y = cx + RADIUS * ux, cy + RADIUS * uy
        first = neighbour_facts[0]
        other = first.other
        node = Node(
            key=key, label=_short(first.value, NAME_CHARS),
            title=f"{other.name} ({other.type})" if other is not None else first.value,
            x=_round(x), y=_round(y), entity_id=str(other.pk) if other is not None else None,
            kind=other.type if other is not None else "value", current=any(f.current for f in neighbour_facts),
        )  # fmt: skip
        gap = NODE_R + 6
        if abs(ux) > 0.3:
            node.label_x, node.label_y = _round(x + (gap if ux > 0 else -gap)), _round(y + 4)
            node.anchor = "start" if ux > 0 else "end"
        else:
            node.label_x, node.label_y = _round(x), _round(y + (gap + 8 if uy > 0 else -gap))
        picture.nodes.append(node)
        # The normal of the ray, for bending several curves apart.
        nx, ny = -uy, ux
        k = len(neighbour_facts)
        for j, fact in enumerate(sorted(neighbour_facts, key=lambda f: (f.valid_from, f.relation))):
            bend = (j - (k - 1) / 2) * BEND
            start = (cx + CENTRE_R * ux + bend * 0.4 * nx, cy + CENTRE_R * uy + bend * 0.4 * ny)
            end = (x - NODE_R * ux + bend * 0.2 * nx, y - NODE_R * uy + bend * 0.2 * ny)
            mid = ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2)
            # A quadratic curve passes its control point's half-way: the apex is bend px off the ray.
            control = (mid[0] + 2 * bend * nx, mid[1] + 2 * bend * ny)
            apex = (mid[0] + bend * nx, mid[1] + bend * ny)
            if fact.direction == "in":  # the other is the subject: the arrow points at the entity
                start, end = end, start
            path = (
                f"M{_round(start[0])},{_round(start[1])} Q{_round(control[0])},{_round(control[1])} "
                f"{_round(end[0])},{_round(end[1])}"
            )
            angle = math.degrees(theta)
            if angle > 90 or angle < -90:
                angle += 180  # upright text
            subject, obj = (entity.name, fact.value) if fact.direction == "out" else (fact.value, entity.name)
            picture.links.append(
                Link(
                    path=path,
                    current=fact.current,
                    relation=_short(fact.relation, LABEL_CHARS),
                    dates=dates(fact),
                    title=f"{subject} {fact.relation} {obj}, {dates(fact)}",
                    label_x=_round(apex[0]),
                    label_y=_round(apex[1]),
                    angle=_round(angle % 360),
                )  # fmt: skip
            )
    return picture


@dataclass
class Bar:
    x: float
    y: float
    width: float
    label: str
    title: str
    current: bool
    entity_id: str | None


@dataclass
class Timeline:
    bars: list[Bar] = field(default_factory=list)
    ticks: list[tuple[float, str]] = field(default_factory=list)
    hidden: int = 0
    width: int = TIMELINE_WIDTH
    height: int = 0
    left: int = TIMELINE_LEFT
    row: int = TIMELINE_ROW
    bar_height: int = TIMELINE_ROW - 6
    axis_y: int = 0


def timeline(profile: Profile, *, now: datetime) -> Timeline:
    """One row per fact, grouped by relation and in order of time: a bar over its validity,
    to ``now`` (or ``as_of``) when it still holds."""
    end_of_view = profile.as_of or now
    facts = sorted(profile.current + profile.history, key=lambda f: (f.relation, f.valid_from, f.value.casefold()))
    chart = Timeline(hidden=max(0, len(facts) - MAX_ROWS))
    facts = facts[:MAX_ROWS]
    chart.axis_y = TIMELINE_TOP + len(facts) * TIMELINE_ROW + 4
    chart.height = chart.axis_y + TIMELINE_AXIS
    if not facts:
        return chart
    first = min(f.valid_from for f in facts)
    last = max([end_of_view, *(f.valid_to for f in facts if f.valid_to is not None)])
    if last - first < timedelta(days=30):
        first, last = first - timedelta(days=15), last + timedelta(days=15)
    span = (last - first).total_seconds()
    plot = TIMELINE_WIDTH - TIMELINE_LEFT - 12

    def x_of(moment: datetime) -> float:
        return _round(TIMELINE_LEFT + plot * (moment - first).total_seconds() / span)

    for row, fact in enumerate(facts):
        start, stop = x_of(fact.valid_from), x_of(fact.valid_to or end_of_view)
        text = f"{fact.relation} {fact.value}" if fact.direction == "out" else f"{fact.value} {fact.relation}"
        chart.bars.append(
            Bar(
                x=start,
                y=TIMELINE_TOP + row * TIMELINE_ROW,
                width=max(3.0, _round(stop - start)),
                label=_short(text, 38),
                title=f"{text}, {dates(fact)}",
                current=fact.current,
                entity_id=str(fact.other.pk) if fact.other is not None else None,
            )  # fmt: skip
        )
    chart.ticks = _ticks(first, last, x_of)
    return chart


def _ticks(first: datetime, last: datetime, x_of) -> list[tuple[float, str]]:
    """Year starts between ``first`` and ``last`` (every few years when there are many), or month
    starts within a year or two."""
    years = [datetime(y, 1, 1, tzinfo=first.tzinfo) for y in range(first.year + 1, last.year + 1)]
    if len(years) >= 2:
        step = math.ceil(len(years) / 12)
        return [(x_of(moment), str(moment.year)) for moment in years[::step]]
    months = []
    year, month = first.year, first.month
    while True:
        month += 1
        if month > 12:
            year, month = year + 1, 1
        moment = datetime(year, month, 1, tzinfo=first.tzinfo)
        if moment > last:
            break
        months.append(moment)
    step = max(1, math.ceil(len(months) / 12))
    return [(x_of(moment), moment.strftime("%Y-%m")) for moment in months[::step]]
