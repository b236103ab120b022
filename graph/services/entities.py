"""Entity resolution: extracted references to Entity rows of one bucket, as the operator's
corrections say; entity merges and mention counts."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.db import connection
from django.db.models import Case, Q, When

from graph import extract as extraction
from graph.models import Edge, Entity, Mention
from graph.rules import Rules, Target
from graph.selectors import entities_by_first_name
from tenants.models import Bucket


class EntityResolver:
    """Resolves extracted references to Entity rows of one bucket, creating them as needed,
    as the bucket's operator corrections say (``rules``, graph/rules.py)."""

    def __init__(self, bucket: Bucket, rules: Rules | None = None):
        self.bucket = bucket
        self.rules = rules if rules is not None else Rules()
        self.by_key: dict[str, Entity] = {}
        # Placeholders merged into named entities during this run: old id -> new id.
        self.merged: dict[uuid.UUID, uuid.UUID] = {}

    def final_id(self, entity_id: uuid.UUID) -> uuid.UUID:
        while entity_id in self.merged:
            entity_id = self.merged[entity_id]
        return entity_id

    def _lookup(self, keys: list[str]) -> None:
        wanted = [k for k in keys if k not in self.by_key]
        if not wanted:
            return
        found = Entity.objects.for_bucket(self.bucket).filter(
            Q(normalized_name__in=wanted) | Q(aliases__overlap=wanted)
        )
        # Exact names win over aliases; among several, the most mentioned.
        for entity in sorted(found, key=lambda e: e.mention_count):
            for key in [*entity.aliases, entity.normalized_name]:
                if key in wanted and self._may_name(key, entity):
                    self.by_key[key] = entity

    def _may_name(self, key: str, entity: Entity) -> bool:
        """Whether ``key`` (its name or an alias) may find ``entity`` (an operator may have said no)."""
        return not self.rules or key == entity.normalized_name or self.rules.alias_allowed(key, entity.normalized_name)

    def target(self, target: Target) -> Entity:
        """The entity a correction names: of that name (the same type preferred), else a new one."""
        found = (
            Entity.objects.for_bucket(self.bucket)
            .filter(normalized_name=target.key)
            .order_by(Case(When(type=target.type, then=0), default=1), "-mention_count", "id")
            .first()
        )
        if found is None:
            found = _get_or_create(self.bucket, extraction.Ref(name=target.name, key=target.key, type=target.type))
        return found

    def _add_aliases(self, entity: Entity, names: set) -> None:
        names = {
            n for n in names - {None, entity.normalized_name, *entity.aliases}
            if not self.rules or self.rules.alias_allowed(n, entity.normalized_name)
        }  # fmt: skip
        if names:
            entity.aliases = sorted({*entity.aliases, *names})
            entity.save(update_fields=["aliases"])

    def resolve(self, ref: extraction.Ref, memory_id: uuid.UUID | None = None) -> Entity:
        entity = self._resolve(ref)
        if self.rules.moves and memory_id is not None:
            # A split moved this memory's mentions of the entity to another one.
            moved = self.rules.moves.get((str(memory_id), entity.normalized_name))
            if moved is not None:
                entity = self.target(moved)
        return entity

    def _resolve(self, ref: extraction.Ref) -> Entity:
        redirected = self.rules.redirect(ref.key) if self.rules else None
        if redirected is not None:
            # An operator said what this name denotes (an alias, an old name, a merge).
            entity = self.by_key.get(ref.key)
            if entity is None or entity.normalized_name != redirected.key:
                entity = self.target(redirected)
            self._add_aliases(entity, {ref.key, ref.alias})
            self.by_key[ref.key] = entity
            return entity
        self._lookup([ref.key] + ([ref.alias] if ref.alias else []))
        entity = self.by_key.get(ref.key)
        placeholder = self.by_key.get(ref.alias) if ref.alias else None
        if entity is None and placeholder is not None and placeholder.normalized_name == ref.alias:
            # We knew "user's sister" before we learned her name: the placeholder becomes Anna.
            entity = placeholder
            entity.name, entity.normalized_name, entity.type = ref.name, ref.key, ref.type
            entity.aliases = sorted({*entity.aliases, ref.alias})
            entity.save(update_fields=["name", "normalized_name", "type", "aliases"])
        elif entity is not None and placeholder is not None and placeholder.pk != entity.pk:
            if placeholder.normalized_name == ref.alias:
                self.merged[placeholder.pk] = entity.pk
                entity_merge(source=placeholder, target=entity)
            placeholder = None
        if entity is None and placeholder is None:
            entity = self._full_name(ref)
        if entity is None:
            entity = _get_or_create(self.bucket, ref)
        if ref.alias and ref.alias not in entity.aliases and ref.alias != entity.normalized_name:
            self._add_aliases(entity, {ref.alias})
        # A better type learned later ("Alice" as a subject first, then as a PERSON).
        better_type = entity.type == "THING" and ref.type not in {"THING", "SPEAKER"}
        if (
            better_type
            and not Entity.objects.for_bucket(self.bucket)
            .filter(normalized_name=entity.normalized_name, type=ref.type)
            .exists()
        ):
            entity.type = ref.type
            entity.save(update_fields=["type"])
        self.by_key[ref.key] = entity
        if ref.alias:
            self.by_key[ref.alias] = entity
        return entity

    def _full_name(self, ref: extraction.Ref) -> Entity | None:
        """A lone first name (or its nickname) is the bucket's one person of that first name:
        "Alice" is Alice Chen while the bucket knows no other Alice."""
        if " " in ref.key or ref.type not in {"PERSON", "THING"}:
            return None
        matches = entities_by_first_name(bucket=self.bucket, words=[ref.key]).get(ref.key, [])
        if len(matches) != 1:
            return None
        entity = Entity.objects.get(pk=matches[0])
        if self.rules and (ref.key, entity.normalized_name) in self.rules.blocked:
            return None  # an operator split this name off that person
        return entity


def _get_or_create(bucket: Bucket, ref: extraction.Ref) -> Entity:
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO graph_entities (tenant_id, bucket_id, name, normalized_name, type, aliases, mention_count)
            VALUES (%s, %s, %s, %s, %s, %s, 0)
            ON CONFLICT (tenant_id, bucket_id, normalized_name, type) DO NOTHING
            """,
            [bucket.tenant_id, bucket.pk, ref.name[:500], ref.key[:500], ref.type, [ref.alias] if ref.alias else []],
        )
    return Entity.objects.for_bucket(bucket).get(normalized_name=ref.key[:500], type=ref.type)


def entity_merge(*, source: Entity, target: Entity) -> None:
    """Point everything at ``target`` and drop ``source``."""
    Edge.objects.filter(subject=source).update(subject=target)
    Edge.objects.filter(object_entity=source).update(object_entity=target)
    already = Mention.objects.filter(entity=target).values("memory_id")
    Mention.objects.filter(entity=source, memory_id__in=already).delete()
    Mention.objects.filter(entity=source).update(entity=target)
    target.aliases = sorted({*target.aliases, *source.aliases, source.normalized_name} - {target.normalized_name})
    target.mention_count = Mention.objects.filter(entity=target).count()
    target.save(update_fields=["aliases", "mention_count"])
    source.delete()


def rules_settle(bucket: Bucket, rules: Rules) -> None:
    """Give the bucket's entities the names and aliases the operator gave them, and take away
    the aliases they removed (after extraction, which may have re-created the rows)."""
    entities = Entity.objects.for_bucket(bucket)
    for key, name in rules.names.items():
        entities.filter(normalized_name=key).exclude(name=name).update(name=name)
    keys = set(rules.aliases) | {key for _alias, key in rules.blocked}
    for entity in entities.filter(normalized_name__in=keys):
        wanted = set(entity.aliases) | rules.aliases.get(entity.normalized_name, set())
        wanted = {a for a in wanted if (a, entity.normalized_name) not in rules.blocked} - {entity.normalized_name}
        if wanted != set(entity.aliases):
            entity.aliases = sorted(wanted)
            entity.save(update_fields=["aliases"])


def mention_counts_refresh(*, bucket: Bucket, entity_ids: Iterable[uuid.UUID]) -> None:
    ids = list(entity_ids)
    if not ids:
        return
    with connection.cursor() as cur:
        cur.execute(
            """
            UPDATE graph_entities e SET mention_count = (SELECT count(*) FROM graph_mentions m WHERE m.entity_id = e.id)
            WHERE e.tenant_id = %s AND e.bucket_id = %s AND e.id = ANY(%s)
            """,
            [bucket.tenant_id, bucket.pk, ids],
        )
