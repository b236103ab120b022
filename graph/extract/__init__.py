"""Entity and fact extraction without an LLM: spaCy's parse plus a curated predicate vocabulary.

``extract(doc, speaker=..., context_doc=...)`` turns one parsed memory into entity
references and facts (subject, predicate, object entity or literal). It is a
pure function of its input, so rebuilding the graph from the same memories
gives the same graph. ``split_speaker(text, attributed_to=...)`` comes first: it
reads a leading ``Name:`` as the speaker and returns the text to parse.

What it understands, deliberately small and predictable:

* names: NER entities and proper-noun chains ("Mass General", "Mrs. Kowalski",
  "iPhone 15"), never with a trailing possessive or punctuation ("Alice Chen's"
  is Alice Chen); within one memory a lone first name ("Alice") is the full name
  it introduced ("Alice Chen");
* the speaker: "I/me/my/we" (and "the user") resolve to the user, the assistant
  for assistant-attributed memories, or the speaker of a "Caroline: ..." line;
* people by relation, as edges whose predicate reads as a sentence: possessives
  ("Alice's manager Bob", "my sister Anna"), appositions ("Anna, my sister"),
  copulas ("Bob is Alice's manager", "my doctor is Dr. Okafor") and "has a sister,
  Carol" give Bob manager_of Alice, User sibling_of Anna, User owns_pet Rex, Grace
  parent_of Liam …; the named person is also known by the alias "<owner>
  <relation>" ("user sister"); without a name, a placeholder ("sister of User")
  that becomes the person once named; "she/he" are the last person mentioned,
  "who" the noun it describes;
* descriptions: "X is a nurse" / "X, the principal" (is_a), "X is the CTO of
  TechCo" / "X, a nurse at Mercy" (role + works_at);
* verbs and copulas mapped to predicates — functional ones (``lives_in``,
  ``works_at``, ``role``, ``spouse_of``, ``favourite_<x>``, ``owns`` per category
  of thing …) hold one value at a time; others (``likes``, ``visited``,
  ``allergic_to`` …) accumulate;
* types settled by what the sentence says of a name: an employer is an ORG, a
  place lived in a PLACE, a pet an ANIMAL, a sibling a PERSON — the small NER
  model often guesses otherwise;
* dates in the sentence ("in 2019", "since March 2021") as the fact's start.

Hedged, negated and future statements ("I might move", "I don't live", "maybe
she works", "we will move") produce no fact: a memory service should not assert them.
"""

from __future__ import annotations

from dataclasses import replace

from graph.extract.facts import describe, relation_facts, sentence_date, verb_facts
from graph.extract.refs import (
    Extraction,
    Fact,
    Ref,
    Resolver,
    normalize_name,
    speaker_ref,
    split_speaker,
)
from graph.extract.unnamed import attribute_fact, known_mentions
from graph.extract.vocabulary import (
    JOB_TITLES,
    RELATIONS,
    THIRD_PERSON,
    first_name_variants,
    may_be_short_form,
    partial_name_of,
    short_form_people,
    short_forms_of,
)

__all__ = [
    "Extraction", "Fact", "Ref", "Resolver", "attribute_fact", "extract", "first_name_variants", "known_mentions",
    "may_be_short_form", "normalize_name", "partial_name_of", "reads_context", "short_form_people", "short_forms_of",
    "speaker_ref", "split_speaker", "stored",
]  # fmt: skip

# What a fact says about the type of its subject / object (the NER's guess is the weakest evidence).
_PERSON_SUBJECT = {
    "works_at", "role", "studies_at", "graduated_from", "teaches", "speaks", "learning", "born_in", "from", "likes",
    "dislikes", "prefers", "plays", "allergic_to", "owns", "owns_pet", "uses", "visited", "lives_in", "manager_of",
    "married_to", "dating",
}  # fmt: skip
_OBJECT_TYPE = {
    "works_at": "ORG", "studies_at": "ORG", "graduated_from": "ORG", "lives_in": "PLACE", "born_in": "PLACE",
    "located_in": "PLACE", "from": "PLACE", "visited": "PLACE", "owns": "PRODUCT", "uses": "PRODUCT",
    "plays": "PRODUCT", "owns_pet": "ANIMAL", "manager_of": "PERSON", "married_to": "PERSON", "dating": "PERSON",
    "hired": "PERSON",
}  # fmt: skip


def extract(doc, *, speaker: Ref, context_doc=None) -> Extraction:
    """Entities and facts of one parsed memory (``doc``), with ``context_doc`` (its
    sequence predecessors, parsed) used only to resolve he/she."""
    context_people: list[Ref] = []
    if context_doc is not None:
        context_resolver = Resolver(context_doc, speaker, [])
        for token in context_doc:
            ref = context_resolver.ref(token) if token.pos_ in {"PROPN", "NOUN"} else None
            if ref is not None and ref.type in {"PERSON", "ANIMAL", "THING"}:
                context_people.append(ref)
    resolver = Resolver(doc, speaker, context_people)
    out = Extraction()
    out.mention(speaker)  # a named speaker ("Caroline: ...") is an entity; the user is not
    relation_refs: dict[str, Ref] = {}

    for sent in doc.sents:
        when = sentence_date(sent)
        for token in sent:
            if token.pos_ in {"PROPN", "NOUN", "PRON", "ADJ"} and not _inside_name(token, resolver):
                if token.pos_ in {"NOUN", "ADJ"} and token.lemma_.lower() in RELATIONS:
                    related = relation_facts(token, resolver, out, when)
                    if related is not None:
                        owner, people = related
                        relation_refs.setdefault(owner.key, replace(owner, type="PERSON"))
                        for person in people:
                            relation_refs[person.key] = person
                ref = resolver.ref(token) if token.pos_ != "ADJ" else None
                if ref is not None:
                    out.mention(ref)
                    if token.pos_ != "PRON":
                        resolver.note_person(ref)
                        _apposition_facts(token, ref, resolver, out, when)
            if token.pos_ in {"VERB", "AUX"}:
                verb_facts(token, resolver, out, when)
    return _settle(out, relation_refs)


def reads_context(doc) -> bool:
    """Whether :func:`extract` of ``doc`` reads its ``context_doc``: only for the people "he",
    "she" or "they" may be, so only when ``doc`` says one of them. Parsing the context (up to
    2,000 characters of the sequence before a memory) of the others is work thrown away."""
    return any(token.lower_ in THIRD_PERSON for token in doc)


def _inside_name(token, resolver: Resolver) -> bool:
    """A word of a longer name ("Bob" of Bob Martinez, "St. Mary" of St. Mary's Hospital)."""
    head = token.head
    if head is token:
        return False
    if token.pos_ == "NOUN" and token.lemma_.lower() in RELATIONS and resolver.possessor(token) is not None:
        return False  # "Maria's dog Pepper", parsed with dog as a compound of Pepper: a relation
    if token.dep_ in {"compound", "flat"} and (head.pos_ == "PROPN" or resolver.named(head) is not None):
        return True
    ent = resolver.ent_of.get(token.i)
    return ent is not None and ent.start <= head.i < ent.end and token.dep_ != "appos"


def _apposition_facts(token, ref: Ref, resolver: Resolver, out: Extraction, when) -> None:
    """ "Bob Martinez, the CTO of TechCo, ..." / "Ms. Wong, the principal, ..." / "The CEO of
    Acme, Jane Doe, ..." (the title first: ``ref`` is the person it names)."""
    if ref.type == "SPEAKER":
        return
    if token.lower_ in JOB_TITLES and token.pos_ in {"NOUN", "PROPN"} and resolver.named(token) is None:
        describe(ref, token, resolver, out, when)
        return
    for child in token.children:
        if child.dep_ != "appos" or child.lemma_.lower() in RELATIONS:
            continue
        if child.pos_ == "PROPN" and child.lower_ not in JOB_TITLES:
            continue
        if any(c.dep_ in {"det", "poss"} for c in child.children):
            describe(ref, child, resolver, out, when)


def _settle(out: Extraction, relation_refs: dict[str, Ref]) -> Extraction:
    """One type per entity from what the memory says of it, lone first names and surnames read
    as the full name the memory gave, and each fact once."""
    evidence: dict[str, tuple[int, str]] = {}

    def note(ref: Ref | None, strength: int, kind: str) -> None:
        if ref is None or ref.type == "SPEAKER":
            return
        if ref.type == "ANIMAL" and kind == "PERSON":
            kind = "ANIMAL"
        if strength > evidence.get(ref.key, (-1, ""))[0]:
            evidence[ref.key] = (strength, kind)

    for ref in relation_refs.values():
        note(ref, 3, ref.type)
    for fact in out.facts:
        if fact.predicate in _PERSON_SUBJECT:
            note(fact.subject, 1, "PERSON")
        if fact.predicate == "located_in" and fact.subject.type != "ORG":
            note(fact.subject, 1, "PLACE")
        if fact.obj is not None and fact.predicate in _OBJECT_TYPE:
            note(fact.obj, 2, _OBJECT_TYPE[fact.predicate])
    for ref in out.mentions:
        note(ref, 0, ref.type)

    def typed(ref: Ref) -> Ref:
        if ref.type == "SPEAKER" or ref.key not in evidence:
            return ref
        return replace(ref, type=evidence[ref.key][1])

    mentions = [typed(m) for m in out.mentions]
    # "Alice Chen joined Initech. Alice loves it" / "... Chen loves it": Alice and Chen (and a
    # short form, "Mel" for Melanie Chen) are Alice Chen when she is the only one of that first
    # name or surname the memory gave.
    full_names = [m for m in mentions if m.type == "PERSON" and " " in m.key and normalize_name(m.name) == m.key]
    same: dict[str, Ref] = {}
    for mention in mentions:
        if " " in mention.key or mention.type not in {"PERSON", "THING"}:
            continue
        surname = mention.type == "PERSON"
        matches = {f.key: f for f in full_names if partial_name_of(mention.key, f.key, surname=surname)}
        if not matches and surname:
            # "Melanie Chen moved to Leeds; Mel works at Initech": the one first name "Mel" begins.
            people = short_form_people(mention.key, [(f.key.split()[0], True, f) for f in full_names])
            matches = {f.key: f for f in people}
        if len(matches) == 1:
            same[mention.key] = next(iter(matches.values()))

    def final(ref: Ref | None) -> Ref | None:
        if ref is None:
            return None
        ref = typed(ref)
        if ref.owner is not None:
            ref = replace(ref, owner=final(ref.owner))
        full = same.get(ref.key)
        return replace(full, alias=ref.alias or full.alias) if full is not None else ref

    settled = Extraction()
    for mention in mentions:
        settled.mention(final(mention))
    seen = set()
    for fact in out.facts:
        subject, obj = final(fact.subject), final(fact.obj)
        if obj is not None and obj.key == subject.key:
            continue
        if fact.predicate == "hired" and subject.type == "ORG" and obj is not None:
            # "Finlytics hired Priya": an organisation that hires employs.
            fact = Fact(subject=obj, predicate="works_at", obj=subject, functional_key="works_at",
                        valid_from=fact.valid_from, confidence=fact.confidence)  # fmt: skip
            subject, obj = fact.subject, fact.obj
        signature = (subject.key, fact.predicate, obj.key if obj is not None else fact.literal)
        if signature in seen:
            continue
        seen.add(signature)
        settled.facts.append(replace(fact, subject=subject, obj=obj))
    return settled


def stored(result: Extraction, known=lambda ref: False) -> Extraction:
    """``result`` as a bucket stores it: unnamed references the bucket cannot resolve
    (``known(ref)`` is False; by default none, as for a memory read alone) are no entities,
    and their facts are attributes of their owners (graph/extract/unnamed.py)."""
    out = Extraction(mentions=known_mentions(result.mentions, known))
    seen = set()
    for fact in result.facts:
        fact = attribute_fact(fact, known)
        if fact is None:
            continue
        signature = (fact.subject.key, fact.predicate, fact.obj.key if fact.obj is not None else fact.literal)
        if signature not in seen:
            seen.add(signature)
            out.facts.append(fact)
    return out
