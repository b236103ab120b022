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
prototypes of ``maintenance/data/classifier.toml``, which holds the topics).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path
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


# The vocabulary is data (maintenance/data/classifier.toml), read once, at import.
VOCABULARY = Path(__file__).resolve().parent / "data" / "classifier.toml"


def _vocabulary(path: Path) -> tuple[tuple[Topic, ...], dict[str, tuple[str, ...]]]:
    """The topics and the scopes' example memories of ``path``."""
    with path.open("rb") as f:
        data = tomllib.load(f)
    topics = tuple(
        Topic(
            slug=t["slug"],
            description=t["description"],
            keywords="".join(t["keywords"]),
            prototypes=tuple(t["prototypes"]),
        )
        for t in data["topics"]
    )
    return topics, {scope: tuple(texts) for scope, texts in data["scope_prototypes"].items()}


# SCOPE_PROTOTYPES: example memories of each scope, for the embedding side of the scope decision.
TOPICS, SCOPE_PROTOTYPES = _vocabulary(VOCABULARY)
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
