"""People and pets known only by a relation: "my sister", "Lena's dog", "the dog of Lena Ortiz".

Such a phrase describes someone; it does not name them, and it never becomes an entity. The
extractor gives it an unnamed reference (``Ref.unnamed``) whose key is the alias the person
gets once named ("user sister", "lena ortiz dog"). A bucket that knows the name (an entity with
that alias: "my sister Anna" was said) resolves the reference to that entity. A bucket that
does not keeps what the memory says as facts about the owner:

* the relation itself: ``owner has <relation>`` ("Lena Ortiz has dog", "User has sister"; "my
  sister's husband": User has sister, User sister_has husband);
* a fact about the unnamed one: ``owner <relation>_<predicate> object`` ("my mom lives in
  Ohio": User mom_lives_in Ohio; "Lena's dog is a beagle": Lena Ortiz dog_is_a beagle). A
  functional predicate stays functional, on a timeline of its own per relation;
* the unnamed one as the object of another fact: its description as text ("Marco manages my
  brother": Marco Rossi manager_of "brother of User").

A common word opening a sentence ("Dash is scared of thunderstorms.") is a tentative reference
(``Ref.tentative``): the name of an entity the bucket knows ("a greyhound called Dash"), or a word
(its facts, having no owner, are dropped).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from graph.extract.refs import Fact, Ref

# A description of a description ("my sister's husband's dog") is followed this deep.
_DEPTH = 4


def _unknown(ref: Ref | None, known: Callable[[Ref], bool]) -> bool:
    return ref is not None and (ref.unnamed or ref.tentative) and not known(ref)


def _owns(a: Ref, b: Ref, *, one_way: bool = False) -> bool:
    """Whether ``a`` is the owner of ``b`` (or, unless ``one_way``, ``b`` of ``a``)."""
    if b.owner is not None and b.relation and b.owner.key == a.key:
        return True
    return not one_way and a.owner is not None and bool(a.relation) and a.owner.key == b.key


def attribute_fact(fact: Fact, known: Callable[[Ref], bool]) -> Fact | None:
    """``fact`` as the bucket can store it: unchanged when every reference in it is a name or
    an unnamed one ``known`` says the bucket can resolve; else rewritten onto the owner (see
    the module's docstring); None when there is no owner to hang it on."""
    for _ in range(_DEPTH):
        subject_unknown, object_unknown = _unknown(fact.subject, known), _unknown(fact.obj, known)
        if not subject_unknown and not object_unknown:
            return fact
        if subject_unknown and object_unknown and _owns(fact.subject, fact.obj):
            # Between two unnamed ones, the relation's own edge: "my sister's husband" -> my
            # sister has husband (-> User sister_has husband), not a description as its object.
            forward = _owns(fact.subject, fact.obj, one_way=True)
            owner, owned = (fact.subject, fact.obj) if forward else (fact.obj, fact.subject)
            fact = Fact(subject=owner, predicate="has", literal=owned.relation, valid_from=fact.valid_from,
                        confidence=fact.confidence)  # fmt: skip
            continue
        unnamed, other = (fact.subject, fact.obj) if subject_unknown else (fact.obj, fact.subject)
        owner = unnamed.owner
        if owner is None or not unnamed.relation:
            return None
        if other is not None and other.key == owner.key:
            # The relation's own edge: "my sister" -> User has sister.
            fact = Fact(subject=owner, predicate="has", literal=unnamed.relation, valid_from=fact.valid_from,
                        confidence=fact.confidence)  # fmt: skip
        elif subject_unknown:
            words = unnamed.relation.replace(" ", "_")
            functional = f"{words}_{fact.functional_key}" if fact.functional_key else None
            fact = replace(fact, subject=owner, predicate=f"{words}_{fact.predicate}", functional_key=functional)
        else:
            fact = replace(fact, obj=None, literal=f"{unnamed.relation} of {owner.name}")
    return None


def known_mentions(mentions: list[Ref], known: Callable[[Ref], bool]) -> list[Ref]:
    """The mentions that are entities: names, and unnamed references the bucket resolves."""
    return [m for m in mentions if not _unknown(m, known)]
