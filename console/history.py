"""A memory's history as the console shows it: its versions, newest first, made readable.

The versions are the memories app's (``memories.selectors.memory_history``, one row per change,
written by the write gateway); this module only turns them into rows for a table. Nothing here
is marked safe: the templates escape every value, stored text included.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.utils.dateparse import parse_datetime

from engram_site.exceptions import NotFound
from memories.models import VersionKind
from memories.selectors import memory_history
from tenants.models import Tenant
from tenants.selectors import parse_uuid

# The newest versions a page shows; the table says how many older ones it leaves out.
HISTORY_LIMIT = 200
# Values longer than this are shortened in the table, the full text one click away.
SHORT_CHARS = 160
DATETIME_FIELDS = {"created_at", "expires_at", "superseded_at", "last_accessed_at", "deleted_at"}
EMPTY = "(empty)"


@dataclass(frozen=True)
class FieldValue:
    """A field a change set, with its value before the change (``full`` when shortened)."""

    name: str
    value: str
    full: str = ""


@dataclass(frozen=True)
class Note:
    """What else a change needs to be read: ``text`` and the memories it names, if any."""

    text: str
    memory_ids: tuple[uuid.UUID, ...] = ()


@dataclass(frozen=True)
class VersionRow:
    number: int  # 1 for the memory's first change (as the API numbers them)
    at: datetime
    kind: str
    kind_label: str
    actor_kind: str
    actor_label: str
    fields: list[FieldValue] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)


@dataclass(frozen=True)
class History:
    state: str  # "live" or "deleted"
    rows: list[VersionRow]  # newest first
    total: int

    @property
    def hidden(self) -> int:
        return self.total - len(self.rows)


def display_value(name: str, value) -> str:
    """A stored value as text: times in UTC, lists joined, objects as JSON, nothing as ``(empty)``."""
    if value is None or value == "" or value == [] or value == {}:
        return EMPTY
    if name in DATETIME_FIELDS:
        moment = value if isinstance(value, datetime) else parse_datetime(str(value))
        if moment is not None:
            moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
            return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ", ".join(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return str(value)


def _field(name: str, value) -> FieldValue:
    text = display_value(name, value)
    if len(text) <= SHORT_CHARS:
        return FieldValue(name, text)
    return FieldValue(name, text[: SHORT_CHARS - 1] + "…", text)


def _ids(values) -> tuple[uuid.UUID, ...]:
    values = values if isinstance(values, list) else [values]
    return tuple(pk for pk in (parse_uuid(str(v)) for v in values) if pk is not None)


def _notes(kind: str, details: dict) -> list[Note]:
    details = dict(details or {})
    notes = []
    if "into" in details:
        notes.append(Note("merged into", _ids(details.pop("into"))))
    if "absorbed" in details:
        notes.append(Note("absorbed", _ids(details.pop("absorbed"))))
    if kind == VersionKind.SUPERSEDED and "by" in details:
        by = _ids(details.pop("by"))
        notes.append(Note("superseded by", by) if by else Note("no longer superseded"))
    if kind == VersionKind.RESTORED and "deleted_at" in details:
        reason = details.pop("reason", None)
        when = display_value("deleted_at", details.pop("deleted_at"))
        merged = " (merged into another memory)" if reason == "merged" else ""
        notes.append(Note(f"had been deleted on {when}{merged}"))
    if kind == VersionKind.RATED and "signal" in details:
        # A rating (memories.services.feedback): its signal and the query it was given for.
        signal, query = details.pop("signal"), details.pop("query", "")
        details.pop("feedback_id", None)
        notes.append(Note(f"{signal} for the query: {display_value('query', query)}"))
    for key, value in sorted(details.items()):
        if value is None and kind == VersionKind.RATED:
            continue  # a rating's agent or run left out
        notes.append(Note(f"{key}: {display_value(key, value)}"))
    return notes


def memory_history_rows(*, tenant: Tenant, memory_id, limit: int = HISTORY_LIMIT) -> History:
    """The memory's versions, newest first (at most ``limit``), for the console's history table.
    A memory the tenant no longer has (purged meanwhile) has an empty history."""
    try:
        state, versions = memory_history(tenant=tenant, memory_id=memory_id)
    except NotFound:
        return History(state="deleted", rows=[], total=0)
    total = versions.count()
    labels = dict(VersionKind.choices)
    rows = [
        VersionRow(
            number=total - i,
            at=v.created_at,
            kind=v.kind,
            kind_label=labels.get(v.kind, v.kind),
            actor_kind=v.actor_kind,
            actor_label=v.actor_label or v.actor_id,
            fields=[_field(name, value) for name, value in sorted((v.previous or {}).items())],
            notes=_notes(v.kind, v.details),
        )
        for i, v in enumerate(versions.order_by("-id")[:limit])
    ]
    return History(state=state, rows=rows, total=total)
