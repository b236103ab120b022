"""Operator corrections, replayed into the rules extraction follows in one bucket.

A correction (graph.models.Correction, written by graph/corrections.py) names entities by
normalized name and edges by what they say, so it survives a rebuild that gives every
entity and edge a new id. :func:`bucket_rules` replays a bucket's corrections in the order
they were made into a :class:`Rules`:

- ``redirects``: a name (a mention's normalized name, or an alias) that denotes an entity
  the operator chose — an alias added, the old name of a renamed entity, the names of an
  entity merged away, the aliases split off to another entity;
- ``blocked``: (alias, entity) pairs extraction must not join again (an alias removed, or
  moved away by a split);
- ``names`` and ``aliases``: the display name and the aliases the operator gave an entity;
- ``moves``: (memory, entity) -> entity, the mentions a split moved: in those memories the
  entity is the other one;
- ``deleted_edges`` and ``fixed_edges``: edges by (subject, predicate, object, memory).

A bucket without corrections has empty rules, and extraction there does exactly what it
did before corrections existed (``Rules.__bool__`` guards every hook).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from graph.models import Correction
from tenants.models import Bucket


@dataclass(frozen=True)
class Target:
    """An entity as a correction names it: normalized name, type, and display name."""

    key: str
    type: str
    name: str

    @classmethod
    def of(cls, data: dict) -> Target:
        return cls(key=data["key"], type=data["type"], name=data.get("name") or data["key"])

    def as_dict(self) -> dict:
        return {"key": self.key, "type": self.type, "name": self.name}


@dataclass(frozen=True)
class EdgeFix:
    predicate: str
    obj: Target | None
    literal: str | None


# (subject key, predicate, object key or None, literal or None, source memory id)
EdgeKey = tuple[str, str, str | None, str | None, str]


def edge_key(data: dict) -> EdgeKey:
    return (data["subject"], data["predicate"], data.get("object"), data.get("literal"), str(data["memory_id"]))


@dataclass
class Rules:
    redirects: dict[str, Target] = field(default_factory=dict)
    blocked: set[tuple[str, str]] = field(default_factory=set)
    names: dict[str, str] = field(default_factory=dict)
    aliases: dict[str, set[str]] = field(default_factory=dict)
    moves: dict[tuple[str, str], Target] = field(default_factory=dict)
    deleted_edges: set[EdgeKey] = field(default_factory=set)
    fixed_edges: dict[EdgeKey, EdgeFix] = field(default_factory=dict)
    # An entity renamed or merged away -> the entity it became (only while replaying).
    forward: dict[str, Target] = field(default_factory=dict, repr=False)

    def __bool__(self) -> bool:
        return bool(
            self.redirects or self.blocked or self.names or self.aliases or self.moves or self.deleted_edges
            or self.fixed_edges
        )  # fmt: skip

    @property
    def edges(self) -> bool:
        return bool(self.deleted_edges or self.fixed_edges)

    # --- what extraction asks ---------------------------------------------------------------

    def redirect(self, key: str | None) -> Target | None:
        return self.redirects.get(key) if key else None

    def alias_allowed(self, alias: str, entity_key: str) -> bool:
        """Whether ``alias`` may join (or resolve to) the entity named ``entity_key``."""
        if (alias, entity_key) in self.blocked:
            return False
        target = self.redirects.get(alias)
        return target is None or target.key == entity_key

    def curated(self, key: str) -> bool:
        """Whether an operator named, renamed into, merged into, split off or gave aliases to the
        entity called ``key``: extraction leaves such an entity as they made it (it does not
        read its name as another person's first name, nor drop it when nothing mentions it)."""
        if not self:
            return False
        return (
            key in self.names or key in self.aliases or any(t.key == key for t in self.redirects.values())
            or any(t.key == key for t in self.moves.values())
        )  # fmt: skip

    # --- replay ---------------------------------------------------------------------------------

    def _live(self, target: Target) -> None:
        """``target`` is an entity of its own (again): its name no longer leads elsewhere."""
        self.forward.pop(target.key, None)
        self.redirects.pop(target.key, None)

    def _canonical(self, target: Target) -> Target:
        seen = set()
        while target.key in self.forward and target.key not in seen:
            seen.add(target.key)
            target = self.forward[target.key]
        return target

    def _key(self, key: str | None) -> str | None:
        if key is None or key not in self.forward:
            return key
        return self._canonical(self.forward[key]).key

    def apply(self, kind: str, p: dict) -> None:
        if kind == "rename":
            old, new = Target.of(p["entity"]), Target.of(p["to"])
            self.names[new.key] = new.name
            if old.key != new.key:
                self._live(new)
                self.forward[old.key] = new
                self.redirects[old.key] = new
                self.aliases.setdefault(new.key, set()).update({old.key, *self.aliases.pop(old.key, set())})
                self.names.pop(old.key, None)
        elif kind == "merge":
            source, target = Target.of(p["source"]), Target.of(p["target"])
            self.forward[source.key] = target
            for name in [source.key, *p.get("aliases", [])]:
                if name != target.key:
                    self.redirects[name] = target
                    self.blocked.discard((name, target.key))
            self.aliases.setdefault(target.key, set()).update(self.aliases.pop(source.key, set()))
        elif kind == "split":
            entity, new = Target.of(p["entity"]), Target.of(p["to"])
            self._live(new)
            self.names[new.key] = new.name
            for name in [new.key, *p.get("aliases", [])]:
                if name != new.key:
                    self.redirects[name] = new
                    self.aliases.setdefault(new.key, set()).add(name)
                self.blocked.add((name, entity.key))
                self.aliases.get(entity.key, set()).discard(name)
            for memory_id in p.get("memory_ids", []):
                self.moves[(str(memory_id), entity.key)] = new
        elif kind == "alias_add":
            target, alias = Target.of(p["entity"]), p["alias"]
            self.redirects[alias] = target
            self.blocked.discard((alias, target.key))
            self.aliases.setdefault(target.key, set()).add(alias)
        elif kind == "alias_remove":
            target, alias = Target.of(p["entity"]), p["alias"]
            self.blocked.add((alias, target.key))
            self.aliases.get(target.key, set()).discard(alias)
            current = self.redirects.get(alias)
            if current is not None and self._canonical(current).key == target.key:
                del self.redirects[alias]
        elif kind == "edge_delete":
            key = edge_key(p["edge"])
            self.deleted_edges.add(key)
            # Deleting an edge an earlier fix produced deletes what extraction states.
            self.deleted_edges.update(k for k, fix in self.fixed_edges.items() if _fixed_key(k, fix) == key)
        elif kind == "edge_fix":
            key, to = edge_key(p["edge"]), p["to"]
            fix = EdgeFix(
                predicate=to["predicate"],
                obj=Target.of(to["object"]) if to.get("object") else None,
                literal=to.get("literal"),
            )
            for earlier, old in list(self.fixed_edges.items()):
                if _fixed_key(earlier, old) == key:
                    self.fixed_edges[earlier] = fix
            self.fixed_edges[key] = fix
            self.deleted_edges.discard(key)

    def settle(self) -> Rules:
        """Every name the rules point at, followed through later renames and merges."""
        self.redirects = {
            name: target
            for name, target in ((n, self._canonical(t)) for n, t in self.redirects.items())
            if name != target.key
        }
        self.blocked = {(alias, self._key(key)) for alias, key in self.blocked}
        self.moves = {(m, self._key(key)): self._canonical(t) for (m, key), t in self.moves.items()}
        aliases: dict[str, set[str]] = {}
        for key, names in self.aliases.items():
            canonical = self._key(key)
            aliases.setdefault(canonical, set()).update(n for n in names if n != canonical)
        self.aliases = {k: v for k, v in aliases.items() if v}
        self.names = {self._key(k): v for k, v in self.names.items()}

        def canonical_edge(key: EdgeKey) -> EdgeKey:
            subject, predicate, obj, literal, memory = key
            return (self._key(subject), predicate, self._key(obj), literal, memory)

        self.deleted_edges = {canonical_edge(k) for k in self.deleted_edges}
        self.fixed_edges = {
            canonical_edge(k): EdgeFix(f.predicate, self._canonical(f.obj) if f.obj else None, f.literal)
            for k, f in self.fixed_edges.items()
        }
        self.forward = {}
        return self


def _fixed_key(key: EdgeKey, fix: EdgeFix) -> EdgeKey:
    """What an edge of ``key`` says once ``fix`` is applied."""
    return (key[0], fix.predicate, fix.obj.key if fix.obj else None, None if fix.obj else fix.literal, key[4])


def rules_replay(corrections) -> Rules:
    rules = Rules()
    for kind, payload in corrections:
        rules.apply(kind, payload)
    return rules.settle()


def bucket_rules(*, bucket: Bucket) -> Rules:
    """The rules of ``bucket``'s corrections, oldest first (graph_corrections_bucket)."""
    rows = Correction.objects.for_bucket(bucket).order_by("id").values_list("kind", "payload")
    return rules_replay(rows)
