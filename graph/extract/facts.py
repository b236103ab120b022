"""Facts from verbs, copulas, appositions and relation nouns of one parsed memory."""

from __future__ import annotations

from datetime import UTC, datetime

from graph.extract.refs import Extraction, Fact, Ref, Resolver, hedged
from graph.extract.vocabulary import (
    CATEGORIES,
    CONCRETE_ONLY,
    DATE,
    INVERSE_VERB_PREP,
    JOB_NOUNS,
    JOB_TITLES,
    JOB_VERBS,
    MONTHS,
    NAMED_OBJECT_ONLY,
    RELATIONS,
    VERB_OBJECT,
    VERB_PREP,
    relation_predicate,
)

FAVOURITE = {"favourite", "favorite"}


def literal(token) -> str:
    """A plain object as text: the head noun with its compounds and adjectives ("dark roast coffee")."""
    keep = {"compound", "amod", "nummod", "nmod"}
    tokens = sorted([t for t in token.subtree if t.dep_ in keep and t.head == token] + [token], key=lambda t: t.i)
    return " ".join(t.lemma_.lower() if t.i == token.i and t.pos_ == "NOUN" else t.text.lower() for t in tokens)


def category(token) -> str | None:
    words = {token.lower_, token.lemma_.lower()} | {t.lower_ for t in token.subtree if t.dep_ == "compound"}
    for name, vocabulary in CATEGORIES.items():
        if words & vocabulary:
            return name
    return None


def sentence_date(sent) -> datetime | None:
    for ent in sent.ents:
        if ent.label_ == "DATE":
            match = DATE.search(ent.text)
            if match:
                month = MONTHS.get((match.group(1) or "").lower(), 1)
                return datetime(int(match.group(2)), month, 1, tzinfo=UTC)
    return None


def _is_date(token) -> bool:
    return token.ent_type_ in {"DATE", "TIME", "CARDINAL", "ORDINAL", "QUANTITY", "MONEY", "PERCENT"}


def relation_facts(token, resolver: Resolver, out: Extraction, when) -> tuple[Ref, list[Ref]] | None:
    """The edges of a relation noun: "my son Oliver" -> User parent_of Oliver, "Bob is Alice's
    manager" -> Bob manager_of Alice; each named person (or the placeholder) is mentioned."""
    relation = resolver.relation(token)
    if relation is None:
        return None
    owner, phrase, people = relation
    predicate, person_first, functional = relation_predicate(token.lemma_.lower(), phrase)
    for person in people:
        out.mention(person)
        subject, obj = (person, owner) if person_first else (owner, person)
        out.facts.append(Fact(subject=subject, predicate=predicate, obj=obj,
                              functional_key=predicate if functional else None, valid_from=when))  # fmt: skip
    # "Bob Martinez is Alice Chen's manager at TechCo": the employer of the related person.
    if token.dep_ in {"attr", "appos"} and people:
        for person in people:
            _employer_facts(person, token, resolver, out, when)
    return owner, people


def _employer_facts(subject: Ref, noun, resolver: Resolver, out: Extraction, when) -> bool:
    """works_at for "<noun> at/for/with/of <organisation>" and "<organisation>'s <noun>";
    True when one was found."""
    found = False
    for poss in (c for c in noun.children if c.dep_ == "poss" and c.pos_ == "PROPN" and noun.lower_ in JOB_TITLES):
        obj = resolver.ref(poss)  # "Acme's CEO"; a person's or a place's is not an employer
        if obj is not None and obj.type in {"ORG", "THING", "PRODUCT"}:
            out.facts.append(Fact(subject=subject, predicate="works_at", obj=obj, functional_key="works_at",
                                  valid_from=when))  # fmt: skip
            found = True
    for prep in (c for c in noun.children if c.dep_ == "prep" and c.lower_ in {"at", "for", "of"}):
        for target in (c for c in prep.children if c.dep_ == "pobj"):
            obj = resolver.ref(target)
            # "the capital of France" names no employer; the NER often calls a company a PERSON.
            if obj is None or obj.type in {"SPEAKER", "ANIMAL"} or obj.type == "PLACE" and prep.lower_ == "of":
                continue
            out.facts.append(Fact(subject=subject, predicate="works_at", obj=obj, functional_key="works_at",
                                  valid_from=when))  # fmt: skip
            found = True
    return found


def describe(subject: Ref, noun, resolver: Resolver, out: Extraction, when) -> None:
    """ "X is a nurse" / "X, the CTO of TechCo": is_a, or role + works_at with an employer."""
    if noun.pos_ not in {"NOUN", "PROPN"} or noun.pos_ == "PROPN" and noun.lower_ not in JOB_TITLES:
        return
    if _employer_facts(subject, noun, resolver, out, when):
        out.facts.append(Fact(subject=subject, predicate="role", literal=literal(noun), functional_key="role",
                              valid_from=when))  # fmt: skip
    else:
        out.facts.append(Fact(subject=subject, predicate="is_a", literal=literal(noun), valid_from=when))


def object_fact(subject: Ref, predicate: str, functional: bool, obj_token, resolver: Resolver, when, *,
                verb_lemma: str) -> Fact | None:  # fmt: skip
    if _is_date(obj_token):
        return None
    obj = resolver.ref(obj_token)
    if obj is None and obj_token.pos_ == "PRON":
        return None  # "loves it": nothing to say
    if obj is None and predicate in NAMED_OBJECT_ONLY:
        return None
    text = None if obj is not None else literal(obj_token)
    if obj is not None and obj.type == "SPEAKER" and predicate not in {"married_to", "dating", "manager_of", "hired"}:
        return None
    functional_key = predicate if functional else None
    if predicate == "owns":
        kind = category(obj_token)
        if verb_lemma in CONCRETE_ONLY and kind is None and obj is None:
            return None
        if verb_lemma == "drive" and kind is None:
            kind = "car"
        functional_key = f"owns:{kind}" if kind else None
    if predicate == "named":
        # "we named the puppy Miso" / "my dog is called Miso": the thing gets a name.
        return None
    return Fact(subject=subject, predicate=predicate, obj=obj, literal=text, functional_key=functional_key,
                valid_from=when)  # fmt: skip


def verb_facts(verb, resolver: Resolver, out: Extraction, when) -> None:
    if hedged(verb):
        return
    lemma = verb.lemma_.lower()
    children = list(verb.children)
    subjects = _subjects_of(verb, resolver)
    if lemma == "be":
        for subject in subjects or [None]:
            _copula_facts(verb, subject, children, resolver, out, when)
        return
    for subject in subjects:
        _verb_facts(verb, lemma, subject, children, resolver, out, when)


def _subject_of(verb, resolver: Resolver) -> Ref | None:
    for child in verb.children:
        if child.dep_ in {"nsubj", "nsubjpass"}:
            return resolver.ref(child)
    # "I started working at X": the subject sits on the governing verb; "and moved to Y": on the first conj.
    if verb.dep_ in {"xcomp", "conj"} and verb.head is not verb:
        return _subject_of(verb.head, resolver)
    return None


def _subjects_of(verb, resolver: Resolver) -> list[Ref]:
    """The subject and its conjuncts ("Bob and I went ...")."""
    token = next((c for c in verb.children if c.dep_ in {"nsubj", "nsubjpass"}), None)
    if token is None:
        subject = _subject_of(verb, resolver)
        return [subject] if subject is not None else []
    refs = [resolver.ref(t) for t in [token, *token.conjuncts]]
    return [r for r in refs if r is not None]


def _verb_facts(verb, lemma: str, subject: Ref, children, resolver: Resolver, out: Extraction, when) -> None:
    for child in children:
        if child.dep_ in {"prep", "agent"}:
            key = (lemma, child.lower_)
            if key in VERB_PREP:
                predicate, functional = VERB_PREP[key]
                for pobj in (c for c in child.children if c.dep_ == "pobj"):
                    for target in [pobj, *pobj.conjuncts]:
                        if key in INVERSE_VERB_PREP:
                            boss = resolver.ref(target)
                            if boss is not None:
                                out.facts.append(Fact(subject=boss, predicate=predicate, obj=subject, valid_from=when))
                            continue
                        fact = object_fact(subject, predicate, functional, target, resolver, when, verb_lemma=lemma)
                        if fact is not None:
                            out.facts.append(fact)
                    if predicate == "role":
                        # "works as a nurse at Mass General": the employer hangs off the role.
                        for prep in (c for c in pobj.children if c.dep_ == "prep" and c.lower_ in {"at", "for"}):
                            for target in (c for c in prep.children if c.dep_ == "pobj"):
                                fact = object_fact(subject, "works_at", True, target, resolver, when,
                                                   verb_lemma=lemma)  # fmt: skip
                                if fact is not None:
                                    out.facts.append(fact)
    for child in children:
        if child.dep_ in {"dobj", "obj"} and child.lemma_.lower() in JOB_NOUNS and lemma in JOB_VERBS:
            # "got a job at Deloitte": the preposition hangs off the job or the verb.
            for holder in (child, verb):
                for prep in (c for c in holder.children if c.dep_ == "prep" and c.lower_ in {"at", "with", "for"}):
                    for target in (c for c in prep.children if c.dep_ == "pobj"):
                        fact = object_fact(subject, "works_at", True, target, resolver, when, verb_lemma=lemma)
                        if fact is not None:
                            out.facts.append(fact)
            continue
        if child.dep_ in {"dobj", "obj"} and lemma in VERB_OBJECT:
            if child.pos_ == "NOUN" and child.lemma_.lower() in RELATIONS and resolver.possessor(child) is not None:
                continue  # "has a sister, Carol", "adopted a puppy named Biscuit": a relation, not a thing
            predicate, functional = VERB_OBJECT[lemma]
            for target in [child, *child.conjuncts]:
                fact = object_fact(subject, predicate, functional, target, resolver, when, verb_lemma=lemma)
                if fact is not None:
                    out.facts.append(fact)
        likes = lemma in {"like", "love", "enjoy", "hate", "prefer"}
        # "loves hiking" -> likes "hiking"; "likes to swim" -> likes "swim"
        if (
            child.dep_ == "xcomp"
            and child.pos_ == "VERB"
            and likes
            and not any(c.dep_ == "dobj" for c in child.children)
        ):
            predicate = VERB_OBJECT[lemma][0]
            text = child.lower_ if child.tag_ == "VBG" else child.lemma_.lower()
            out.facts.append(Fact(subject=subject, predicate=predicate, literal=text, valid_from=when))


def _favourite_of(subject_token, resolver: Resolver) -> tuple[Ref, str] | None:
    """("User", "favourite_colour") for "my favourite colour"."""
    if subject_token is None or subject_token.pos_ != "NOUN":
        return None
    owner = resolver.possessor(subject_token)
    favourite = any(c.dep_ == "amod" and c.lemma_.lower() in FAVOURITE for c in subject_token.children)
    if owner is None or not favourite:
        return None
    return owner, f"favourite_{subject_token.lemma_.lower()}"


def _copula_facts(verb, subject: Ref | None, children, resolver: Resolver, out: Extraction, when) -> None:
    subject_token = next((c for c in children if c.dep_ in {"nsubj", "nsubjpass"}), None)
    subject_is_relation = subject_token is not None and resolver.relation(subject_token) is not None
    for child in children:
        if child.dep_ == "attr" and resolver.relation(child) is not None:
            continue  # "Bob is Alice's manager": the relation's own edge (relation_facts)
        if child.dep_ == "attr" and subject is None and subject_token is not None:
            owner = resolver.possessor(subject_token) if subject_token.pos_ == "NOUN" else None
            kind = category(subject_token) if owner is not None else None
            named = resolver.ref(child) if kind is not None else None
            if named is not None:
                # "My phone is a Pixel 8"
                out.facts.append(Fact(subject=owner, predicate="owns", obj=named, functional_key=f"owns:{kind}",
                                      valid_from=when))  # fmt: skip
                continue
            # "Coffee is my favourite drink": the favourite is the subject.
            favourite = _favourite_of(child, resolver)
            if favourite is not None:
                owner, predicate = favourite
                out.facts.append(Fact(subject=owner, predicate=predicate, literal=literal(subject_token),
                                      functional_key=predicate, valid_from=when))  # fmt: skip
            elif subject_token.lower_ in JOB_TITLES:
                # "The CEO of Acme is Jane Doe": a description of the person named, not an entity.
                person = resolver.ref(child)
                if person is not None and person.type not in {"SPEAKER", "PLACE"}:
                    describe(person, subject_token, resolver, out, when)
            continue
        if child.dep_ == "attr" and subject is not None and _favourite_of(child, resolver) is not None:
            owner, predicate = _favourite_of(child, resolver)
            out.facts.append(Fact(subject=owner, predicate=predicate, obj=subject, functional_key=predicate,
                                  valid_from=when))  # fmt: skip
            continue
        if subject is None and child.dep_ != "acomp":
            continue
        if child.dep_ == "attr":
            named = resolver.ref(child)
            if subject_token is not None and subject_token.pos_ == "NOUN" and not subject_is_relation:
                lemma = subject_token.lemma_.lower()
                owner = resolver.possessor(subject_token)
                favourite = next((c for c in subject_token.children if c.dep_ == "amod"
                                  and c.lemma_.lower() in FAVOURITE), None)  # fmt: skip
                if favourite is not None and owner is not None:
                    predicate = f"favourite_{lemma}"
                    out.facts.append(
                        Fact(subject=owner, predicate=predicate, obj=named,
                             literal=None if named else literal(child), functional_key=predicate, valid_from=when)
                    )  # fmt: skip
                    continue
                if lemma == "name" and owner is not None and named is not None:
                    out.facts.append(Fact(subject=owner, predicate="named", literal=named.name,
                                          functional_key="named", valid_from=when))  # fmt: skip
                    continue
                kind = category(subject_token)
                if kind is not None and owner is not None and named is not None:
                    # "My phone is a Pixel 8"
                    out.facts.append(Fact(subject=owner, predicate="owns", obj=named, functional_key=f"owns:{kind}",
                                          valid_from=when))  # fmt: skip
                    continue
            if subject_is_relation and named is not None:
                continue  # "my sister is Anna": the relation's edge says it
            if named is not None and named.type != "SPEAKER" and named.key != subject.key:
                out.facts.append(Fact(subject=subject, predicate="is", obj=named, valid_from=when, confidence=0.6))
            elif named is None:
                describe(subject, child, resolver, out, when)
        elif child.dep_ == "acomp" and _favourite_of(subject_token, resolver) is not None:
            owner, predicate = _favourite_of(subject_token, resolver)
            out.facts.append(Fact(subject=owner, predicate=predicate, literal=child.lower_, functional_key=predicate,
                                  valid_from=when))  # fmt: skip
        elif child.dep_ == "acomp" and subject is not None:
            for prep in (c for c in child.children if c.dep_ == "prep"):
                for pobj in (c for c in prep.children if c.dep_ == "pobj"):
                    predicate = f"{child.lemma_.lower()}_{prep.lower_}"
                    obj = resolver.ref(pobj)
                    out.facts.append(Fact(subject=subject, predicate=predicate, obj=obj,
                                          literal=None if obj else literal(pobj), valid_from=when))  # fmt: skip
        elif child.dep_ == "prep" and child.lower_ in {"in", "from"} and subject is not None:
            # "Alice is in Boston now" / "Alice is from Lisbon" / "The Louvre is in Paris"
            predicate = "lives_in" if child.lower_ == "in" else "from"
            if predicate == "lives_in" and (subject.type in {"PLACE", "ORG"} or _has_article(subject_token)):
                predicate = "located_in"
            for pobj in (c for c in child.children if c.dep_ == "pobj"):
                obj = resolver.ref(pobj)
                if obj is not None and obj.type in {"PLACE", "THING", "ORG"}:
                    out.facts.append(Fact(subject=subject, predicate=predicate, obj=obj,
                                          functional_key=predicate, valid_from=when))  # fmt: skip


def _has_article(token) -> bool:
    return token is not None and any(c.dep_ == "det" and c.lower_ == "the" for c in token.children)
