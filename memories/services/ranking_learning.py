"""Fusion weights learned per bucket from its feedback (issue 48; docs/RETRIEVAL.md, "Learned weights").

Agents rate what a search gave them (``search_feedback``: a memory ``useful`` or ``irrelevant``
for a query). Beside the per-memory lift those ratings give questions like theirs
(memories.retrieval.feedback), a bucket with at least ``ENGRAM_LEARN_MIN_RATINGS`` ratings has
the weights of its ranking tuned to them here, by the nightly ``learn_ranking`` job:

1. Its rated questions (ratings grouped by query; the newest ``ENGRAM_LEARN_MAX_QUERIES``) are
   split once and for all by a hash of each question's first rating id: about a quarter is held
   back, the rest trains.
2. A setting is scored by searching each question again (hybrid, the top :data:`SEARCH_LIMIT`,
   with feedback's own lift and demotion off: a rating must not grade the ranking it lifts) and
   asking how well the memories rated useful rank above those rated irrelevant (:func:`score`).
3. Starting from the defaults (with the operator's overrides), each tuned knob (:data:`TUNED`) is
   tried at :data:`FACTORS` times its default — never outside [0.5x, 2x] of it, nor outside
   ranking's bounds — one knob after another, keeping a value only when it scores better on the
   training questions (a coordinate search).
4. The result is adopted only if it scores better than the defaults on the *held-back*
   questions too, by at least :data:`ADOPT_MARGIN` (and on the training ones); otherwise the
   defaults stay, and what was measured is kept all the same (``adopted`` false), so the console
   says why nothing is used.

The search reads an adopted row (memories.retrieval.learned) under the operator's and the
request's settings, which win key by key (ranking.resolve). Knobs the operator set are not tuned.

Cost: at most (1 + len(FACTORS) x len(TUNED)) x training questions + 2 x held-back questions
searches per bucket (1,000 with the defaults: 40 questions, 8 knobs, 4 factors), one bucket after
another, pausing for the machine's web requests between settings (engram_site.activity); a bucket
whose ratings have not changed since it was learned is skipped.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings as django_settings
from django.db import connection, transaction
from django.db.models import Count, Max
from django.db.models.functions import Now

from audit.services import Actor, audit_record
from engram_site import activity
from memories import ranking
from memories.models import FeedbackSignal, LearnedRanking, SearchFeedback
from memories.retrieval import learned
from memories.retrieval.search import memories_search
from tenants.models import Bucket

logger = logging.getLogger(__name__)

# The signals' weights and the knobs that are tuned: those a bucket's kind of memories and
# questions move most (words or paraphrases; turns of a conversation; old or new facts).
# The graph (0 by default: its bounds would be 0) and the feedback knobs (off while measuring) are not.
TUNED_WEIGHTS = ("vector", "vector_context", "keyword", "keyword_context", "keyword_key", "vector_key")
TUNED_KNOBS = ("neighbour_weight", "recency_weight")
TUNED = (*TUNED_WEIGHTS, *TUNED_KNOBS)
# Values tried, as multiples of the default: the bounds are [0.5x, 2x].
FACTORS = (0.5, 0.7, 1.4, 2.0)
LOWEST, HIGHEST = 0.5, 2.0
# The share of rated questions held back, in percent, and the fewest held-back questions a
# judgement needs (fewer: nothing is adopted).
HELD_PERCENT = 25
MIN_HELD_QUESTIONS = 3
# How deep each rated question's ranking is read: a memory below it counts as unranked.
SEARCH_LIMIT = 20
# Feedback's own effect is off while measuring (each rated question would find its ratings).
MEASURING = {"feedback_weight": 0.0, "feedback_demotion": 0.0}
# A setting must beat the defaults by more than this to count as better (float noise).
EPSILON = 1e-9
# ...and on the held-back questions by at least this much of score to be adopted. On our set's
# buckets (3 held-back questions each) settings beating the defaults by 0.003-0.012 cost the
# untouched questions 0.013 of recall@10; with this margin, computed from the same run's records,
# nothing was lost (bench/results/feedback-eval-2026-11-28-learned.md).
ADOPT_MARGIN = 0.02


@dataclass
class Question:
    """One rated question: the memories rated useful and irrelevant for it (the newest rating
    of a memory for it counts), and the rating id that places it in the split."""

    query: str
    first_rating: int
    newest_rating: int
    useful: set = field(default_factory=set)
    irrelevant: set = field(default_factory=set)

    @property
    def lot(self) -> str:
        """Its place in the split: a hash of its first rating's id (stable while it is rated)."""
        return hashlib.sha256(f"learn:{self.first_rating}".encode()).hexdigest()


def split(questions: list[Question]) -> tuple[list[Question], list[Question]]:
    """(training, held back): the HELD_PERCENT of the questions with the lowest hashes of their
    first rating's id are held back — at least MIN_HELD_QUESTIONS when there are twice as many
    questions; the same questions every run while no other is rated."""
    ordered = sorted(questions, key=lambda q: q.lot)
    held = round(len(ordered) * HELD_PERCENT / 100)
    if len(ordered) >= 2 * MIN_HELD_QUESTIONS:
        held = max(held, MIN_HELD_QUESTIONS)
    return ordered[held:], ordered[:held]


def questions_of(bucket: Bucket, *, limit: int) -> tuple[list[Question], int, int]:
    """The bucket's rated questions (the newest ``limit``), how many ratings the bucket has (all
    of them: the count the job compares with ``ENGRAM_LEARN_MIN_RATINGS`` and with the last run's)
    and the newest rating's id. Ratings without a query vector count too: the search embeds the query."""
    by_query: dict[str, Question] = {}
    count = 0
    ratings = SearchFeedback.objects.for_bucket(bucket).order_by("pk").values_list("pk", "query", "memory_id", "signal")
    for pk, query, memory_id, signal in ratings.iterator():
        count += 1
        key = " ".join(query.split()).casefold()
        question = by_query.setdefault(key, Question(query=query, first_rating=pk, newest_rating=pk))
        question.newest_rating = pk
        # The newest word on a memory for this question is the one that counts.
        question.useful.discard(memory_id)
        question.irrelevant.discard(memory_id)
        (question.useful if signal == FeedbackSignal.USEFUL else question.irrelevant).add(memory_id)
    chosen = sorted(by_query.values(), key=lambda q: -q.newest_rating)[:limit]
    newest = max((q.newest_rating for q in by_query.values()), default=0)
    return chosen, count, newest


def question_score(question: Question, ranked: list) -> float:
    """How well a ranking (memory ids, best first) agrees with a question's ratings, in [0, 1]:
    the mean of the reciprocal ranks of its useful memories; with irrelevant ones too, averaged
    with the share of (useful, irrelevant) pairs in the right order (a memory below the ranking
    read counts as last; two such as a tie, half right); irrelevant ones alone, 1 minus the mean
    of their reciprocal ranks."""
    rank = {memory_id: position for position, memory_id in enumerate(ranked, start=1)}
    last = len(ranked) + 1
    parts = []
    if question.useful:
        parts.append(sum(1.0 / rank[m] if m in rank else 0.0 for m in question.useful) / len(question.useful))
        if question.irrelevant:
            pairs = [(rank.get(u, last), rank.get(i, last)) for u in question.useful for i in question.irrelevant]
            parts.append(sum(1.0 if u < i else 0.5 if u == i else 0.0 for u, i in pairs) / len(pairs))
    elif question.irrelevant:
        reciprocal = [1.0 / rank[m] if m in rank else 0.0 for m in question.irrelevant]
        parts.append(1.0 - sum(reciprocal) / len(reciprocal))
    return sum(parts) / len(parts) if parts else 0.0


def defaults_of(bucket: Bucket) -> tuple[dict, tuple[str, ...]]:
    """The tuned knobs' values by the defaults with the operator's overrides, and the knobs that
    can be tuned (those the operator did not set: their value would not be used)."""
    operator = (bucket.tenant.settings or {}).get("retrieval") or {}
    base = ranking.merge(ranking.DEFAULTS, operator)
    operator_weights = operator.get("weights") or {}
    values = {name: (base.weight(name) if name in TUNED_WEIGHTS else getattr(base, name)) for name in TUNED}
    free = tuple(
        name for name in TUNED if (name not in operator_weights if name in TUNED_WEIGHTS else name not in operator)
    )
    return values, free


def as_overrides(values: dict, knobs: tuple[str, ...]) -> dict:
    """``values`` of ``knobs`` in the shape of ranking overrides (weights nested)."""
    weights = {name: values[name] for name in knobs if name in TUNED_WEIGHTS}
    other = {name: values[name] for name in knobs if name not in TUNED_WEIGHTS}
    return {**({"weights": weights} if weights else {}), **other}


def _bounded(name: str, value: float) -> float:
    low, high = ranking._NUMERIC_BOUNDS.get(name, (0.0, 100.0))
    return round(min(max(value, low), high), 4)


def candidates_for(name: str, default: float) -> list[float]:
    """The values tried for one knob: FACTORS x its default, within ranking's bounds, distinct."""
    out: list[float] = []
    for factor in FACTORS:
        value = _bounded(name, default * factor)
        if value != default and value not in out:
            out.append(value)
    return out


class Scorer:
    """Scores settings on a set of questions by searching them again; counts its searches."""

    def __init__(self, bucket: Bucket, knobs: tuple[str, ...]):
        self.bucket = bucket
        self.knobs = knobs
        self.searches = 0

    def __call__(self, values: dict, questions: list[Question]) -> float:
        if not questions:
            return 0.0
        # Every tuned knob is named explicitly, so a row learned before does not leak into the
        # measurement; the knobs the operator set are left to the operator's value.
        request = {**as_overrides(values, self.knobs), **MEASURING}
        total = 0.0
        for question in questions:
            result = memories_search(
                bucket=self.bucket, query=question.query, mode="hybrid", limit=SEARCH_LIMIT,
                ranking_overrides=request, record_access=False,
            )  # fmt: skip
            self.searches += 1
            total += question_score(question, [hit.id for hit in result.hits])
        return total / len(questions)


@dataclass
class Lesson:
    """What one bucket's learning measured and decided."""

    bucket_id: str
    ratings: int
    train_questions: int
    held_questions: int
    adopted: bool = False
    settings: dict = field(default_factory=dict)
    train_before: float = 0.0
    train_after: float = 0.0
    held_before: float = 0.0
    held_after: float = 0.0
    candidates: int = 0
    searches: int = 0
    reason: str = ""


def ranking_learn(
    *,
    bucket: Bucket,
    max_questions: int | None = None,
    knobs: tuple[str, ...] = TUNED,
    pause: Callable[[], object] = activity.pause,
) -> Lesson:
    """Learn ``bucket``'s ranking settings from its ratings and store what was measured
    (:class:`~memories.models.LearnedRanking`, replacing the bucket's row): the settings are
    adopted only if they beat the defaults on the held-back questions. ``knobs``: those tuned
    (of :data:`TUNED`, in that order). Runs its searches outside any transaction (they are
    reads); the row is written in one at the end."""
    unknown = set(knobs) - set(TUNED)
    if unknown:
        raise ValueError(f"not tunable: {sorted(unknown)}")
    limit = max_questions or django_settings.ENGRAM_LEARN_MAX_QUERIES
    questions, ratings, newest = questions_of(bucket, limit=limit)
    train, held = split(questions)
    lesson = Lesson(bucket_id=str(bucket.pk), ratings=ratings, train_questions=len(train), held_questions=len(held))
    defaults, free = defaults_of(bucket)
    knobs = tuple(name for name in knobs if name in free)
    score = Scorer(bucket, free)
    if not knobs:
        lesson.reason = "the operator set every knob to tune"
    elif len(held) < MIN_HELD_QUESTIONS or not train:
        lesson.reason = f"too few rated questions to hold {MIN_HELD_QUESTIONS} back"
    else:
        best = dict(defaults)
        lesson.train_before = best_score = score(best, train)
        lesson.candidates = 1
        for name in knobs:
            for value in candidates_for(name, defaults[name]):
                pause()
                trial = {**best, name: value}
                trial_score = score(trial, train)
                lesson.candidates += 1
                if trial_score > best_score + EPSILON:
                    best, best_score = trial, trial_score
        lesson.train_after = best_score
        changed = tuple(name for name in knobs if best[name] != defaults[name])
        if not changed:
            lesson.reason = "no setting tried ranked the training questions better"
            lesson.held_before = lesson.held_after = score(defaults, held)
        else:
            lesson.held_before = score(defaults, held)
            lesson.held_after = score(best, held)
            if lesson.held_after >= lesson.held_before + ADOPT_MARGIN - EPSILON:
                lesson.adopted = True
                lesson.settings = as_overrides(best, changed)
                ranking.merge(ranking.DEFAULTS, lesson.settings)  # within ranking's bounds, or this raises
            else:
                lesson.reason = (
                    f"the learned settings did not rank the held-back questions better than the defaults "
                    f"by {ADOPT_MARGIN}"
                )
    lesson.searches = score.searches
    with transaction.atomic():
        LearnedRanking.objects.for_bucket(bucket).delete()
        LearnedRanking.objects.create(
            tenant_id=bucket.tenant_id, bucket_id=bucket.pk, adopted=lesson.adopted, settings=lesson.settings,
            ratings=ratings, train_queries=len(train), held_queries=len(held),
            train_before=lesson.train_before, train_after=lesson.train_after,
            held_before=lesson.held_before, held_after=lesson.held_after,
            candidates=lesson.candidates, searches=lesson.searches, newest_rating_id=newest,
        )  # fmt: skip
        _forget([bucket.pk])
    return lesson


def buckets_to_learn(*, min_ratings: int, limit: int) -> list[Bucket]:
    """The buckets (of every tenant: the caller disables scopes) with at least ``min_ratings``
    ratings whose newest rating or rating count changed since they were last learned (or never
    were), the longest unlearned first. One statement over the ratings' bucket index."""
    rated = (
        SearchFeedback.objects.values("tenant_id", "bucket_id")
        .annotate(ratings=Count("id"), newest=Max("id"))
        .filter(ratings__gte=min_ratings)
    )
    learned = {
        row["bucket_id"]: row
        for row in LearnedRanking.objects.values("bucket_id", "ratings", "newest_rating_id", "learned_at")
    }
    due = []
    for row in rated:
        before = learned.get(row["bucket_id"])
        if before is None:
            due.append((0, row["bucket_id"]))
        elif before["newest_rating_id"] != row["newest"] or before["ratings"] != row["ratings"]:
            due.append((before["learned_at"].timestamp(), row["bucket_id"]))
    due.sort(key=lambda item: item[0])
    ids = [bucket_id for _when, bucket_id in due[:limit]]
    found = {b.pk: b for b in Bucket.objects.filter(pk__in=ids).select_related("tenant")}
    return [found[i] for i in ids if i in found]


def ranking_learn_all(
    *,
    recorder,
    min_ratings: int | None = None,
    limit: int | None = None,
    buckets: list[Bucket] | None = None,
    knobs: tuple[str, ...] = TUNED,
) -> None:
    """The learning job (maintenance.learn_ranking): learn each bucket due (:func:`buckets_to_learn`),
    or each of ``buckets`` with enough ratings whether or not they changed (an operator's run).
    Cross-tenant: the caller disables scopes. Counts buckets learned, adopted and searches run."""
    min_ratings = django_settings.ENGRAM_LEARN_MIN_RATINGS if min_ratings is None else min_ratings
    limit = django_settings.ENGRAM_LEARN_BUCKETS_PER_RUN if limit is None else limit
    if buckets is None:
        due = buckets_to_learn(min_ratings=min_ratings, limit=limit)
    else:
        due = [b for b in buckets if SearchFeedback.objects.for_bucket(b).count() >= min_ratings]
        recorder.add(too_few_ratings=len(buckets) - len(due))
    recorder.set_total(len(due))
    for bucket in due:
        lesson = ranking_learn(bucket=bucket, knobs=knobs)
        recorder.add(buckets=1, adopted=int(lesson.adopted), searches=lesson.searches)
        recorder.advance()


def ranking_learned_reset(*, buckets: list[Bucket], actor: Actor | None = None) -> int:
    """Forget what these buckets learned: their searches use the defaults again at once, and the
    nightly run leaves them alone until their ratings change (another rating, one fewer). The
    row keeps no measurement, only ``reset_at`` and the bucket's rating count and newest rating at
    the reset (what :func:`buckets_to_learn` compares); an operator's run of the bucket
    (``learn_ranking --bucket``) learns it again at once. Audited as ``ranking.learned_reset``;
    returns how many buckets had something to reset (a bucket never learned, or reset since its
    last run, has not: nothing is written)."""
    reset = 0
    with transaction.atomic():
        for bucket in buckets:
            # FOR UPDATE: a learning run finishing meanwhile writes its row before or after, never between.
            row = LearnedRanking.objects.for_bucket(bucket).select_for_update().first()
            if row is None or row.reset_at is not None:
                continue
            rated = SearchFeedback.objects.for_bucket(bucket).aggregate(ratings=Count("id"), newest=Max("id"))
            LearnedRanking.objects.for_bucket(bucket).update(
                adopted=False, settings={}, ratings=rated["ratings"], newest_rating_id=rated["newest"] or 0,
                train_queries=0, held_queries=0, train_before=0.0, train_after=0.0, held_before=0.0, held_after=0.0,
                candidates=0, searches=0, learned_at=Now(), reset_at=Now(),
            )  # fmt: skip
            reset += 1
            _forget([bucket.pk])
            if actor is not None:
                audit_record(
                    actor=actor, action="ranking.learned_reset", tenant=bucket.tenant, object_type="bucket",
                    object_ids=[bucket.pk],
                    details={"name": bucket.name, "adopted": row.adopted, "settings": row.settings,
                             "ratings": row.ratings},
                )  # fmt: skip
    return reset


def learned_forget(*, tenant_id, bucket_ids) -> int:
    """Delete the learned rows of these buckets (a merge's source, the buckets an erasure took
    ratings from: what was learned from those ratings goes with them). Inside the caller's
    transaction; how many rows."""
    ids = [str(b) for b in bucket_ids]
    if not ids:
        return 0
    with connection.cursor() as cur:
        cur.execute(
            "DELETE FROM learned_rankings WHERE tenant_id = %s AND bucket_id = ANY(%s::uuid[])", [tenant_id, ids]
        )
        deleted = cur.rowcount
    _forget([uuid.UUID(i) for i in ids])
    return deleted


def _forget(bucket_ids: list) -> None:
    """This process's searches read these buckets' learned rows again: at once (a search inside
    this transaction sees the change), and after the commit (one that read the old row meanwhile
    may have kept it)."""
    learned.forget_cached(bucket_ids)
    transaction.on_commit(lambda: learned.forget_cached(bucket_ids))
