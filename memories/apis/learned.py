"""/api/v1/buckets/{id}/learned-ranking: what the bucket's ranking learned from its feedback, and its
reset (memories.services.ranking_learning; docs/RETRIEVAL.md, "Learned weights")."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.services import request_actor
from engram_site.openapi import errors
from memories import selectors
from memories.services import ranking_learning
from tenants.agents import refuse_agent_held
from tenants.selectors import bucket_get

STATUSES = {
    "none": "nothing learned (too few ratings yet, or none since a merge or an erasure took them)",
    "in_use": "the learned settings beat the defaults on the held-back ratings: the bucket's searches use them",
    "defaults_kept": "measured, but nothing beat the defaults on the held-back ratings: the defaults stay",
    "reset": "an operator or a token reset it: the defaults are used until the bucket's ratings change",
}


class LearnedScoreOut(serializers.Serializer):
    defaults = serializers.FloatField(help_text="the default settings' score, 0..1")
    learned = serializers.FloatField(help_text="the best settings found, 0..1 (the defaults' when nothing beat them)")


class LearnedQuestionsOut(serializers.Serializer):
    training = serializers.IntegerField()
    held_back = serializers.IntegerField()


class LearnedRankingOut(serializers.Serializer):
    bucket_id = serializers.UUIDField()
    status = serializers.ChoiceField(
        choices=list(STATUSES), help_text="; ".join(f"{key}: {text}" for key, text in STATUSES.items())
    )
    settings = serializers.DictField(
        help_text="the ranking settings the bucket's searches use over the defaults (ranking overrides' shape); "
        "{} unless status is in_use"
    )
    learned_at = serializers.DateTimeField(allow_null=True, help_text="when it was measured; null if not (or reset)")
    reset_at = serializers.DateTimeField(allow_null=True, help_text="when it was reset; null unless status is reset")
    ratings = serializers.IntegerField(
        allow_null=True, help_text="the bucket's ratings when it was learned (or reset); null if never"
    )
    ratings_now = serializers.IntegerField(help_text="the bucket's ratings now")
    min_ratings = serializers.IntegerField(help_text="ratings a bucket needs to be learned (ENGRAM_LEARN_MIN_RATINGS)")
    questions = LearnedQuestionsOut(allow_null=True, help_text="the rated questions that trained and were held back")
    held_back_score = LearnedScoreOut(
        allow_null=True, help_text="on the held-back questions, the defaults' and the learned settings'; null if none"
    )
    training_score = LearnedScoreOut(allow_null=True, help_text="the same on the training questions")
    searches = serializers.IntegerField(allow_null=True, help_text="searches the run made to measure")


def _score(questions: int, before: float, after: float) -> dict | None:
    return {"defaults": round(before, 4), "learned": round(after, 4)} if questions else None


def _out(state: selectors.LearnedRankingState) -> dict:
    row = state.row
    measured = row is not None and row.reset_at is None
    return {
        "bucket_id": state.bucket.pk,
        "status": state.status,
        "settings": dict(row.settings) if state.status == "in_use" else {},
        "learned_at": row.learned_at if measured else None,
        "reset_at": row.reset_at if row is not None else None,
        "ratings": row.ratings if row is not None else None,
        "ratings_now": state.ratings_now,
        "min_ratings": state.min_ratings,
        "questions": {"training": row.train_queries, "held_back": row.held_queries} if measured else None,
        "held_back_score": _score(row.held_queries, row.held_before, row.held_after) if measured else None,
        "training_score": _score(row.train_queries, row.train_before, row.train_after) if measured else None,
        "searches": row.searches if measured else None,
    }


class LearnedRankingApi(APIView):
    def _bucket(self, request, bucket_id):
        bucket = bucket_get(tenant=request.auth.tenant, bucket_id=bucket_id, token=request.auth)
        # Learned from every agent's ratings, and used by every agent's searches.
        refuse_agent_held(request.auth, "read or reset what the bucket's ranking learned")
        return bucket

    @extend_schema(
        operation_id="buckets_learned_ranking",
        responses={200: LearnedRankingOut, **errors(403, 404)},
        description=(
            "What the bucket's ranking learned from its feedback (the nightly learn_ranking job): the status, the "
            "settings in use, when, on how many ratings and questions, and the held-back score of the learned "
            "settings against the defaults'. A token held to agents gets 403 agent_forbidden (it is learned from "
            'every agent\'s ratings). docs/RETRIEVAL.md, "Learned weights".'
        ),
    )
    def get(self, request, bucket_id):
        bucket = self._bucket(request, bucket_id)
        return Response(LearnedRankingOut(_out(selectors.learned_ranking_get(bucket=bucket))).data)

    @extend_schema(
        operation_id="buckets_learned_ranking_reset",
        request=None,
        responses={200: LearnedRankingOut, **errors(403, 404)},
        description=(
            "Reset what the bucket's ranking learned: its searches use the defaults (with the tenant's settings) "
            "at once, and the nightly job learns it again only once its ratings change. Audited as "
            "ranking.learned_reset (as the console's reset). Idempotent: a bucket with nothing learned, or reset "
            "already, is left as it is. Scope write; a token held to agents gets 403 agent_forbidden. The answer is "
            "the state after, as GET."
        ),
    )
    def delete(self, request, bucket_id):
        bucket = self._bucket(request, bucket_id)
        ranking_learning.ranking_learned_reset(buckets=[bucket], actor=request_actor(request))
        return Response(LearnedRankingOut(_out(selectors.learned_ranking_get(bucket=bucket))).data)
