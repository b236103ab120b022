"""Entity and fact extraction without an LLM: spaCy's parse plus a curated predicate vocabulary.

``extract(doc, speaker=..., context=...)`` turns one parsed memory into entity
references and facts (subject, predicate, object entity or literal). It is a
pure function of its input, so rebuilding the graph from the same memories
gives the same graph.

What it understands, deliberately small and predictable:

* names: NER entities and proper-noun chains ("Mass General", "Mrs. Kowalski");
* the speaker: "I/me/my/we" (and "the user") resolve to the user, or to the
  assistant for assistant-attributed memories;
* people by relation: "my sister Anna" (Anna, plus user —sister→ Anna),
  "my sister" alone (a placeholder entity "User's sister"), "she/he" (the last
  person mentioned in this memory or its sequence context);
* verbs and copulas mapped to predicates — functional ones (``lives_in``,
  ``works_at``, ``role``, ``married_to``, ``favourite_<x>``, ``owns`` per
  category of thing …) hold one value at a time; others (``likes``,
  ``visited``, ``allergic_to`` …) accumulate;
* dates in the sentence ("in 2019", "since March 2021") as the fact's start.

Hedged, negated and future statements ("I might move", "I don't live", "we
will move") produce no fact: a memory service should not assert them.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

# --- vocabulary ---------------------------------------------------------------------------

RELATIONS = {
    # kin and people
    "sister", "brother", "mother", "mom", "mum", "father", "dad", "parent", "son", "daughter", "kid", "child",
    "baby", "grandmother", "grandma", "grandfather", "grandpa", "aunt", "uncle", "cousin", "niece", "nephew",
    "wife", "husband", "spouse", "partner", "boyfriend", "girlfriend", "fiance", "fiancee", "friend",
    "boss", "manager", "colleague", "coworker", "roommate", "neighbor", "neighbour", "teacher", "doctor",
    "dentist", "therapist", "coach", "landlord", "mentor", "tutor", "vet", "assistant",
    # animals
    "dog", "cat", "puppy", "kitten", "pet", "parrot", "rabbit", "hamster", "horse", "bird", "turtle",
}  # fmt: skip
ANIMALS = {"dog", "cat", "puppy", "kitten", "pet", "parrot", "rabbit", "hamster", "horse", "bird", "turtle"}
SPOUSES = {"wife", "husband", "spouse", "partner", "boyfriend", "girlfriend", "fiance", "fiancee"}

# Things one usually has one of at a time: owning a new one replaces the old.
CATEGORIES = {
    "phone": {"phone", "iphone", "pixel", "galaxy", "smartphone", "android", "oneplus"},
    "car": {"car", "tesla", "toyota", "honda", "bmw", "audi", "subaru", "ford", "vehicle", "suv", "truck", "prius",
            "civic", "corolla", "volvo", "mazda", "kia", "hyundai", "volkswagen", "jeep"},
    "laptop": {"laptop", "macbook", "thinkpad", "notebook", "chromebook", "computer", "pc", "xps"},
    "watch": {"watch", "smartwatch", "garmin", "fitbit"},
    "tablet": {"ipad", "tablet", "kindle"},
    "bike": {"bike", "bicycle", "scooter"},
    "headphones": {"headphones", "earbuds", "airpods"},
    "tv": {"tv", "television"},
    "speaker": {"speaker", "sonos", "soundbar"},
    "console": {"console", "playstation", "xbox", "switch"},
}  # fmt: skip

# (verb lemma, preposition) -> (predicate, functional)
VERB_PREP = {
    ("live", "in"): ("lives_in", True),
    ("reside", "in"): ("lives_in", True),
    ("move", "to"): ("lives_in", True),
    ("relocate", "to"): ("lives_in", True),
    ("work", "at"): ("works_at", True),
    ("work", "for"): ("works_at", True),
    ("work", "as"): ("role", True),
    ("start", "at"): ("works_at", True),
    ("hire", "by"): ("works_at", True),
    ("employ", "by"): ("works_at", True),
    ("study", "at"): ("studies_at", True),
    ("graduate", "from"): ("graduated_from", False),
    ("bear", "in"): ("born_in", True),
    ("headquarter", "in"): ("located_in", True),
    ("locate", "in"): ("located_in", True),
    ("base", "in"): ("located_in", True),
    ("marry", "to"): ("married_to", True),
    ("switch", "to"): ("owns", True),
    ("upgrade", "to"): ("owns", True),
    ("travel", "to"): ("visited", False),
    ("go", "to"): ("visited", False),
    ("fly", "to"): ("visited", False),
    ("move", "into"): ("lives_in", True),
}
# verb lemma -> (predicate, functional)
VERB_OBJECT = {
    "join": ("works_at", True),
    "marry": ("married_to", True),
    "date": ("dating", True),
    "own": ("owns", False),
    "have": ("owns", False),
    "buy": ("owns", False),
    "get": ("owns", False),
    "drive": ("owns", False),
    "use": ("uses", False),
    "like": ("likes", False),
    "love": ("likes", False),
    "enjoy": ("likes", False),
    "adore": ("likes", False),
    "prefer": ("prefers", False),
    "hate": ("dislikes", False),
    "dislike": ("dislikes", False),
    "visit": ("visited", False),
    "play": ("plays", False),
    "speak": ("speaks", False),
    "learn": ("learning", False),
    "adopt": ("has_pet", False),
    "study": ("studies", False),
    "teach": ("teaches", False),
    "name": ("named", True),
    "call": ("named", True),
}
# Possessions only count for "have/get" when the thing is concrete (a category or a name):
# "I have a meeting" is not ownership.
CONCRETE_ONLY = {"have", "get"}
HEDGES = {"might", "may", "could", "would", "should", "will", "shall"}
HEDGING_VERBS = {"plan", "want", "hope", "consider", "think", "wish", "intend", "try", "need", "dream"}
TITLES = {"mr", "mrs", "ms", "miss", "dr", "prof", "sir", "madam", "mx"}
NER_TYPES = {
    "PERSON": "PERSON", "ORG": "ORG", "GPE": "PLACE", "LOC": "PLACE", "FAC": "PLACE", "PRODUCT": "PRODUCT",
    "EVENT": "EVENT", "WORK_OF_ART": "THING", "LANGUAGE": "THING",
}  # fmt: skip
SPEAKER_PRONOUNS = {"i", "me", "my", "mine", "myself", "we", "us", "our", "ours", "ourselves"}
THIRD_PERSON = {"he", "him", "his", "she", "her", "hers", "they", "them", "their"}
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_WEEKDAYS = {name.lower() for name in calendar.day_name}
_DATE = re.compile(r"(?:(" + "|".join(_MONTHS) + r")\s+)?(?:\d{1,2}(?:st|nd|rd|th)?,?\s+)?((?:19|20)\d{2})\b", re.I)


# --- data ----------------------------------------------------------------------------------


def normalize_name(text: str) -> str:
    words = re.sub(r"[^\w\s'-]", " ", text.casefold()).replace("'s ", " ").split()
    while words and words[0] in TITLES | {"the", "a", "an"}:
        words = words[1:]
    return " ".join(w.strip("'-") for w in words if w.strip("'-"))


@dataclass(frozen=True)
class Ref:
    name: str
    key: str
    type: str
    # "my sister Anna": Anna is also known as "user sister" (resolved later by alias).
    alias: str | None = None


@dataclass(frozen=True)
class Fact:
    subject: Ref
    predicate: str
    obj: Ref | None = None
    literal: str | None = None
    functional_key: str | None = None
    valid_from: datetime | None = None
    confidence: float = 1.0


@dataclass
class Extraction:
    mentions: list[Ref] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)

    def mention(self, ref: Ref | None) -> None:
        if ref is None or ref.type == "SPEAKER":
            return
        for index, known in enumerate(self.mentions):
            if known.key == ref.key:
                if ref.alias and not known.alias:
                    self.mentions[index] = ref
                return
        self.mentions.append(ref)


def speaker_ref(attributed_to: str | None) -> Ref:
    if attributed_to == "assistant":
        return Ref(name="Assistant", key="assistant", type="SPEAKER")
    return Ref(name="User", key="user", type="SPEAKER")


# --- extraction ------------------------------------------------------------------------------


class _Resolver:
    def __init__(self, doc, speaker: Ref, context_people: list[Ref]):
        self.doc = doc
        self.speaker = speaker
        self.people: list[Ref] = list(context_people)  # antecedents for he/she, most recent last
        self.ent_of: dict[int, object] = {}
        for ent in doc.ents:
            for token in ent:
                self.ent_of[token.i] = ent

    def named(self, token) -> Ref | None:
        """A name at ``token``: an NER entity or a proper-noun chain."""
        if token.lower_ in _MONTHS or token.lower_ in _WEEKDAYS:
            return None
        ent = self.ent_of.get(token.i)
        if ent is not None and ent.label_ in NER_TYPES:
            tokens = [t for t in ent if not (t.i == ent.start and t.lower_ in {"the"})]
            kind = NER_TYPES[ent.label_]
        elif ent is not None and ent.label_ not in NER_TYPES:
            return None  # dates, quantities, money: literals
        elif token.pos_ == "PROPN" or _looks_like_name(token):
            tokens = sorted(
                [t for t in token.subtree if t.i != token.i and t.pos_ == "PROPN" and t.dep_ in {"compound", "flat"}]
                + [token],
                key=lambda t: t.i,
            )
            kind = "THING"
        else:
            return None
        text = " ".join(t.text for t in tokens).strip()
        key = normalize_name(text)
        if not key or key in SPEAKER_PRONOUNS:
            return None
        lower = key.split()[0]
        if lower in CATEGORIES and kind == "THING":
            kind = "PRODUCT"
        if any(lower in words for words in CATEGORIES.values()):
            kind = "PRODUCT" if kind in {"THING", "ORG"} else kind
        return Ref(name=" ".join(w for w in text.split() if normalize_name(w) not in TITLES) or text, key=key,
                   type=kind)  # fmt: skip

    def possessor(self, token) -> Ref | None:
        for child in token.children:
            if child.dep_ == "poss":
                return self.ref(child)
        return None

    def ref(self, token) -> Ref | None:
        """The entity a token denotes, or None when it is a plain thing (a literal)."""
        lower = token.lower_
        if token.pos_ == "PRON" or lower in SPEAKER_PRONOUNS:
            if lower in SPEAKER_PRONOUNS:
                return self.speaker
            if lower in THIRD_PERSON:
                return self.people[-1] if self.people else None
            return None
        if token.lemma_.lower() == "user" and token.pos_ == "NOUN":
            return Ref(name="User", key="user", type="SPEAKER")
        named = self.named(token)
        if named is not None:
            return named
        if token.pos_ == "NOUN":
            lemma = token.lemma_.lower()
            appos = next((c for c in token.children if c.dep_ == "appos" and c.pos_ == "PROPN"), None)
            owner = self.possessor(token)
            if lemma in RELATIONS and owner is not None:
                relation = _relation_phrase(token)
                placeholder = f"{owner.key} {relation}"
                if appos is not None:
                    name = self.named(appos)
                    if name is not None:
                        kind = "ANIMAL" if lemma in ANIMALS else "PERSON"
                        return Ref(name=name.name, key=name.key, type=kind, alias=placeholder)
                kind = "ANIMAL" if lemma in ANIMALS else "PERSON"
                return Ref(name=f"{owner.name}'s {relation}", key=placeholder, type=kind)
            if appos is not None:
                return self.named(appos)
        return None

    def note_person(self, ref: Ref | None) -> None:
        if ref is not None and ref.type in {"PERSON", "ANIMAL", "THING"}:
            self.people.append(ref)


def _looks_like_name(token) -> bool:
    """A capitalised noun the small tagger did not call a proper noun ("Alice lives in
    Boston" tags Alice as NOUN): capitalised, no determiner or possessor, not a
    relation word, and either mid-sentence or the sentence's subject."""
    if token.pos_ != "NOUN" or not token.text[:1].isupper() or token.text.isupper() and len(token.text) > 1:
        return False
    if token.lemma_.lower() in RELATIONS or token.lower_ in {"user", "assistant"}:
        return False
    if any(c.dep_ in {"det", "poss"} for c in token.children):
        return False
    return not token.is_sent_start or token.dep_ in {"nsubj", "nsubjpass"}


def _relation_phrase(token) -> str:
    """ "piano teacher" for teacher with compound piano; just the lemma otherwise."""
    parts = [c.lemma_.lower() for c in token.children if c.dep_ == "compound" and c.pos_ == "NOUN"]
    return " ".join([*parts, token.lemma_.lower()])


def _literal(token) -> str:
    """A plain object as text: the head noun with its compounds and adjectives ("dark roast coffee")."""
    keep = {"compound", "amod", "nummod", "nmod"}
    tokens = sorted([t for t in token.subtree if t.dep_ in keep and t.head == token] + [token], key=lambda t: t.i)
    return " ".join(t.lemma_.lower() if t.i == token.i and t.pos_ == "NOUN" else t.text.lower() for t in tokens)


def _category(token) -> str | None:
    words = {token.lower_, token.lemma_.lower()} | {t.lower_ for t in token.subtree if t.dep_ == "compound"}
    for category, vocabulary in CATEGORIES.items():
        if words & vocabulary:
            return category
    return None


def _sentence_date(sent) -> datetime | None:
    for ent in sent.ents:
        if ent.label_ == "DATE":
            match = _DATE.search(ent.text)
            if match:
                month = _MONTHS.get((match.group(1) or "").lower(), 1)
                return datetime(int(match.group(2)), month, 1, tzinfo=UTC)
    return None


def _hedged(verb) -> bool:
    for child in verb.children:
        if child.dep_ == "neg":
            return True
        if child.dep_ in {"aux", "auxpass"} and child.lower_ in HEDGES | {"'ll", "wo"}:
            return True
    head = verb
    while head.dep_ in {"xcomp", "ccomp"} and head.head is not head:
        head = head.head
        if head.lemma_.lower() in HEDGING_VERBS or any(c.dep_ == "neg" for c in head.children):
            return True
    return False


def _subject_of(verb, resolver: _Resolver) -> Ref | None:
    for child in verb.children:
        if child.dep_ in {"nsubj", "nsubjpass"}:
            return resolver.ref(child)
    # "I started working at X": the subject sits on the governing verb; "and moved to Y": on the first conj.
    if verb.dep_ in {"xcomp", "conj"} and verb.head is not verb:
        return _subject_of(verb.head, resolver)
    return None


def extract(doc, *, speaker: Ref, context_doc=None) -> Extraction:
    """Entities and facts of one parsed memory (``doc``), with ``context_doc`` (its
    sequence predecessors, parsed) used only to resolve he/she."""
    context_people: list[Ref] = []
    if context_doc is not None:
        context_resolver = _Resolver(context_doc, speaker, [])
        for token in context_doc:
            ref = context_resolver.ref(token) if token.pos_ in {"PROPN", "NOUN"} else None
            if ref is not None and ref.type in {"PERSON", "ANIMAL", "THING"}:
                context_people.append(ref)
    resolver = _Resolver(doc, speaker, context_people)
    out = Extraction()

    for sent in doc.sents:
        when = _sentence_date(sent)
        for token in sent:
            inside_name = token.dep_ in {"compound", "flat"} and token.head.pos_ == "PROPN"
            if token.pos_ in {"PROPN", "NOUN", "PRON"} and not inside_name:
                ref = resolver.ref(token)
                if ref is not None:
                    out.mention(ref)
                    if ref.alias and ref.type in {"PERSON", "ANIMAL"}:
                        owner = resolver.possessor(token)
                        if owner is not None:
                            _add_relation(out, owner, token, ref, when)
                    if token.pos_ != "PRON":
                        resolver.note_person(ref)
            if token.pos_ in {"VERB", "AUX"}:
                _facts_for_verb(token, resolver, out, when)
    return out


def _add_relation(out: Extraction, owner: Ref, token, ref: Ref, when) -> None:
    relation = _relation_phrase(token).replace(" ", "_")
    functional = token.lemma_.lower() in SPOUSES
    out.facts.append(
        Fact(subject=owner, predicate=relation, obj=ref, functional_key=relation if functional else None,
             valid_from=when)
    )  # fmt: skip


def _object_fact(subject: Ref, predicate: str, functional: bool, obj_token, resolver: _Resolver, when, *,
                 verb_lemma: str) -> Fact | None:  # fmt: skip
    obj = resolver.ref(obj_token)
    literal = None if obj is not None else _literal(obj_token)
    if obj is not None and obj.type == "SPEAKER" and predicate not in {"married_to", "dating"}:
        return None
    functional_key = predicate if functional else None
    if predicate == "owns":
        category = _category(obj_token)
        if verb_lemma in CONCRETE_ONLY and category is None and obj is None:
            return None
        if verb_lemma == "drive" and category is None:
            category = "car"
        functional_key = f"owns:{category}" if category else None
    if predicate == "named":
        # "we named the puppy Miso" / "my dog is called Miso": the thing gets a name.
        return None
    return Fact(subject=subject, predicate=predicate, obj=obj, literal=literal, functional_key=functional_key,
                valid_from=when, confidence=1.0)  # fmt: skip


def _facts_for_verb(verb, resolver: _Resolver, out: Extraction, when) -> None:
    if _hedged(verb):
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


def _subjects_of(verb, resolver: _Resolver) -> list[Ref]:
    """The subject and its conjuncts ("Bob and I went ...")."""
    token = next((c for c in verb.children if c.dep_ in {"nsubj", "nsubjpass"}), None)
    if token is None:
        subject = _subject_of(verb, resolver)
        return [subject] if subject is not None else []
    refs = [resolver.ref(t) for t in [token, *token.conjuncts]]
    return [r for r in refs if r is not None]


def _verb_facts(verb, lemma: str, subject: Ref, children, resolver: _Resolver, out: Extraction, when) -> None:
    for child in children:
        if child.dep_ in {"prep", "agent"}:
            key = (lemma, child.lower_)
            if key in VERB_PREP:
                predicate, functional = VERB_PREP[key]
                for pobj in (c for c in child.children if c.dep_ == "pobj"):
                    for target in [pobj, *[c for c in pobj.conjuncts]]:
                        fact = _object_fact(subject, predicate, functional, target, resolver, when, verb_lemma=lemma)
                        if fact is not None:
                            out.facts.append(fact)
                    if predicate == "role":
                        # "works as a nurse at Mass General": the employer hangs off the role.
                        for prep in (c for c in pobj.children if c.dep_ == "prep" and c.lower_ in {"at", "for"}):
                            for target in (c for c in prep.children if c.dep_ == "pobj"):
                                fact = _object_fact(subject, "works_at", True, target, resolver, when,
                                                    verb_lemma=lemma)  # fmt: skip
                                if fact is not None:
                                    out.facts.append(fact)
    for child in children:
        if child.dep_ in {"dobj", "obj"} and lemma in VERB_OBJECT:
            predicate, functional = VERB_OBJECT[lemma]
            if predicate == "works_at" and resolver.ref(child) is None:
                continue  # "joined a gym" is not employment; "joined Initech" is
            for target in [child, *child.conjuncts]:
                fact = _object_fact(subject, predicate, functional, target, resolver, when, verb_lemma=lemma)
                if fact is not None:
                    out.facts.append(fact)
        likes = lemma in {"like", "love", "enjoy", "hate", "prefer"}
        # "loves hiking" -> likes "hiking"
        if (
            child.dep_ == "xcomp"
            and child.pos_ == "VERB"
            and likes
            and not any(c.dep_ == "dobj" for c in child.children)
        ):
            predicate = VERB_OBJECT[lemma][0]
            out.facts.append(Fact(subject=subject, predicate=predicate, literal=child.lemma_.lower(), valid_from=when))


def _favourite_of(subject_token, resolver: _Resolver) -> tuple[Ref, str] | None:
    """("User", "favourite_colour") for "my favourite colour"."""
    if subject_token is None or subject_token.pos_ != "NOUN":
        return None
    owner = resolver.possessor(subject_token)
    favourite = any(c.dep_ == "amod" and c.lemma_.lower() in {"favourite", "favorite"} for c in subject_token.children)
    if owner is None or not favourite:
        return None
    return owner, f"favourite_{subject_token.lemma_.lower()}"


def _copula_facts(verb, subject: Ref | None, children, resolver: _Resolver, out: Extraction, when) -> None:
    subject_token = next((c for c in children if c.dep_ in {"nsubj", "nsubjpass"}), None)
    for child in children:
        if child.dep_ == "attr" and subject is None and subject_token is not None:
            # "Coffee is my favourite drink": the favourite is the subject.
            favourite = _favourite_of(child, resolver)
            if favourite is not None:
                owner, predicate = favourite
                out.facts.append(Fact(subject=owner, predicate=predicate, literal=_literal(subject_token),
                                      functional_key=predicate, valid_from=when))  # fmt: skip
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
            if subject_token is not None and subject_token.pos_ == "NOUN":
                lemma = subject_token.lemma_.lower()
                owner = resolver.possessor(subject_token)
                favourite = next(
                    (c for c in subject_token.children if c.dep_ == "amod" and c.lemma_.lower() in
                     {"favourite", "favorite"}), None)  # fmt: skip
                if favourite is not None and owner is not None:
                    predicate = f"favourite_{lemma}"
                    out.facts.append(
                        Fact(subject=owner, predicate=predicate, obj=named,
                             literal=None if named else _literal(child), functional_key=predicate, valid_from=when)
                    )  # fmt: skip
                    continue
                if lemma == "name" and owner is not None and named is not None:
                    out.facts.append(Fact(subject=owner, predicate="named", literal=named.name,
                                          functional_key="named", valid_from=when))  # fmt: skip
                    continue
                if lemma in RELATIONS and owner is not None and named is not None:
                    # "My daughter's piano teacher is Mrs. Kowalski"
                    relation = _relation_phrase(subject_token).replace(" ", "_")
                    out.facts.append(Fact(subject=owner, predicate=relation, obj=named, valid_from=when))
                    continue
            if named is not None and named.type != "SPEAKER":
                out.facts.append(Fact(subject=subject, predicate="is", obj=named, valid_from=when, confidence=0.6))
            elif named is None and child.pos_ == "NOUN":
                out.facts.append(Fact(subject=subject, predicate="is_a", literal=_literal(child), valid_from=when))
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
                                          literal=None if obj else _literal(pobj), valid_from=when))  # fmt: skip
        elif child.dep_ == "prep" and child.lower_ in {"in", "from"} and subject is not None:
            # "Alice is in Boston now" / "Alice is from Lisbon"
            predicate = "lives_in" if child.lower_ == "in" else "from"
            for pobj in (c for c in child.children if c.dep_ == "pobj"):
                obj = resolver.ref(pobj)
                if obj is not None and obj.type in {"PLACE", "THING"}:
                    out.facts.append(Fact(subject=subject, predicate=predicate, obj=obj,
                                          functional_key=predicate, valid_from=when))  # fmt: skip
