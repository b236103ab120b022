"""Fusion weights learned per bucket from its feedback (memories/services/ranking_learning.py):
adopted only where they rank the held-back ratings better than the defaults, used by the bucket's
searches under the operator's and the request's settings, named by explain, never learned from
another tenant's ratings, reset by an operator, and gone with a merged or erased bucket's ratings.

The synthetic bucket: people who moved. Each has an old note ("Tom lives in Paris.", three years
ago) whose words match "Where does Tom live?" best, and a new one ("Since the spring, Tom rents a
small flat near the station in Lisbon."). The defaults rank the old note first; agents rate the
new one useful and the old one irrelevant. A recency weight twice the default ranks the new first.
"""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from audit.models import AuditEvent
from audit.services import Actor
from engram_site.jobs import runner
from engram_site.scoping import scopes_disabled
from memories import ranking
from memories.models import LearnedRanking
from memories.services import ranking_learning
from memories.services.buckets import bucket_merge
from memories.services.erasure import memories_erase
from tenants.services import bucket_insert
from tests.factories import make_client, search, write

pytestmark = pytest.mark.django_db

MOVED = [
    ("Tom", "Paris", "Lisbon"), ("Maya", "Oslo", "Dublin"), ("Ravi", "Delhi", "Toronto"),
    ("Lena", "Vienna", "Zurich"), ("Omar", "Cairo", "Madrid"), ("Kira", "Kyoto", "Seoul"),
    ("Ivan", "Minsk", "Prague"), ("Sara", "Lyon", "Nantes"), ("Paul", "Leeds", "Bristol"),
    ("Anna", "Graz", "Salzburg"), ("Luis", "Quito", "Lima"), ("Mina", "Busan", "Osaka"),
    ("Erik", "Malmo", "Bergen"), ("Noor", "Doha", "Dubai"), ("Jack", "Perth", "Sydney"),
    ("Rosa", "Porto", "Seville"),
]  # fmt: skip
UNRATED = ("Nina", "Turin", "Milan")
RECENCY = ("recency_weight",)
NO_FEEDBACK = {"feedback_weight": 0, "feedback_demotion": 0}
# The new notes state a change ("Since the spring, …"): the fact-update rule (newer_fact_ratio,
# memories/retrieval/updates.py) alone puts them above the old ones. This module is about what
# learning changes, so the tenants' operators turn that rule off (a knob an operator sets is not
# tuned).
FACT_UPDATES_OFF = {"retrieval": {"newer_fact_ratio": 0}}


def question(name: str) -> str:
    return f"Where does {name} live?"


def write_moves(api, bucket, people) -> dict[str, tuple[str, str]]:
    """Each person's (old note, new note) ids."""
    old_at = (timezone.now() - timedelta(days=3 * 365)).isoformat()
    old = write(bucket, *[{"content": f"{n} lives in {a}.", "created_at": old_at} for n, a, _ in people],
                api=api, sequence=False)  # fmt: skip
    new = write(
        bucket, *[f"Since the spring, {n} rents a small flat near the station in {b}." for n, _, b in people],
        api=api, sequence=False,
    )  # fmt: skip
    return {person[0]: (o, n) for person, o, n in zip(people, old, new, strict=True)}


def rate(api, memory_id, signal, query, **body):
    response = api.post(
        f"/api/v1/memories/{memory_id}/feedback", {"signal": signal, "query": query, **body}, format="json"
    )
    assert response.status_code == 201, response.content


def rate_moves(api, notes, names, *, prefer="new", **body):
    for name in names:
        old, new = notes[name]
        useful, irrelevant = (new, old) if prefer == "new" else (old, new)
        rate(api, useful, "useful", question(name), **body)
        rate(api, irrelevant, "irrelevant", question(name), **body)


def order(api, bucket, name, notes, **params) -> tuple[int, int]:
    """Where the old and the new note of ``name`` rank (1-based) for the question."""
    ids = [h["id"] for h in search(api, bucket, question(name), limit=10, **params)["results"]]
    old, new = notes[name]
    return ids.index(old) + 1, ids.index(new) + 1


@pytest.fixture(autouse=True)
def without_fact_updates(tenant):
    tenant.settings = {**tenant.settings, **FACT_UPDATES_OFF}
    tenant.save()


@pytest.fixture
def notes(api, bucket):
    return write_moves(api, bucket, [*MOVED, UNRATED])


@pytest.fixture
def rated(api, notes):
    rate_moves(api, notes, [n for n, _, _ in MOVED])
    return notes


def test_the_defaults_rank_the_old_note_first(api, bucket, notes):
    # The premise of this module: without learning, the words win over the date.
    old, new = order(api, bucket, UNRATED[0], notes)
    assert old < new


def test_learning_adopts_settings_that_rank_the_useful_memories_above_the_irrelevant(bucket, rated):
    lesson = ranking_learning.ranking_learn(bucket=bucket, knobs=RECENCY)
    assert lesson.adopted, lesson
    assert lesson.settings["recency_weight"] > ranking.DEFAULTS.recency_weight
    assert lesson.held_after >= lesson.held_before + ranking_learning.ADOPT_MARGIN
    assert lesson.train_after > lesson.train_before
    assert (lesson.train_questions, lesson.held_questions) == (12, 4)
    row = LearnedRanking.objects.for_bucket(bucket).get()
    assert (row.adopted, row.settings, row.ratings) == (True, lesson.settings, 32)
    assert (row.held_before, row.held_after) == (lesson.held_before, lesson.held_after)
    assert row.searches == lesson.searches > 0


def test_learned_settings_stay_within_half_and_twice_the_defaults(bucket, rated):
    lesson = ranking_learning.ranking_learn(bucket=bucket, knobs=RECENCY)
    value = lesson.settings["recency_weight"]
    assert 0.5 * ranking.DEFAULTS.recency_weight <= value <= 2 * ranking.DEFAULTS.recency_weight
    assert ranking_learning.candidates_for("neighbour_weight", 0.5) == [0.25, 0.35, 0.7, 1.0]
    # Never outside ranking's own bounds: 2x a recency weight of 0.6 would be 1.2.
    assert ranking_learning.candidates_for("recency_weight", 0.6) == [0.3, 0.42, 0.84, 1.0]


def test_the_bucket_search_uses_the_learned_settings_and_explain_names_them(api, bucket, rated):
    ranking_learning.ranking_learn(bucket=bucket, knobs=RECENCY)
    # A question nobody rated: the lesson (newer notes answer) carries over; feedback's own lift
    # is turned off so that only the learned weights can move it.
    old, new = order(api, bucket, UNRATED[0], rated, ranking=NO_FEEDBACK)
    assert new < old
    hit = search(api, bucket, question(UNRATED[0]), explain=True)["results"][0]
    learned = hit["explain"]["learned_ranking"]
    assert learned["settings"]["recency_weight"] > ranking.DEFAULTS.recency_weight
    assert learned["held_back_score"]["learned"] > learned["held_back_score"]["defaults"]


def test_a_request_setting_wins_over_the_learned_one(api, bucket, rated):
    ranking_learning.ranking_learn(bucket=bucket, knobs=RECENCY)
    old, new = order(api, bucket, UNRATED[0], rated, ranking={**NO_FEEDBACK, "recency_weight": 0.3})
    assert old < new


def test_the_operators_settings_win_over_the_learned_ones_and_are_not_tuned(tenant, bucket, rated):
    learned = {"recency_weight": 0.6, "weights": {"keyword": 2.0, "vector": 0.5}}
    operator = {"retrieval": {"recency_weight": 0.1, "weights": {"keyword": 1.5}, "newer_fact_ratio": 0}}
    config = ranking.resolve(operator, None, learned)
    assert (config.recency_weight, config.weight("keyword"), config.weight("vector")) == (0.1, 1.5, 0.5)
    tenant.settings = {**tenant.settings, **operator}
    tenant.save()
    bucket.refresh_from_db()
    lesson = ranking_learning.ranking_learn(bucket=bucket, knobs=RECENCY)
    assert not lesson.adopted
    assert lesson.candidates == 0 and "operator" in lesson.reason


def test_learning_keeps_the_defaults_when_the_held_back_ratings_do_not_improve(api, bucket, notes):
    rate_moves(api, notes, [n for n, _, _ in MOVED])
    # The held-back questions are rated the other way round (the newest rating counts): what
    # trains well ranks them worse than the defaults.
    questions, _count, _newest = ranking_learning.questions_of(bucket, limit=100)
    _train, held = ranking_learning.split(questions)
    held_names = [q.query.split()[2] for q in held]
    rate_moves(api, notes, held_names, prefer="old")
    lesson = ranking_learning.ranking_learn(bucket=bucket, knobs=RECENCY)
    assert lesson.train_after > lesson.train_before  # it learned something on the training share...
    assert not lesson.adopted  # ...which the held-back share refused
    assert lesson.held_after <= lesson.held_before
    row = LearnedRanking.objects.for_bucket(bucket).get()
    assert (row.adopted, row.settings) == (False, {})
    hit = search(api, bucket, question(UNRATED[0]), explain=True)["results"][0]
    assert "learned_ranking" not in hit["explain"]


def test_too_few_ratings_learn_nothing(api, bucket, notes):
    rate_moves(api, notes, [n for n, _, _ in MOVED[:10]])  # 20 ratings, fewer than 30
    with scopes_disabled():
        outcome = runner.run_job("learn_ranking", ranking_learning.ranking_learn_all)
        assert outcome.status == "succeeded"
        assert not LearnedRanking.objects.exists()
    lesson = ranking_learning.ranking_learn(bucket=bucket, max_questions=4, knobs=RECENCY)
    assert not lesson.adopted and lesson.candidates == 0  # 4 questions: too few to hold 3 back


def test_the_job_learns_each_bucket_from_its_own_tenants_ratings_only(api, bucket, rated, other_tenant):
    other_tenant.settings = {**other_tenant.settings, **FACT_UPDATES_OFF}
    other_tenant.save()
    other = bucket_insert(tenant=other_tenant, name="moves")
    outsider = make_client(other_tenant)
    other_notes = write_moves(outsider, other, [*MOVED, UNRATED])
    # The outsider rates a few the other way round: too few for its bucket to be learned.
    rate_moves(outsider, other_notes, [n for n, _, _ in MOVED[:5]], prefer="old")
    assert ranking_learning.questions_of(other, limit=100)[1] == 10
    with scopes_disabled():
        outcome = runner.run_job("learn_ranking", ranking_learning.ranking_learn_all, knobs=RECENCY)
    assert outcome.counts.get("buckets") == 1, outcome
    with scopes_disabled():
        rows = list(LearnedRanking.objects.values_list("tenant_id", "bucket_id", "ratings"))
    assert rows == [(bucket.tenant_id, bucket.pk, 32)]
    # The other tenant's bucket ranks as before: its old note first, nothing learned named.
    old, new = order(outsider, other, UNRATED[0], other_notes)
    assert old < new
    hit = search(outsider, other, question(UNRATED[0]), explain=True)["results"][0]
    assert "learned_ranking" not in hit["explain"]


def test_a_bucket_whose_ratings_did_not_change_is_not_learned_again(api, bucket, rated):
    # Read from fewer questions than it has: still the same ratings, nothing to learn again.
    ranking_learning.ranking_learn(bucket=bucket, max_questions=8, knobs=RECENCY)
    with scopes_disabled():
        assert ranking_learning.buckets_to_learn(min_ratings=30, limit=10) == []
    rate(api, rated["Tom"][1], "useful", "Where is Tom living now?")
    with scopes_disabled():
        assert ranking_learning.buckets_to_learn(min_ratings=30, limit=10) == [bucket]


def test_reset_forgets_the_learned_settings_and_the_search_uses_the_defaults_again(tenant, api, bucket, rated):
    ranking_learning.ranking_learn(bucket=bucket, knobs=RECENCY)
    assert ranking_learning.ranking_learned_reset(buckets=[bucket], actor=Actor.system("test")) == 1
    row = LearnedRanking.objects.for_bucket(bucket).get()
    assert row.reset_at is not None and not row.adopted and row.settings == {}
    # The nightly run does not learn it again from the same ratings (an operator's run would).
    with scopes_disabled():
        assert ranking_learning.buckets_to_learn(min_ratings=30, limit=10) == []
    assert AuditEvent.objects.filter(tenant=tenant, action="ranking.learned_reset").count() == 1
    old, new = order(api, bucket, UNRATED[0], rated, ranking=NO_FEEDBACK)
    assert old < new


def test_the_command_resets_a_bucket(bucket, rated):
    ranking_learning.ranking_learn(bucket=bucket, knobs=RECENCY)
    out = StringIO()
    call_command("learn_ranking", "--reset", "--bucket", str(bucket.pk), stdout=out)
    assert json.loads(out.getvalue()) == {"job": "learn_ranking", "reset": 1}
    assert not LearnedRanking.objects.for_bucket(bucket).filter(adopted=True).exists()
    assert LearnedRanking.objects.for_bucket(bucket).get().reset_at is not None


def test_a_merged_buckets_learned_settings_go_with_it(tenant, bucket, rated):
    ranking_learning.ranking_learn(bucket=bucket, knobs=RECENCY)
    target = bucket_insert(tenant=tenant, name="target")
    bucket_merge(source=bucket, target=target, remove_source=False, actor=Actor.system())
    assert not LearnedRanking.objects.filter(tenant=tenant).exists()


def test_erasing_the_agent_that_rated_forgets_what_was_learned_from_it(tenant, api, bucket, notes):
    rate_moves(api, notes, [n for n, _, _ in MOVED], agent_id="rater")
    ranking_learning.ranking_learn(bucket=bucket, knobs=RECENCY)
    assert LearnedRanking.objects.for_bucket(bucket).exists()
    memories_erase(tenant=tenant, fields={"agent_id": "rater"}, actor=Actor.system())
    assert not LearnedRanking.objects.for_bucket(bucket).exists()


def test_a_run_reads_at_most_the_newest_rated_questions_it_may(bucket, rated):
    questions, ratings, newest = ranking_learning.questions_of(bucket, limit=10)
    assert len(questions) == 10 and ratings == 32  # the bucket's ratings, all counted
    names = {q.query.split()[2] for q in questions}
    assert names == {n for n, _, _ in MOVED[-10:]}  # the last rated
    lesson = ranking_learning.ranking_learn(bucket=bucket, max_questions=10, knobs=RECENCY)
    assert lesson.train_questions + lesson.held_questions == 10
    # Searches: the defaults and each value tried on the training questions, both on the held back.
    tried = len(ranking_learning.candidates_for("recency_weight", ranking.DEFAULTS.recency_weight))
    assert lesson.searches <= (1 + tried) * lesson.train_questions + 2 * lesson.held_questions


def test_a_bucket_searched_again_reads_its_learned_settings_once_and_a_reset_shows_at_once(api, bucket, rated):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def learned_reads() -> int:
        with CaptureQueriesContext(connection) as captured:
            search(api, bucket, question(UNRATED[0]), explain=True)
        return sum("learned_rankings" in q["sql"] for q in captured.captured_queries)

    assert learned_reads() == 1
    assert learned_reads() == 0  # kept by this process
    ranking_learning.ranking_learn(bucket=bucket, knobs=RECENCY)
    hit = search(api, bucket, question(UNRATED[0]), explain=True)["results"][0]
    assert hit["explain"].get("learned_ranking")  # the run dropped the kept answer
    ranking_learning.ranking_learned_reset(buckets=[bucket], actor=Actor.system("test"))
    hit = search(api, bucket, question(UNRATED[0]), explain=True)["results"][0]
    assert not hit["explain"].get("learned_ranking")
