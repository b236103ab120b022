"""Conflicts: the scan and the per-write hint that store pairs the detector raises."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable

from django.db import connection

from engram_site import activity
from engram_site.jobs.runner import JobRecorder
from engram_site.providers import lemmatizer
from maintenance import conflict_detector, nearest
from maintenance.models import ConflictStatus
from maintenance.services.scans import Row, incremental_scan
from memories.models import Memory
from tenants.models import Bucket

CONFLICT_K = conflict_detector.CANDIDATE_K
CONFLICT_MIN_SIMILARITY = conflict_detector.CANDIDATE_MIN_SIMILARITY


def _probe_lemmas(words: frozenset[str]) -> list[str]:
    """The probe's words as the bucket's full-text index holds them (lemmas; ``[a-z]+`` only)."""
    try:
        lemmas = lemmatizer.lemmatize_many([" ".join(sorted(words))])[0].split()
    except lemmatizer.LemmatizerUnavailable:
        lemmas = []
    return sorted({w for w in [*words, *lemmas] if re.fullmatch(r"[a-z]+", w)})


def _lexical_partners(*, tenant_id, bucket_id, memory_id, content: str) -> list[uuid.UUID]:
    """Memories of the bucket that a full-text search finds for ``content``'s probes
    (conflict_detector.probes): for each group of words, the PROBE_LIMIT memories that hold
    most of them, shortest first (a plain statement of a fact is short), then newest."""
    found: list[uuid.UUID] = []
    for group in conflict_detector.probes(content):
        words = _probe_lemmas(group)
        if not words:
            continue
        with connection.cursor() as cur:
            # idx_memories_lemmatized_tsv serves the @@; ts_rank_cd's normalisation 2 divides by the length.
            cur.execute(
                "SELECT id FROM memories WHERE tenant_id = %s AND bucket_id = %s AND id <> %s"
                " AND lemmatized_tsv @@ to_tsquery('simple', %s)"
                " ORDER BY ts_rank_cd(lemmatized_tsv, to_tsquery('simple', %s), 2) DESC, created_at DESC LIMIT %s",
                [tenant_id, bucket_id, memory_id, " | ".join(words), " | ".join(words),
                 conflict_detector.PROBE_LIMIT],
            )  # fmt: skip
            found += [row[0] for row in cur.fetchall() if row[0] not in found]
    return found


def _store_conflicts(*, tenant_id, bucket_id, memory_id, found: list[nearest.Similar]) -> int:
    """Run the detector on ``memory_id`` and each neighbour, and each memory its probes find;
    store the pairs it raises."""
    me = Memory.objects.filter(pk=memory_id).values("id", "content", "created_at", "superseded_by").first()
    if me is None:
        return 0
    similarity: dict = {n.id: n.similarity for n in found}
    for other_id in _lexical_partners(
        tenant_id=tenant_id, bucket_id=bucket_id, memory_id=memory_id, content=me["content"]
    ):
        similarity.setdefault(other_id, None)
    if not similarity:
        return 0
    rows = {
        r["id"]: r
        for r in Memory.objects.filter(pk__in=list(similarity)).values("id", "content", "created_at", "superseded_by")
    }
    params: list = []
    for other_id in similarity:
        other = rows.get(other_id)
        if other is None or me["superseded_by"] == other_id or other["superseded_by"] == memory_id:
            continue  # gone, or one already replaced the other: nothing left to review
        older, newer = sorted([me, other], key=lambda r: (r["created_at"], str(r["id"])))
        finding = conflict_detector.detect(older["content"], newer["content"])
        if finding is None:
            continue
        a, b = sorted([memory_id, other_id])  # uuid order == PostgreSQL's uuid order
        params += [tenant_id, bucket_id, a, b, finding.code, finding.reason, finding.score,
                   similarity[other_id], conflict_detector.DETECTOR_VERSION, ConflictStatus.OPEN]  # fmt: skip
    if not params:
        return 0
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO conflict_candidates (tenant_id, bucket_id, memory_a_id, memory_b_id, code, reason, score, "
            "similarity, detector_version, status, resolved_by) VALUES "
            + ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, '')"] * (len(params) // 10))
            # One row per pair (conflict_pair_unique): a pair found again, or resolved, stays as it is.
            + " ON CONFLICT (memory_a_id, memory_b_id) DO NOTHING",
            params,
        )
        return cur.rowcount


def conflicts_scan(*, recorder: JobRecorder, bucket: Bucket | None = None, full: bool = False) -> dict:
    """Store pairs of memories of a bucket that likely contradict each other as open
    :class:`ConflictCandidate` rows for review (the hourly catch-up of the per-write hint).

    Each memory added since the bucket's cursor is compared with its nearest neighbours and
    the memories its probes find by full text, by the detector of ``maintenance/conflict_detector/``;
    pairs already stored (open or resolved) are left as they are. Reads only: no memory changes.
    """
    found = {"conflicts": 0}

    def visit(row: Row, *, tenant_id, bucket_id, exact: bool) -> None:
        near = nearest.nearest(
            tenant_id=tenant_id, bucket_id=bucket_id, memory_id=row.id, k=CONFLICT_K,
            min_similarity=CONFLICT_MIN_SIMILARITY, exact=exact,
        )  # fmt: skip
        found["conflicts"] += _store_conflicts(tenant_id=tenant_id, bucket_id=bucket_id, memory_id=row.id, found=near)

    incremental_scan(job="conflicts", bucket=bucket, full=full, recorder=recorder, visit=visit)
    recorder.add(conflicts=found["conflicts"])
    recorder.set(detector_version=conflict_detector.DETECTOR_VERSION)
    return dict(recorder.counts)


def conflicts_find_for(*, memory_ids: Iterable, exact: bool | None = None) -> dict:
    """The per-write hint: look for conflicts of these (new) memories (``exact``: as
    :func:`maintenance.nearest.nearest`'s)."""
    counts = {"scanned": 0, "conflicts": 0}
    rows = Memory.objects.filter(pk__in=list(memory_ids), embedding__isnull=False)
    for memory_id, tenant_id, bucket_id in rows.values_list("id", "tenant_id", "bucket_id"):
        activity.pause()
        near = nearest.nearest(
            tenant_id=tenant_id, bucket_id=bucket_id, memory_id=memory_id, k=CONFLICT_K,
            min_similarity=CONFLICT_MIN_SIMILARITY, exact=exact,
        )  # fmt: skip
        counts["conflicts"] += _store_conflicts(
            tenant_id=tenant_id, bucket_id=bucket_id, memory_id=memory_id, found=near
        )
        counts["scanned"] += 1
    return counts
