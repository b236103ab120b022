"""Scope and topic classification of memories, behind one interface.

* ``specific`` | ``general`` (seed 000): a *general* memory states a preference,
  habit, tendency or opinion ("I prefer warm-toned audio gear", "I usually run
  before work"); everything else — facts about concrete people, things, events
  and plans ("bought a Sonos Beam in March") — is *specific*.
* topic: a short slug from :data:`TOPICS`, or ``other``.

:class:`LocalClassifier` (the default) needs no network: keyword rules plus
embedding prototypes (a handful of example memories per label, embedded once
per process with the same model as the memories). :class:`LLMClassifier` asks an
OpenAI-compatible endpoint (``engram_site.providers.llm``) and falls back to the local
classifier for anything it cannot answer. ``bench/classify_accuracy.py``
measures either on ``bench/classify/labelled.jsonl`` (written apart from the
prototypes below).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from django.conf import settings

from engram_site.providers import embedding, llm

logger = logging.getLogger(__name__)

LOCAL_VERSION = "local-1"
SCOPES = ("specific", "general")
OTHER = "other"


@dataclass(frozen=True)
class Topic:
    slug: str
    description: str
    keywords: str  # a regex alternation, matched on word boundaries, case-insensitive
    prototypes: tuple[str, ...]


TOPICS: tuple[Topic, ...] = (
    Topic(
        "family",
        "family members: parents, siblings, children, spouse, relatives",
        r"mom|mum|mother|dad|father|parents?|sisters?|brothers?|siblings?|son|daughters?|kids?|children|wife|husband|"
        r"spouse|grandma|grandmother|grandpa|grandfather|grandparents?|aunt|uncle|cousins?|niece|nephew|in-laws?",
        (
            "My mother lives in Lisbon and calls every Sunday.",
            "My brother Tom has two daughters.",
            "Our son starts kindergarten in September.",
            "My wife and I have been married for eight years.",
            "Grandma's 90th birthday party is next month.",
            "My dad is retiring from the post office this year.",
            "I like spending holidays with my cousins.",
        ),
    ),
    Topic(
        "friends",
        "friends, dating, social life",
        r"friends?|friendship|best friend|buddy|buddies|girlfriend|boyfriend|date|dating|roommates?|neighbou?rs?|party",
        (
            "My best friend Carla moved to Berlin.",
            "I met my girlfriend at a climbing gym.",
            "We have a game night with friends every other Friday.",
            "My roommate Jake works night shifts.",
            "I went to Priya's housewarming party last weekend.",
            "I prefer small gatherings to big parties.",
        ),
    ),
    Topic(
        "pets",
        "pets and animals",
        r"dogs?|puppy|cats?|kitten|pets?|vet|veterinarian|parrot|hamster|fish tank|aquarium|rabbit|horse|leash|"
        r"litter box|breed|retriever|labrador|terrier|poodle",
        (
            "Our cat Miso is twelve years old.",
            "I walk the dog twice a day.",
            "The puppy has a vet appointment on Monday.",
            "We adopted a rescue greyhound last spring.",
            "My parrot can say about twenty words.",
            "I have always preferred cats over dogs.",
        ),
    ),
    Topic(
        "health",
        "health, medical conditions, doctors, medication, sleep",
        r"doctor|dentist|allerg(y|ic|ies)|medication|medicine|pills?|prescription|diagnosed|diabetes|asthma|"
        r"migraines?|surgery|hospital|therapy|therapist|blood pressure|symptoms?|sick|illness|insomnia|sleep|"
        r"vaccine|physio(therapy)?|injury|injured|knee|back pain",
        (
            "I was diagnosed with type 2 diabetes in 2021.",
            "I take ibuprofen for my migraines.",
            "My dentist appointment is on the 14th.",
            "I'm allergic to penicillin.",
            "I have trouble sleeping when I drink coffee late.",
            "I had knee surgery two years ago.",
            "I see a therapist every two weeks.",
        ),
    ),
    Topic(
        "fitness",
        "exercise and sports",
        r"gym|workouts?|exercis(e|ing)|running|run|ran|jog(ging)?|marathon|yoga|pilates|swim(ming)?|cycling|"
        r"climbing|bouldering|lift(ing)?|weights|push-?ups|squats|tennis|football|soccer|basketball|hiking|hike|"
        r"training|trainer|5k|10k|steps",
        (
            "I run 5k three times a week.",
            "I signed up for the Berlin half marathon.",
            "I do yoga every morning before work.",
            "My personal trainer is called Marco.",
            "I play tennis on Saturday mornings.",
            "I can deadlift 100 kg now.",
        ),
    ),
    Topic(
        "food",
        "food, cooking, drinks, restaurants, diets",
        r"food|cook(ing)?|recipes?|bake|baking|restaurants?|dinner|lunch|breakfast|coffee|tea|wine|beer|"
        r"vegetarian|vegan|gluten|spicy|pizza|sushi|pasta|cuisine|dish|meal|snacks?|chocolate|eat|eating|ate|"
        r"drink|drinks|espresso|latte",
        (
            "I prefer dark roast coffee in the morning.",
            "My favourite restaurant is a small ramen place on Elm Street.",
            "I've been vegetarian since 2015.",
            "I baked sourdough bread for the first time yesterday.",
            "I don't like cilantro.",
            "We're having lasagna for dinner on Sunday.",
            "I drink green tea in the afternoon.",
        ),
    ),
    Topic(
        "travel",
        "trips, flights, hotels, destinations, vacations",
        r"trip|travel(l?ing)?|flights?|fly|flew|airport|airline|hotel|airbnb|vacation|holiday|passport|visa|"
        r"itinerary|beach|resort|abroad|tour|sightseeing|luggage|boarding|layover|aisle seat|window seat",
        (
            "We are flying to Tokyo on March 3rd.",
            "I always book an aisle seat on long flights.",
            "Our hotel in Rome is near the Pantheon.",
            "My passport expires in 2026.",
            "I love road trips along the coast.",
            "We spent our honeymoon in Bali.",
        ),
    ),
    Topic(
        "work",
        "job, career, employer, colleagues, meetings, projects",
        r"work|job|jobs|office|boss|manager|colleagues?|coworkers?|team|meetings?|project|deadline|clients?|"
        r"company|employer|career|promotion|interview|hired|salary review|standup|quarterly|report|presentation|"
        r"engineer|nurse|teacher|lawyer|designer|consultant",
        (
            "I work as a data engineer at a logistics company.",
            "My manager Sarah wants the report by Friday.",
            "The quarterly planning meeting is on Tuesday at 10.",
            "I got promoted to senior designer in May.",
            "I prefer async updates over daily standups.",
            "Our team is migrating the billing service to Postgres.",
            "I have a job interview with Acme next week.",
        ),
    ),
    Topic(
        "finance",
        "money, budgets, banks, investments, bills, taxes",
        r"money|budget|bank|savings?|save|invest(ing|ment|ments)?|stocks?|etf|crypto|mortgage|loan|rent|"
        r"bills?|taxes|tax|salary|paycheck|credit card|debt|pension|retirement fund|insurance|spent|expenses?",
        (
            "I put 500 dollars into my savings account every month.",
            "Our mortgage payment is due on the first.",
            "I invest in low-cost index funds.",
            "My credit card limit is 5000 euros.",
            "I need to file my taxes before April 15.",
            "I try to avoid carrying any debt.",
        ),
    ),
    Topic(
        "home",
        "house, apartment, furniture, appliances, repairs, garden, moving",
        r"house|home|apartment|flat|kitchen|bedroom|living room|bathroom|furniture|sofa|couch|fridge|"
        r"dishwasher|washing machine|thermostat|heating|garden|lawn|landlord|lease|moved|moving|renovat\w*|"
        r"plumber|roof|garage|speaker|sound system",
        (
            "We moved into a two-bedroom apartment in June.",
            "The dishwasher has been leaking since last week.",
            "I bought a new sofa for the living room.",
            "Our landlord is replacing the windows in October.",
            "I keep the thermostat at 20 degrees.",
            "We are repainting the kitchen this weekend.",
        ),
    ),
    Topic(
        "technology",
        "devices, computers, phones, software, programming",
        r"laptop|computer|pc|mac|macbook|iphone|android|phone|tablet|ipad|software|app|apps|programming|code|"
        r"coding|python|javascript|linux|windows|server|database|keyboard|monitor|wifi|router|thinkpad|"
        r"headphones|smartwatch|vim|emacs|github|api",
        (
            "My laptop is a ThinkPad running Linux.",
            "I write most of my code in Python.",
            "I upgraded to a new iPhone in November.",
            "I prefer dark mode in every app.",
            "The home router keeps dropping the wifi connection.",
            "I use a mechanical keyboard with brown switches.",
        ),
    ),
    Topic(
        "education",
        "school, university, courses, studying, learning languages",
        r"school|university|college|degree|course|courses|class|classes|studying|study|exam|exams|thesis|"
        r"phd|master'?s|bachelor'?s|lecture|professor|homework|semester|learning|learn|language|spanish|french|"
        r"german|japanese|duolingo|tutor",
        (
            "I'm studying for my statistics exam next week.",
            "I have a master's degree in biology.",
            "I'm learning Spanish with a tutor on Wednesdays.",
            "My thesis is about coral reef recovery.",
            "I enrolled in an online machine learning course.",
            "I learn best by doing exercises, not by reading.",
        ),
    ),
    Topic(
        "hobbies",
        "hobbies and crafts: gardening, photography, playing music, painting, collecting",
        r"hobby|hobbies|paint(ing)?|draw(ing)?|sketch(ing)?|photograph(y|s)?|camera|knit(ting)?|crochet|"
        r"pottery|woodwork(ing)?|guitar|piano|violin|drums|chess|collect(ing|ion)|stamps|gardening|plants|"
        r"lego|model trains|fishing|birdwatching|sewing|calligraphy",
        (
            "I've been learning to play the guitar for a year.",
            "I collect vintage film cameras.",
            "I paint watercolours on weekends.",
            "My tomato plants finally have fruit.",
            "I play chess online most evenings.",
            "I enjoy woodworking in the garage.",
        ),
    ),
    Topic(
        "entertainment",
        "movies, TV, music, books, games, podcasts",
        r"movies?|films?|cinema|tv|show|shows|series|netflix|episode|season|music|songs?|album|band|concert|"
        r"books?|novel|reading|read|author|podcasts?|video games?|games?|gaming|playstation|xbox|nintendo|"
        r"spotify|jazz|rock|anime|documentar(y|ies)",
        (
            "My favourite band is Radiohead.",
            "I'm rewatching Breaking Bad with my partner.",
            "I read mostly science fiction novels.",
            "We have tickets to the Coldplay concert in July.",
            "I listen to true crime podcasts on my commute.",
            "I finished Baldur's Gate 3 last night.",
        ),
    ),
    Topic(
        "shopping",
        "purchases, orders, brands, clothes, gifts",
        r"bought|buy|buying|purchase[ds]?|order(ed)?|amazon|store|shop|shopping|deliver(y|ed)|returns?|"
        r"refund|brand|clothes|shoes|jacket|dress|sneakers|size|gift|discount|sale|subscription",
        (
            "I ordered new running shoes online.",
            "I wear size medium in shirts.",
            "I prefer buying second-hand clothes.",
            "The package from the furniture store arrives Thursday.",
            "I returned the jacket because it was too small.",
            "I'm looking for a birthday gift for my niece.",
        ),
    ),
    Topic(
        "transport",
        "cars, bikes, commuting, public transport",
        r"car|cars|drive|driving|drove|bike|bicycle|commute|commuting|bus|train|subway|metro|tram|parking|"
        r"garage|tesla|toyota|honda|volkswagen|mechanic|tyres?|tires?|fuel|gas station|electric car|scooter|"
        r"driver'?s license",
        (
            "I drive a 2018 Toyota Corolla.",
            "I commute to work by bike.",
            "The car needs new tires before winter.",
            "I take the 7:40 train into the city.",
            "I'd rather take public transport than drive.",
            "I got my driver's license when I was 17.",
        ),
    ),
    Topic(
        "personal",
        "identity: name, age, birthday, where the user lives, background, personality",
        r"my name|i'?m called|years old|birthday|born|i live in|hometown|grew up|nationality|citizen|"
        r"introvert|extrovert|personality|pronouns|i am from|i'?m from",
        (
            "My name is Daniel.",
            "I was born in 1990 in Krakow.",
            "I live in Seattle.",
            "My birthday is on the 3rd of August.",
            "I grew up on a farm in Ohio.",
            "I'm an introvert and recharge alone.",
        ),
    ),
)

TOPIC_SLUGS = tuple(t.slug for t in TOPICS)

# Scope rules: preference / habit / opinion language makes a memory general.
_GENERAL_CUES = re.compile(
    r"\b(prefer|prefers|preferred|like|likes|love|loves|enjoy|enjoys|hate|hates|dislike|dislikes|usually|always|"
    r"never|often|rarely|generally|typically|tend to|tends to|favou?rite|rather|can'?t stand|not a fan|fan of|"
    r"every (day|morning|evening|night|week|weekend|month|year|time)|each (day|morning|week)|most (days|mornings|"
    r"evenings|weekends)|on weekends|at night|whenever|in general|as a rule|avoid|avoids|try to|tries to|"
    r"i'?m (a|an) \w+ person|i am (a|an) \w+ person|i don'?t (like|eat|drink|do)|i only|i'?m into|"
    r"vegetarian|vegan)\b",
    re.IGNORECASE,
)
# Concrete anchors: dates, numbers, times, named things, one-off events.
_SPECIFIC_CUES = re.compile(
    r"(\b\d+\b|\b(yesterday|today|tomorrow|tonight|last (week|month|year|night|weekend|summer|winter)|"
    r"next (week|month|year|weekend)|ago|this (week|month|weekend)|on (monday|tuesday|wednesday|thursday|friday|"
    r"saturday|sunday)|january|february|march|april|june|july|august|september|october|november|december|"
    r"bought|booked|ordered|moved|adopted|met|started|finished|signed up|scheduled|appointment|is due|"
    r"arrives?|expires?|was diagnosed|got (a|an|my)|named|called)\b)",
    re.IGNORECASE,
)
_PROPER_NOUN = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+")

# Example memories of each scope for the embedding side of the scope decision.
SCOPE_PROTOTYPES = {
    "general": (
        "I prefer tea over coffee.",
        "I usually go to bed around midnight.",
        "I like quiet restaurants more than busy ones.",
        "I never check work email on weekends.",
        "I tend to overpack for trips.",
        "I enjoy long walks when I need to think.",
        "I don't like horror movies.",
        "I'd rather work from home than commute.",
        "My favourite season is autumn.",
        "I always pay my bills the day they arrive.",
    ),
    "specific": (
        "I bought a Sonos Beam for the living room in March.",
        "My sister Anna works as a nurse in Boston.",
        "The dentist appointment is on Thursday at 3 pm.",
        "Our flight to Madrid leaves at 7:15.",
        "I adopted a beagle named Rufus last year.",
        "My laptop is a 2021 MacBook Air.",
        "We signed the lease for the new apartment yesterday.",
        "The project deadline moved to June 30.",
        "I was diagnosed with asthma as a child.",
        "My car is a blue Honda Civic.",
    ),
}


_DEFAULT_MODEL = embedding.MODEL_NAME  # (inside ClassifyInput, ``embedding`` is the field)


@dataclass(frozen=True)
class ClassifyInput:
    content: str
    embedding: np.ndarray | None = None
    # The model of ``embedding`` (its bucket's): compared only with prototypes by the same model.
    model: str = _DEFAULT_MODEL


@dataclass(frozen=True)
class Classification:
    scope: str
    topic: str
    # Which classifier decided (kept in the memory's metadata as "classified_by").
    by: str


class Classifier(Protocol):
    name: str

    def classify(self, items: list[ClassifyInput]) -> list[Classification]: ...


def _keyword_patterns() -> dict[str, re.Pattern]:
    return {t.slug: re.compile(rf"\b({t.keywords})\b", re.IGNORECASE) for t in TOPICS}


class LocalClassifier:
    """Rules + embedding prototypes. Deterministic, offline, ~1 ms per memory once the
    prototypes are embedded (once per process)."""

    name = LOCAL_VERSION
    KEYWORD_BONUS = 0.12
    MIN_TOPIC_SCORE = 0.25

    def __init__(self):
        self._lock = threading.Lock()
        # Per embedding model: the prototypes' vectors by that model.
        self._vectors: dict[str, tuple[list[np.ndarray], dict[str, np.ndarray]]] = {}
        self._keywords = _keyword_patterns()

    def _prototypes(self, model: str) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
        with self._lock:
            if model not in self._vectors:
                texts = [p for t in TOPICS for p in t.prototypes]
                scope_texts = [p for s in SCOPES for p in SCOPE_PROTOTYPES[s]]
                vectors = embedding.embed_texts(texts + scope_texts, model=model)
                topic_vectors, offset = [], 0
                for topic in TOPICS:
                    topic_vectors.append(vectors[offset : offset + len(topic.prototypes)])
                    offset += len(topic.prototypes)
                scope_vectors = {}
                for scope in SCOPES:
                    scope_vectors[scope] = vectors[offset : offset + len(SCOPE_PROTOTYPES[scope])]
                    offset += len(SCOPE_PROTOTYPES[scope])
                self._vectors[model] = (topic_vectors, scope_vectors)
        return self._vectors[model]

    def classify(self, items: list[ClassifyInput]) -> list[Classification]:
        """Raises embedding.EmbeddingUnavailable when an item has no vector and the
        model cannot make one."""
        missing = [i for i, item in enumerate(items) if item.embedding is None]
        vectors: list[np.ndarray | None] = [item.embedding for item in items]
        for model in {items[i].model for i in missing}:
            by_model = [i for i in missing if items[i].model == model]
            texts = [items[i].content for i in by_model]
            for i, vector in zip(by_model, embedding.embed_texts(texts, model=model), strict=True):
                vectors[i] = vector
        results = []
        for item, vector in zip(items, vectors, strict=True):
            topic_vectors, scope_vectors = self._prototypes(item.model)
            results.append(
                Classification(
                    scope=self._scope(item.content, vector, scope_vectors),
                    topic=self._topic(item.content, vector, topic_vectors),
                    by=self.name,
                )
            )
        return results

    def _topic(self, text: str, vector: np.ndarray, topic_vectors: list[np.ndarray]) -> str:
        best, best_score = OTHER, -1.0
        for topic, prototypes in zip(TOPICS, topic_vectors, strict=True):
            similarities = prototypes @ vector
            # The nearest prototype counts most; the mean keeps one lucky match honest.
            score = 0.7 * float(similarities.max()) + 0.3 * float(similarities.mean())
            if self._keywords[topic.slug].search(text):
                score += self.KEYWORD_BONUS
            if score > best_score:
                best, best_score = topic.slug, score
        return best if best_score >= self.MIN_TOPIC_SCORE else OTHER

    def _scope(self, text: str, vector: np.ndarray, scope_vectors: dict[str, np.ndarray]) -> str:
        general_cues = len(_GENERAL_CUES.findall(text))
        specific_cues = len(_SPECIFIC_CUES.findall(text)) + len(_PROPER_NOUN.findall(text))
        similarity = {s: float(np.sort(scope_vectors[s] @ vector)[-3:].mean()) for s in SCOPES}
        score = 1.0 * general_cues - 0.5 * specific_cues + 10.0 * (similarity["general"] - similarity["specific"])
        return "general" if score > 0.5 else "specific"


class LLMClassifier:
    """An OpenAI-compatible chat model classifies; whatever it cannot answer (endpoint
    down, unparseable reply, label outside the vocabulary) goes to ``fallback``."""

    BATCH = 20

    def __init__(self, fallback: Classifier):
        self.llm = llm
        self.fallback = fallback
        self.name = f"llm:{llm.model_name()}"
        self.failures = 0

    def _prompt(self, items: list[ClassifyInput]) -> list[dict]:
        topics = "\n".join(f"- {t.slug}: {t.description}" for t in TOPICS) + f"\n- {OTHER}: none of the above"
        numbered = "\n".join(f"{i + 1}. {json.dumps(item.content[:2000])}" for i, item in enumerate(items))
        return [
            {
                "role": "system",
                "content": (
                    "You label memories stored by an AI assistant about its user.\n"
                    "scope: 'general' if the memory states a preference, habit, tendency or opinion; "
                    "'specific' if it is about a concrete person, thing, event, date or plan.\n"
                    f"topic: exactly one of these slugs:\n{topics}\n"
                    'Answer with JSON only: {"results": [{"i": 1, "scope": "...", "topic": "..."}, ...]} '
                    "with one entry per memory, in order."
                ),
            },
            {"role": "user", "content": f"Memories:\n{numbered}"},
        ]

    def _parse(self, reply: str, count: int) -> dict[int, tuple[str, str]]:
        text = reply.strip()
        if text.startswith("```"):
            text = text.strip("`")
            text = text[text.find("{") :]
        start, end = text.find("{"), text.rfind("}")
        data = json.loads(text[start : end + 1])
        results = data.get("results", data) if isinstance(data, dict) else data
        parsed = {}
        for position, entry in enumerate(results):
            if not isinstance(entry, dict):
                continue
            index = int(entry.get("i", position + 1)) - 1
            scope = str(entry.get("scope", "")).strip().lower()
            topic = str(entry.get("topic", "")).strip().lower()
            if 0 <= index < count and scope in SCOPES and (topic in TOPIC_SLUGS or topic == OTHER):
                parsed[index] = (scope, topic)
        return parsed

    def classify(self, items: list[ClassifyInput]) -> list[Classification]:
        out: list[Classification | None] = [None] * len(items)
        for start in range(0, len(items), self.BATCH):
            chunk = items[start : start + self.BATCH]
            try:
                parsed = self._parse(self.llm.chat(self._prompt(chunk)), len(chunk))
            except (self.llm.LLMUnavailable, ValueError, TypeError, AttributeError) as exc:
                logger.warning(
                    "LLM classification failed for %d memories, using %s: %s", len(chunk), self.fallback.name, exc
                )
                parsed = {}
            for offset, (scope, topic) in parsed.items():
                out[start + offset] = Classification(scope=scope, topic=topic, by=self.name)
        missing = [i for i, c in enumerate(out) if c is None]
        self.failures += len(missing)
        if missing:
            for i, result in zip(missing, self.fallback.classify([items[i] for i in missing]), strict=True):
                out[i] = result
        return out  # type: ignore[return-value]


_local: LocalClassifier | None = None


def get_classifier(name: str | None = None) -> Classifier:
    """The configured classifier (``ENGRAM_CLASSIFIER``): ``local`` or ``llm``."""
    global _local
    if _local is None:
        _local = LocalClassifier()
    name = (name or settings.ENGRAM_CLASSIFIER or "local").lower()
    if name == "llm":
        if llm.configured():
            return LLMClassifier(fallback=_local)
        logger.warning("ENGRAM_CLASSIFIER=llm but ENGRAM_LLM_BASE_URL / ENGRAM_LLM_MODEL are unset; using local")
    elif name != "local":
        raise ValueError(f"unknown classifier {name!r}; expected 'local' or 'llm'")
    return _local
