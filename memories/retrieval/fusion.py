"""Boosts: what multiplies a candidate's fused score once its row is read.

The signals' lists are fused by :func:`memories.ranking.fuse` (the weights and options live
in :mod:`memories.ranking`); here the query's cues (:mod:`memories.retrieval.query`) and
each row decide the factors, and a superseded memory is kept below its successor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from memories import ranking
from memories.retrieval.hits import Hit
from memories.retrieval.query import (
    asks_about_assistant,
    asks_about_self,
    asks_for_action,
    asks_when,
    has_time_expression,
    named_people,
    preferred_scope,
    states_rule,
)
from memories.text import transcript_speaker


@dataclass(frozen=True)
class QueryCues:
    """What the boosts look for, read once per search."""

    wanted_scope: str | None
    people: list[str]  # lower case
    when: bool
    mentioned: re.Pattern | None  # any of ``people`` as a word
    # Asked in the first person singular ("what may I use…", "where do I live"): the user's own lines.
    first_person: bool = False
    # Any other question not about what the assistant said: the user's lines, by user_boost.
    user_lines: bool = False
    # A request, or a question of what may or should be done: the user's lines that lay down a rule.
    request: bool = False
    # Memory id -> what its ratings say for this query (memories.retrieval.feedback.FeedbackScore).
    feedback: dict = field(default_factory=dict)


def query_cues(query: str, config: ranking.RankingConfig) -> QueryCues:
    people = [p.lower() for p in named_people(query)]
    first_person = config.self_boost > 0 and asks_about_self(query)
    return QueryCues(
        wanted_scope=preferred_scope(query),
        people=people,
        when=config.date_cue_boost > 0 and asks_when(query),
        mentioned=_mention_pattern(people),
        first_person=first_person,
        user_lines=(
            config.user_boost > 0
            and not first_person
            and not asks_about_self(query)
            and not asks_about_assistant(query)
        ),
        request=config.rule_boost > 0 and asks_for_action(query),
    )


def boost_bounds(config: ranking.RankingConfig, cues: QueryCues) -> tuple[float, float]:
    """The least and the most the boosts can multiply a fused score by, under ``config``
    for this query — leaving out importance, which only some rows have (rows.fetch_contenders
    reads every candidate that has one)."""
    max_boost = (
        (1.0 + config.scope_match_boost if cues.wanted_scope else 1.0)
        * (1.0 + config.person_boost if cues.people else 1.0)
        * (1.0 + config.speaker_boost if cues.people else 1.0)
        * (1.0 + config.date_cue_boost if cues.when else 1.0)
        * (1.0 + config.trust_boost if config.trusted_actors else 1.0)
        * (1.0 + config.self_boost if cues.first_person else 1.0)
        * (1.0 + config.user_boost if cues.user_lines else 1.0)
        * (1.0 + config.rule_boost if cues.request else 1.0)
    )
    min_boost = (1.0 - config.recency_weight) * min(1.0, config.superseded_weight) * min(1.0, config.question_weight)
    if cues.feedback:
        min_boost *= min(score.factor(config) for score in cues.feedback.values())
    return min_boost, max_boost


def row_boosts(
    row: dict, cues: QueryCues, config: ranking.RankingConfig, *, now: datetime, as_of: datetime | None
) -> dict[str, float]:
    """The factors applied to the row's fused score, by name, in the order they multiply.
    Marks ``row["superseded"]``: superseded at ``as_of`` (or ``now``).

    Runs for every candidate read (~120 a search): the text's speaker is read once, and only
    when a boost of this query asks about it."""
    content = row["content"]
    age_days = (now - row["created_at"]).total_seconds() / 86400 if row["created_at"] else 0.0
    boosts = {"recency": ranking.recency_factor(age_days, config)}
    attributed = row["attributed_to"]
    speaker = None  # a transcript line's "Name: ", for a row written without attribution
    if attributed is None and (
        (cues.people and config.speaker_boost) or cues.first_person or cues.user_lines or cues.request
    ):
        speaker = transcript_speaker(content)
    # Said by the user: attributed so, or a transcript line of a speaker named "User".
    by_user = attributed == "user" if attributed is not None else speaker is not None and speaker.lower() == "user"
    if cues.wanted_scope and row["classified_scope"] == cues.wanted_scope:
        boosts["scope"] = 1.0 + config.scope_match_boost
    if cues.people and _mentions(row, cues.people, cues.mentioned):
        boosts["person"] = 1.0 + config.person_boost
    # Spoken by a person the query names: a memory written without attribution whose text opens
    # with their name.
    if cues.people and config.speaker_boost and speaker is not None and speaker.split()[0].lower() in cues.people:
        boosts["speaker"] = 1.0 + config.speaker_boost
    if cues.when and has_time_expression(content):
        boosts["date_cue"] = 1.0 + config.date_cue_boost
    if cues.first_person and by_user:
        boosts["self"] = 1.0 + config.self_boost
    elif cues.user_lines and by_user:
        boosts["self"] = 1.0 + config.user_boost
    if cues.request and by_user and states_rule(content):
        boosts["rule"] = 1.0 + config.rule_boost
    if config.trusted_actors and row["source_actor_id"] in config.trusted_actors:
        boosts["trust"] = 1.0 + config.trust_boost
    if config.question_weight != 1.0 and _is_question(content):
        boosts["question"] = config.question_weight
    if row["importance"]:
        boosts["importance"] = 1.0 + config.importance_boost * row["importance"]
    if cues.feedback:
        rated = cues.feedback.get(row["id"])
        if rated is not None and rated.irrelevant > 0 and config.feedback_demotion > 0:
            boosts["feedback"] = rated.factor(config)
    superseded_at = row["superseded_at"]
    row["superseded"] = superseded_at is not None and superseded_at <= (as_of or now)
    if row["superseded"]:
        boosts["superseded"] = config.superseded_weight
    return boosts


def _is_question(content: str) -> bool:
    """A memory that asks rather than states (ends with a question mark): a conversation's
    question turn shares the words of a question about its answer, but is not that answer."""
    return content.rstrip().endswith("?")


def boosted(fused_score: float, boosts: dict[str, float]) -> float:
    score = fused_score
    for factor in boosts.values():
        score *= factor
    return score


def _mention_pattern(people: list[str]) -> re.Pattern | None:
    """One pattern for every named person, compiled once per search (not once per row)."""
    if not people:
        return None
    return re.compile(r"\b(?:" + "|".join(re.escape(p) for p in people) + r")\b")


def _mentions(row: dict, people: list[str], pattern: re.Pattern) -> bool:
    if pattern.search(row["content"].lower()):
        return True
    source, agent = row["source_actor_id"], row["agent_id"]
    if not source and not agent:  # no name to compare (people are never empty)
        return False
    actors = {(source or "").lower(), (agent or "").lower()}
    return any(p in actors for p in people)


def successors_take_place(hits: list[Hit], weight: float) -> None:
    """A memory found together with a superseded one it superseded scores at least what that one
    would have scored without its demotion (``weight``, the superseded memories' share): for a
    question about the present, the newer fact answers where the older one matched the question's
    words ("What phone do I have?": "My phone is an iPhone 12." superseded by "I switched to a
    Pixel 8 last month.")."""
    if weight <= 0 or not any(hit.row["superseded"] for hit in hits):
        return
    by_id = {hit.id: hit for hit in hits}
    for hit in hits:
        successor = by_id.get(hit.row["superseded_by"]) if hit.row["superseded"] else None
        if successor is None or successor.row["superseded"]:
            continue
        undemoted = hit.score / weight
        if undemoted > successor.score:
            if successor.explain:
                successor.explain["successor_of"] = {"id": str(hit.id), "score": round(successor.score, 6)}
            successor.score = undemoted


def below_successors(hits: list[Hit], weight: float) -> None:
    """A superseded memory found together with the memory that superseded it scores at most
    ``weight`` x that one's score: the newer fact answers first, whatever the older one's
    lexical or vector lead (score fusion can give it a large one in a small bucket)."""
    if not any(hit.row["superseded"] for hit in hits):  # the usual search: nothing to cap
        return
    scores = {hit.id: hit.score for hit in hits}
    for hit in hits:
        successor = hit.row["superseded_by"]
        if hit.row["superseded"] and successor in scores:
            capped = scores[successor] * weight
            if capped < hit.score:
                if hit.explain:
                    hit.explain["boosts"]["below_successor"] = round(capped / hit.score, 4)
                hit.score = capped
