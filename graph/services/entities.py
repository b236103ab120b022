"""Entity resolution: extracted references to Entity rows of one bucket, as the operator's
corrections say; entity merges and mention counts."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.db import connection
from django.db.models import Case, Exists, OuterRef, Q, When

from graph import extract as extraction
from graph.extract.vocabulary import SHORT_FORM_LETTERS
from graph.models import Edge, Entity, Mention
from graph.rules import Rules, Target
from graph.selectors import entities_by_partial_name
from tenants.models import Bucket


class EntityResolver:
    """Resolves extracted references to Entity rows of one bucket, creating them as needed,
    as the bucket's operator corrections say (``rules``, graph/rules.py).

    It also notes what extraction learned that changes how earlier memories read
    (:meth:`rereads`): a new full name ("Priya Natarajan" makes an earlier "Priya" hers, or
    makes "Priya" ambiguous when she is the second Priya), and a relative or pet named for
    the first time ("my sister Anna" makes an earlier "my sister" Anna)."""

    def __init__(self, bucket: Bucket, rules: Rules | None = None):
        self.bucket = bucket
        self.rules = rules if rules is not None else Rules()
        self.by_key: dict[str, Entity] = {}
        self._by_alias: dict[str, Entity | None] = {}
        self._partial: dict[str, Entity | None] = {}
        # What changes the reading of earlier memories (see rereads()).
        self.new_names: dict[uuid.UUID, Entity] = {}
        self.named_relations: set[tuple[uuid.UUID, tuple[str, ...]]] = set()
        # Entities whose mentions or edges a re-extraction removed: dropped if nothing is left.
        self.maybe_orphans: set[uuid.UUID] = set()
        # One object per row, so that aliases and types added through one lookup are not
        # overwritten by a stale copy from another.
        self._rows: dict[uuid.UUID, Entity] = {}
        # Names a lookup (prefetch) found no entity of; forgotten when one is made or aliased.
        self._absent: set[str] = set()

    def _one(self, entity: Entity | None) -> Entity | None:
        if entity is None:
            return None
        return self._rows.setdefault(entity.pk, entity)

    def prefetch(self, refs: Iterable[extraction.Ref | None]) -> None:
        """Look up the names of a batch's references at once (one statement instead of one per
        name): :meth:`resolve` then finds them, or knows there is none, without asking again."""
        keys: set[str] = set()
        for ref in refs:
            while ref is not None:
                if not ref.unnamed:
                    keys.add(ref.key)
                ref = ref.owner
        wanted = sorted(keys - set(self.by_key) - self._absent)
        if wanted:
            self._lookup(wanted)
            self._absent |= {k for k in wanted if k not in self.by_key}

    def _lookup(self, keys: list[str]) -> None:
        wanted = [k for k in keys if k not in self.by_key and k not in self._absent]
        if not wanted:
            return
        found = Entity.objects.for_bucket(self.bucket).filter(
            Q(normalized_name__in=wanted) | Q(aliases__overlap=wanted)
        )
        # Exact names win over aliases; among several, the most mentioned.
        for entity in sorted(map(self._one, found), key=lambda e: e.mention_count):
            for key in [*entity.aliases, entity.normalized_name]:
                if key in wanted and self._may_name(key, entity):
                    self.by_key[key] = entity

    def _may_name(self, key: str, entity: Entity) -> bool:
        """Whether ``key`` (its name or an alias) may find ``entity`` (an operator may have said no)."""
        return not self.rules or key == entity.normalized_name or self.rules.alias_allowed(key, entity.normalized_name)

    def _known_as(self, alias: str) -> Entity | None:
        """The entity known by the alias ``alias`` ("user sister": the user's sister, once named)."""
        if alias not in self._by_alias:
            found = (
                Entity.objects.for_bucket(self.bucket)
                .filter(aliases__contains=[alias])
                .exclude(normalized_name=alias)
                .order_by("-mention_count", "id")
            )
            self._by_alias[alias] = self._one(next((e for e in found if self._may_name(alias, e)), None))
        return self._by_alias[alias]

    def target(self, target: Target) -> Entity:
        """The entity a correction names: of that name (the same type preferred), else a new one."""
        found = (
            Entity.objects.for_bucket(self.bucket)
            .filter(normalized_name=target.key)
            .order_by(Case(When(type=target.type, then=0), default=1), "-mention_count", "id")
            .first()
        )
        if found is None:
            found = _get_or_create(self.bucket, extraction.Ref(name=target.name, key=target.key, type=target.type))[0]
            self._absent.discard(target.key)
        return self._one(found)

    def _add_aliases(self, entity: Entity, names: set) -> None:
        names = {
            n for n in names - {None, entity.normalized_name, *entity.aliases}
            if not self.rules or self.rules.alias_allowed(n, entity.normalized_name)
        }  # fmt: skip
        if names:
            entity.aliases = sorted({*entity.aliases, *names})
            entity.save(update_fields=["aliases"])
            for name in names:
                self._by_alias.pop(name, None)
            self._absent -= names

    def resolve(self, ref: extraction.Ref, memory_id: uuid.UUID | None = None) -> Entity | None:
        """The entity ``ref`` denotes; None for an unnamed relative or pet ("my sister") whose
        name the bucket does not know (graph/extract/unnamed.py says what becomes of it)."""
        entity = self._resolve(ref)
        if entity is not None and self.rules.moves and memory_id is not None:
            # A split moved this memory's mentions of the entity to another one.
            moved = self.rules.moves.get((str(memory_id), entity.normalized_name))
            if moved is not None:
                entity = self.target(moved)
        return entity

    def _relation_aliases(self, ref: extraction.Ref) -> tuple[list[str], Entity | None]:
        """The aliases of a person known by relation: as the memory said it ("lena dog") and by
        the owner's entity ("lena ortiz dog", when Lena is Lena Ortiz), and the owner's entity."""
        said = ref.key if ref.unnamed else ref.alias
        aliases = [said] if said else []
        owner = self._resolve(ref.owner) if ref.owner is not None and ref.relation else None
        if owner is not None:
            aliases.append(f"{owner.normalized_name} {ref.relation}"[:500])
        return list(dict.fromkeys(aliases)), owner

    def _named_owner(self, ref: extraction.Ref) -> tuple[uuid.UUID, tuple[str, ...]] | None:
        """The first owner up the chain of an unnamed one that the bucket knows, and the
        relations from it: "my sister's husband" is (User, (sister, husband)) while the sister
        has no name; None without one."""
        path = [ref.relation]
        owner = ref.owner
        while owner is not None:
            entity = self._resolve(owner)
            if entity is not None:
                return entity.pk, tuple(reversed(path))
            if not owner.unnamed or not owner.relation:
                return None
            path.append(owner.relation)
            owner = owner.owner
        return None

    def _resolve(self, ref: extraction.Ref) -> Entity | None:
        if ref.tentative:
            # A word that may be a name: the bucket's entity of that name, if any; never a new one.
            self._lookup([ref.key])
            return self.by_key.get(ref.key)
        redirected = self.rules.redirect(ref.key) if self.rules else None
        if redirected is not None:
            # An operator said what this name denotes (an alias, an old name, a merge).
            entity = self.by_key.get(ref.key)
            if entity is None or entity.normalized_name != redirected.key:
                entity = self.target(redirected)
            self._add_aliases(entity, {ref.key, ref.alias} if not ref.unnamed else {ref.key})
            self.by_key[ref.key] = entity
            return entity
        aliases, owner = self._relation_aliases(ref)
        if ref.unnamed:
            return next((e for e in map(self._known_as, aliases) if e is not None), None)
        self._lookup([ref.key])
        entity = self.by_key.get(ref.key)
        partial = self._full_name(ref)
        if partial is not None and (
            entity is None or " " not in entity.normalized_name and entity.type in {"PERSON", "THING"}
        ):
            # "Priya" is the bucket's one Priya Natarajan, even where a memory read before her full
            # name was known made a "Priya" of its own (that memory is read again: rereads()). A
            # pet, a place or a company of that one word keeps it ("Max" the dog, not Max Weber).
            entity = partial
        if entity is None:
            entity, created = _get_or_create(self.bucket, ref)
            entity = self._one(entity)
            self._absent.discard(ref.key)
            if created:
                self._note_name(entity)
        if aliases:
            new = [a for a in aliases if a not in entity.aliases and a != entity.normalized_name]
            if new and ref.relation and all(self._known_as(a) is None for a in aliases):
                named = self._named_owner(ref)
                if named is not None:
                    self.named_relations.add(named)  # "my sister" (or "my sister's husband") has a name now
            self._add_aliases(entity, set(new))
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
            self._note_name(entity)
        self.by_key[ref.key] = entity
        return entity

    def _full_name(self, ref: extraction.Ref) -> Entity | None:
        """A lone first name (or its nickname) or surname is the bucket's one person it may
        stand for: "Alice" is Alice Chen, "Natarajan" Priya Natarajan, while the bucket knows no
        other; and a name no one has, the short form of the one first name it begins ("Mel" is
        Melanie, or Melanie Chen: graph.selectors.entities_by_short_form). Surnames and short
        forms only for what the memory calls a person; never a name an operator gave an entity
        of its own, nor one they split off that person."""
        if " " in ref.key or ref.type not in {"PERSON", "THING"} or self.rules.curated(ref.key):
            return None
        if ref.key not in self._partial:
            person = ref.type == "PERSON"
            matches = entities_by_partial_name(bucket=self.bucket, words=[ref.key], surnames=person, short_forms=person)
            ids = matches.get(ref.key, [])
            self._partial[ref.key] = self._one(Entity.objects.get(pk=ids[0])) if len(ids) == 1 else None
        entity = self._partial[ref.key]
        if entity is None or self.rules and (ref.key, entity.normalized_name) in self.rules.blocked:
            return None  # an operator split this name off that person
        return entity

    def _note_name(self, entity: Entity) -> None:
        """A person's name new to the bucket: the partial names it may be read from resolve
        afresh (a full name's first name, nicknames and surname; any name's short forms)."""
        stale = _partial_keys(entity)
        if not stale:
            return
        self.new_names[entity.pk] = entity
        for key in stale:
            self._partial.pop(key, None)
            cached = self.by_key.get(key)
            if cached is not None and cached.pk != entity.pk and cached.normalized_name != key:
                del self.by_key[key]  # "Priya" was the one Priya Natarajan until now, "Mel" Melanie

    def rereads(self) -> set[uuid.UUID]:
        """Memories whose reading what was learned since the last call may change: those that
        name someone by a partial name of a new full name (the one-word "Priya" entities, and
        the other Priyas' memories that do not say their full name), and those that spoke of a
        relative or pet without a name that now has one."""
        names, relations = list(self.new_names.values()), set(self.named_relations)
        self.new_names, self.named_relations = {}, set()
        found: set[uuid.UUID] = set()
        if names:
            keys = sorted(set().union(*map(_partial_keys, names)))
            full = [e.normalized_name.split() for e in names if " " in e.normalized_name]
            firsts = sorted({k for words in full for k in extraction.first_name_variants(words[0])})
            lasts = sorted({words[-1] for words in full})
            # The people whose short forms the new name may share ("Mel": Melanie, then Melissa).
            beginnings = sorted({e.normalized_name.split()[0][:SHORT_FORM_LETTERS] for e in names})
            with connection.cursor() as cur:
                cur.execute(
                    """
                    SELECT mn.memory_id FROM graph_entities e JOIN graph_mentions mn ON mn.entity_id = e.id
                    WHERE e.tenant_id = %s AND e.bucket_id = %s AND e.normalized_name = ANY(%s)
                      AND e.type IN ('PERSON', 'THING')
                    UNION
                    SELECT mn.memory_id FROM graph_entities e JOIN graph_mentions mn ON mn.entity_id = e.id
                    JOIN memories m ON m.id = mn.memory_id
                    WHERE e.tenant_id = %s AND e.bucket_id = %s AND e.type = 'PERSON' AND e.id <> ALL(%s)
                      AND (strpos(e.normalized_name, ' ') > 0
                           AND (split_part(e.normalized_name, ' ', 1) = ANY(%s)
                                OR split_part(e.normalized_name, ' ', -1) = ANY(%s))
                           OR length(split_part(e.normalized_name, ' ', 1)) > %s
                              AND left(e.normalized_name, %s) = ANY(%s))
                      AND strpos(lower(m.content), e.normalized_name) = 0
                    """,
                    [self.bucket.tenant_id, self.bucket.pk, keys, self.bucket.tenant_id, self.bucket.pk,
                     [e.pk for e in names], firsts, lasts, SHORT_FORM_LETTERS, SHORT_FORM_LETTERS, beginnings],
                )  # fmt: skip
                found |= {row[0] for row in cur.fetchall()}
        for owner_id, path in relations:
            # The relation's own edge as unnamed.attribute_fact stores it: User has sister; for
            # "my sister's husband", User sister_has husband.
            predicate = "_".join([*(p.replace(" ", "_") for p in path[:-1]), "has"])
            found |= set(
                Edge.objects.for_bucket(self.bucket)
                .filter(subject_id=owner_id, predicate=predicate, object_entity__isnull=True, object_literal=path[-1])
                .values_list("source_memory_id", flat=True)
            )
        return found

    def forget(self, entity_ids: Iterable[uuid.UUID]) -> None:
        """Entities that extraction removed from the memories that mentioned them."""
        self.maybe_orphans |= set(entity_ids)

    def drop_orphans(self) -> int:
        """Delete the entities a re-extraction left without a mention or an edge (a "Priya" that
        became Priya Natarajan), unless an operator made them. Returns how many."""
        ids = list(self.maybe_orphans)
        self.maybe_orphans = set()
        if not ids:
            return 0
        orphans = (
            Entity.objects.for_bucket(self.bucket)
            .filter(pk__in=ids)
            .exclude(type="SPEAKER")
            .exclude(Exists(Mention.objects.filter(entity_id=OuterRef("pk"))))
            .exclude(Exists(Edge.objects.filter(subject_id=OuterRef("pk"))))
            .exclude(Exists(Edge.objects.filter(object_entity_id=OuterRef("pk"))))
        )
        doomed = [e.pk for e in orphans if not self.rules.curated(e.normalized_name)]
        if not doomed:
            return 0
        Entity.objects.filter(pk__in=doomed).delete()
        gone = set(doomed)
        self._rows = {pk: e for pk, e in self._rows.items() if pk not in gone}
        self.by_key = {k: e for k, e in self.by_key.items() if e.pk not in gone}
        self._by_alias = {k: e for k, e in self._by_alias.items() if e is None or e.pk not in gone}
        self._partial = {k: e for k, e in self._partial.items() if e is None or e.pk not in gone}
        return len(doomed)


def _partial_keys(entity: Entity) -> set[str]:
    """The one-word names that may stand for the person ``entity`` (empty for anything else,
    and for a description an older extractor stored as a name): a full name's first name, its
    nickname forms and its surname, and the short forms of its first name ("mel" for Melanie)."""
    words = entity.normalized_name.split()
    if entity.type != "PERSON" or not words or entity.name.lower().split()[:1] != words[:1]:
        return set()
    keys = extraction.short_forms_of(words[0])
    if len(words) > 1:
        keys |= extraction.first_name_variants(words[0]) | {words[-1]}
    return keys


_COLUMNS = [field.column for field in Entity._meta.concrete_fields]


def _get_or_create(bucket: Bucket, ref: extraction.Ref) -> tuple[Entity, bool]:
    """The entity of ``ref``'s name and type, and whether this call created it (one statement
    when it does)."""
    with connection.cursor() as cur:
        cur.execute(
            f"""
            INSERT INTO graph_entities (tenant_id, bucket_id, name, normalized_name, type, aliases, mention_count)
            VALUES (%s, %s, %s, %s, %s, '{{}}', 0)
            ON CONFLICT (tenant_id, bucket_id, normalized_name, type) DO NOTHING
            RETURNING {", ".join(_COLUMNS)}
            """,
            [bucket.tenant_id, bucket.pk, ref.name[:500], ref.key[:500], ref.type],
        )
        row = cur.fetchone()
    if row is not None:
        return Entity.from_db(connection.alias, [f.attname for f in Entity._meta.concrete_fields], row), True
    return Entity.objects.for_bucket(bucket).get(normalized_name=ref.key[:500], type=ref.type), False


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
