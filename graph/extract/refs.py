"""References: who or what a token of the parse denotes (names, the speaker, people by relation)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime

from graph.extract.vocabulary import (
    ANIMALS,
    CATEGORIES,
    HEDGES,
    HEDGING_ADVERBS,
    HEDGING_VERBS,
    JOB_TITLES,
    MONTHS,
    NER_TYPES,
    RELATIONS,
    RELATIVE_PRONOUNS,
    SPEAKER_PRONOUNS,
    THIRD_PERSON,
    TITLES,
    WEEKDAYS,
    lowercase_words,
)
from memories.text import speaker_prefix

# --- data ----------------------------------------------------------------------------------


def normalize_name(text: str) -> str:
    words = re.sub(r"[^\w\s'-]", " ", text.casefold().replace("’", "'")).replace("'s ", " ").split()
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
    # A person or pet known by a relation: whose ("my sister": the user) and the relation words.
    owner: Ref | None = None
    relation: str | None = None
    # "my sister" without a name: a description, never an entity. Its key is the alias the
    # named person gets ("user sister"), so a bucket that learned her name resolves it; one
    # that did not keeps it as an attribute of the owner (``graph.extract.unnamed``).
    unnamed: bool = False
    # "Dash is scared of thunderstorms.": a common word opening a sentence may be a name the
    # bucket knows ("a greyhound called Dash"). Only a bucket that has an entity of that name
    # reads it so; elsewhere it is a word, never an entity (graph/extract/unnamed.py).
    tentative: bool = False


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


# --- the speaker of a "Name: ..." line --------------------------------------------------------------


def split_speaker(text: str, *, attributed_to: str | None = None) -> tuple[Ref, str]:
    """The speaker of a memory and the text to parse.

    A leading ``Name:`` (memories.text.speaker_prefix, the one reader of such prefixes: one to
    three capitalised words, as in a conversation log: "Caroline: I went to a support group")
    names the speaker when the memory has no ``attributed_to``, so that "I / my" are Caroline.
    "User:" and "Assistant:" name those; labels such as "Note:" or "Update:" and dates are not
    speakers. A recognised prefix is removed from the text either way (the parser reads the
    sentence better without it; the memory's vector is computed without it too).
    """
    prefix = speaker_prefix(text)
    if prefix is None:
        return speaker_ref(attributed_to), text
    rest = text[prefix.end :]
    if prefix.kind == "user":
        return speaker_ref(attributed_to or "user"), rest
    if prefix.kind == "assistant":
        return speaker_ref(attributed_to or "assistant"), rest
    if prefix.kind == "label" or attributed_to:
        return speaker_ref(attributed_to), rest
    name = prefix.label.replace("’", "'")
    key = normalize_name(name)
    if not key:  # a title alone ("Dr.:") names nobody
        return speaker_ref(attributed_to), rest
    return Ref(name=name, key=key, type="PERSON"), rest


# --- parse helpers ------------------------------------------------------------------------------------


def hedged(verb) -> bool:
    """Negated, hedged or future: "I don't live", "maybe Sara works", "I'd like to visit"."""
    head = verb
    while True:
        for child in head.children:
            if child.dep_ == "neg":
                return True
            if child.dep_ in {"aux", "auxpass"} and child.lower_ in HEDGES:
                return True
            if child.dep_ == "advmod" and child.lower_ in HEDGING_ADVERBS:
                return True
        if head.dep_ not in {"xcomp", "ccomp"} or head.head is head:
            return False
        head = head.head
        if head.lemma_.lower() in HEDGING_VERBS:
            return True


def relation_phrase(token) -> str:
    """ "piano teacher" for teacher with compound piano; just the lemma otherwise."""
    parts = [c.lemma_.lower() for c in token.children if c.dep_ == "compound" and c.pos_ == "NOUN"]
    return " ".join([*parts, token.lemma_.lower()])


def _looks_like_name(token) -> bool:
    """A capitalised noun the small tagger did not call a proper noun ("Alice lives in
    Boston" tags Alice as NOUN): capitalised, no determiner or possessor, not a
    relation word, and either mid-sentence or the sentence's subject. Model codes
    ("X1", "XC60") after a proper noun count too."""
    if token.pos_ not in {"NOUN", "PROPN"} or not token.text[:1].isupper():
        return False
    if any(ch.isdigit() for ch in token.text) and any(c.dep_ == "compound" and c.pos_ == "PROPN"
                                                     for c in token.children):  # fmt: skip
        return True
    if token.pos_ != "NOUN" or token.text.isupper() and len(token.text) > 1:
        return False
    if token.lemma_.lower() in RELATIONS or token.lower_ in {"user", "assistant"}:
        return False
    if any(c.dep_ in {"det", "poss"} for c in token.children):
        return False
    return not token.is_sent_start or token.dep_ in {"nsubj", "nsubjpass"}


def _capitalised_by_position(token) -> bool:
    """A common lower-case word opening its sentence ("Things", "Good", "Summer"), unless the
    sentence names something by it: "Buddy is my dog", "Lucky, my cat, ..." (relation words)."""
    if not token.is_sent_start or token.lower_ not in lowercase_words():
        return False
    if any(c.dep_ == "appos" and c.lemma_.lower() in RELATIONS for c in token.children):
        return False
    head = token.head
    return not (
        token.dep_ == "nsubj"
        and head.lemma_ == "be"
        and any(c.dep_ == "attr" and c.lemma_.lower() in RELATIONS for c in head.children)
    )


def _name_tokens(token) -> list:
    """The words of the name whose head is ``token``: its proper-noun compounds (left, in a
    contiguous run) and a model number after it ("iPhone 15")."""
    tokens = [token]
    left = token.i - 1
    compounds = {
        t.i for t in token.subtree if t.dep_ in {"compound", "flat"} and (t.pos_ == "PROPN" or t.text[:1].isupper())
    }
    while left >= 0 and left in compounds:
        tokens.insert(0, token.doc[left])
        left -= 1
    right = token.i + 1
    after = token.doc[right] if right < len(token.doc) else None
    if (
        after is not None
        and after.dep_ in {"nummod", "compound", "appos"}
        and after.head == token
        and (after.like_num or any(ch.isdigit() for ch in after.text))
    ):
        tokens.append(after)
    return tokens


def _trim(tokens: list) -> list:
    """No article or adverb first ("Probably Jonas"), no possessive 's or punctuation last."""
    while tokens and (
        tokens[0].lower_ in {"the", "a", "an"} or tokens[0].is_punct or tokens[0].pos_ in {"ADV", "PRON"}
    ):
        tokens = tokens[1:]
    while tokens and (tokens[-1].dep_ == "case" or tokens[-1].lower_ in {"'s", "’s", "'"} or tokens[-1].is_punct):
        tokens = tokens[:-1]
    return tokens


def _title_holder(title):
    """The person a title names when the parse hung the name on its organisation: "The CEO of
    Acme, Jane Doe, resigned" (Jane Doe an apposition of Acme)."""
    for prep in (c for c in title.children if c.dep_ == "prep" and c.lower_ in {"of", "at"}):
        for pobj in (c for c in prep.children if c.dep_ == "pobj"):
            for appos in (c for c in pobj.children if c.dep_ == "appos" and c.pos_ == "PROPN"):
                if appos.ent_type_ == "PERSON":
                    return appos
    return None


# --- the resolver ---------------------------------------------------------------------------------------


class Resolver:
    def __init__(self, doc, speaker: Ref, context_people: list[Ref]):
        self.doc = doc
        self.speaker = speaker
        self.people: list[Ref] = list(context_people)  # antecedents for he/she, most recent last
        self.ent_of: dict[int, object] = {}
        for ent in doc.ents:
            for token in ent:
                self.ent_of[token.i] = ent

    def named(self, token) -> Ref | None:
        """A name at ``token``: an NER entity and/or a proper-noun chain, without a
        trailing possessive or punctuation ("Alice Chen's" is Alice Chen)."""
        if token.lower_ in MONTHS or token.lower_ in WEEKDAYS or token.lower_ in JOB_TITLES:
            return None
        ent = self.ent_of.get(token.i)
        if ent is not None and ent.label_ == "NORP" and token.pos_ == "PROPN":
            ent = None  # "works for Atlassian": a nationality to the model, a name to us
        if ent is not None and ent.label_ not in NER_TYPES:
            return None  # dates, quantities, money: literals
        if ent is not None and token.pos_ in {"PROPN", "NOUN", "NUM"}:
            chain = _name_tokens(token)
            # The entity's span, unless the model ran two names together ("Salt and Pepper") or
            # took a clause for a name ("Lars manages Priyanka").
            span = [] if any(t.pos_ in {"CCONJ", "VERB", "AUX"} for t in ent) else list(ent)
            indexes = sorted({t.i for t in chain} | {t.i for t in span if t.i <= token.i or t.head == token})
            tokens = _trim([token.doc[i] for i in range(indexes[0], indexes[-1] + 1)])
            kind = NER_TYPES[ent.label_]
        elif token.pos_ == "PROPN" or _looks_like_name(token):
            tokens = _trim(_name_tokens(token))
            kind = "THING"
            if tokens == [token] and _capitalised_by_position(token):
                return None  # "Things have been busy", "Good to hear": a word, not a name
        else:
            return None
        if not tokens:
            return None
        text = token.doc[tokens[0].i : tokens[-1].i + 1].text.replace("’", "'")
        key = normalize_name(text)
        if not key or key in SPEAKER_PRONOUNS or key in JOB_TITLES:
            return None
        lower = key.split()[0]
        if lower in CATEGORIES and kind == "THING":
            kind = "PRODUCT"
        if any(lower in words for words in CATEGORIES.values()):
            kind = "PRODUCT" if kind in {"THING", "ORG", "PERSON"} else kind
        name = " ".join(w for w in text.split() if normalize_name(w) not in TITLES) or text
        return Ref(name=name, key=key, type=kind)

    def possessor(self, token) -> Ref | None:
        """Whose ``token`` is: "my / Alice's sister", "the dog of Lena Ortiz", "the husband of
        my sister", "a friend of mine", or the haver of "Bob has a sister, Carol" (and of "a dog and two cats")."""
        for child in token.children:
            if child.dep_ == "poss":
                return self.ref(child)
        if token.lemma_.lower() in RELATIONS:
            for prep in (c for c in token.children if c.dep_ == "prep" and c.lower_ == "of"):
                for pobj in (c for c in prep.children if c.dep_ == "pobj"):
                    # "the dog of Lena Ortiz", and of a relative: "the husband of my sister".
                    related = pobj.lemma_.lower() in RELATIONS and self.possessor(pobj) is not None
                    named = pobj.pos_ in {"PROPN", "PRON"} or _looks_like_name(pobj)
                    owner = self.ref(pobj) if named or related else None
                    if owner is not None:
                        return owner
            if token.dep_ == "conj" and token.head.lemma_.lower() in RELATIONS:
                return self.possessor(token.head)  # "my mom and dad", "a dog and two cats"
        if token.dep_ in {"compound", "amod"} and token.head.pos_ == "PROPN":
            # "Zoe's uncle Frank" parsed with uncle as a compound of Frank: the possessor is Frank's.
            return next((self.ref(c) for c in token.head.children if c.dep_ == "poss"), None)
        verb = token.head
        if (
            token.dep_ == "dobj"
            and token.lemma_.lower() in RELATIONS
            and verb.lemma_.lower() in {"have", "adopt", "get"}
            and not hedged(verb)
        ):
            subject = next((c for c in verb.children if c.dep_ in {"nsubj", "nsubjpass"}), None)
            return self.ref(subject) if subject is not None else None
        return None

    def relation(self, token) -> tuple[Ref, str, list[Ref]] | None:
        """For a relation noun with an owner: (owner, relation words, the people it names).

        The people are the names the sentence gives ("my sister Anna", "Anna, my sister",
        "Carol is my sister", "my sister is Carol", "a dog called Rocket", "a dog, a greyhound called
        Dash", "two cats, Salt and Pepper", "the dog of Lena is called Rex"), each known also by the alias "<owner>
        <relation>"; without a name, one unnamed reference ("sister of User", key "user sister").
        A negated copula ("Bob is not my brother") names nobody.
        """
        if token.lemma_.lower() not in RELATIONS or not (
            token.pos_ == "NOUN" or token.pos_ == "ADJ" and token.dep_ == "amod"  # "my parrot Captain", mis-tagged
        ):
            return None
        owner = self.possessor(token)
        if owner is None:
            return None
        phrase = relation_phrase(token)
        alias = f"{owner.key} {phrase}"
        kind = "ANIMAL" if token.lemma_.lower() in ANIMALS else "PERSON"
        names = []
        for child in token.children:
            if child.dep_ == "appos" and child.pos_ in {"PROPN", "NOUN"}:
                names += [child, *child.conjuncts]
                # "a rescue dog, a greyhound called Dash": the name hangs on the apposition.
                names += [c for acl in child.children if acl.dep_ == "acl" and acl.lemma_.lower() in {"name", "call"}
                          for c in acl.children if c.dep_ in {"oprd", "attr", "dobj"}]  # fmt: skip
            if child.dep_ == "acl" and child.lemma_.lower() in {"name", "call"}:
                names += [c for c in child.children if c.dep_ in {"oprd", "attr", "dobj"}]
        if token.dep_ == "nsubjpass" and token.head.lemma_.lower() in {"name", "call"} and not hedged(token.head):
            names += [c for c in token.head.children if c.dep_ in {"oprd", "attr"}]  # "the dog is called Rex"
        if token.dep_ in {"appos", "compound", "amod"}:
            names.append(token.head)
        following = token.doc[token.i + 1] if token.i + 1 < len(token.doc) else None
        if (
            not names
            and following is not None
            and (following.pos_ == "PROPN" or _looks_like_name(following))
            and following.dep_ != "compound"
        ):
            names.append(following)  # "Zoe's uncle Frank lives ...", parsed as two subjects
        head = token.head
        if head.lemma_ == "be" and token.dep_ in {"attr", "nsubj"}:
            if hedged(head):
                return owner, phrase, []
            other = "nsubj" if token.dep_ == "attr" else "attr"
            for child in head.children:
                if child.dep_ == other:
                    names += [child, *child.conjuncts]
        people = []
        for name_token in names:
            named = self.named(name_token)
            if named is not None:
                people.append(Ref(name=named.name, key=named.key, type=kind, alias=alias, owner=owner,
                                  relation=phrase))  # fmt: skip
        if not people:
            people.append(Ref(name=f"{phrase} of {owner.name}", key=alias, type=kind, owner=owner, relation=phrase,
                              unnamed=True))  # fmt: skip
        return owner, phrase, people

    def ref(self, token) -> Ref | None:
        """The entity a token denotes, or None when it is a plain thing (a literal)."""
        lower = token.lower_
        if token.pos_ == "PRON" or lower in SPEAKER_PRONOUNS:
            if lower in SPEAKER_PRONOUNS:
                return self.speaker
            if lower in THIRD_PERSON:
                return self.people[-1] if self.people else None
            if lower in RELATIVE_PRONOUNS and token.head.dep_ == "relcl":
                # "a sister, Carol, who lives in Denver": who is Carol.
                return self.ref(token.head.head)
            return None
        if token.lemma_.lower() == "user" and token.pos_ == "NOUN":
            return Ref(name="User", key="user", type="SPEAKER")
        relation = self.relation(token)
        if relation is not None:
            people = relation[2]
            return people[0] if people else None
        named = self.named(token)
        if named is None and _capitalised_by_position(token) and token.pos_ in {"NOUN", "PROPN"}:
            key = normalize_name(token.text)
            if key and not any(c.dep_ in {"det", "poss"} for c in token.children):
                return Ref(name=token.text, key=key, type="THING", tentative=True)
        if named is not None:
            # "Anna, my sister, ...": the name carries the relation's alias.
            for child in token.children:
                if child.dep_ == "appos":
                    related = self.relation(child)
                    if related is not None:
                        match = next((p for p in related[2] if p.key == named.key), None)
                        if match is not None:
                            return match
            return named
        if token.pos_ == "NOUN" or token.lower_ in JOB_TITLES:
            # "The CEO of Acme, Jane Doe, ...": the description denotes the person it names.
            appos = next((c for c in token.children if c.dep_ == "appos" and c.pos_ == "PROPN"), None)
            if appos is None and token.lower_ in JOB_TITLES:
                appos = _title_holder(token)
            if appos is not None:
                return self.named(appos)
        return None

    def note_person(self, ref: Ref | None) -> None:
        if ref is not None and ref.type in {"PERSON", "ANIMAL", "THING"}:
            self.people.append(ref)


def retype(ref: Ref, kind: str) -> Ref:
    return ref if ref.type == kind else replace(ref, type=kind)
