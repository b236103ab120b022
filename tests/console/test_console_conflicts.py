"""The console's contradiction review: open pairs side by side, keep both / supersede at once,
merge only after a confirmation."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent
from maintenance.models import ConflictCandidate, ConflictStatus
from memories.models import Memory, MemoryVersion, VersionKind
from memories.services import MemoryInput, memories_ingest

pytestmark = pytest.mark.django_db

QUEUE = "/admin/console/conflicts/"
RESOLVE = "/admin/console/conflicts/resolve/"


def conflict(bucket, first: str, second: str) -> tuple[ConflictCandidate, dict]:
    ids = [
        r.id for r in memories_ingest(bucket=bucket, items=[MemoryInput(content=first), MemoryInput(content=second)])
    ]
    a, b = sorted(ids)
    candidate = ConflictCandidate.objects.create(
        tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory_a_id=a, memory_b_id=b, code="negation",
        reason="The same statement (<smoke>), negated in one memory only.", score=0.8,
    )  # fmt: skip
    return candidate, {"a": a, "b": b}


def test_the_queue_shows_open_pairs_side_by_side_with_content_escaped(admin_client, bucket):
    candidate, ids = conflict(bucket, "I smoke <script>alert(1)</script> cigars.", "I don't smoke cigars.")
    index = admin_client.get("/admin/").content.decode()
    assert "Contradiction review" in index and 'id="open-conflict-count" class="console-badge">1</span>' in index
    page = admin_client.get(QUEUE).content.decode()
    assert f'id="conflict-{candidate.pk}"' in page and "negation" in page
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "(&lt;smoke&gt;)" in page  # the reason is escaped too
    assert f'value="{candidate.pk}:supersede_a"' in page and f'value="{candidate.pk}:merge_b"' in page
    health = admin_client.get("/admin/console/health/").context["report"]
    assert [row.open_conflicts for row in health.tenants] == [1] and health.totals["open_conflicts"] == 1
    ConflictCandidate.objects.filter(pk=candidate.pk).update(status=ConflictStatus.KEPT_BOTH)
    assert 'id="conflicts-empty"' in admin_client.get(QUEUE).content.decode()


def test_keep_both_and_supersede_act_at_once(admin_client, bucket):
    kept, _ = conflict(bucket, "I smoke cigars.", "I don't smoke cigars.")
    response = admin_client.post(RESOLVE, {"pair": f"{kept.pk}:keep_both"})
    assert response.status_code == 302
    kept.refresh_from_db()
    assert kept.status == ConflictStatus.KEPT_BOTH and kept.resolved_by

    superseded, ids = conflict(bucket, "I own a car.", "I don't own a car.")
    assert admin_client.post(RESOLVE, {"pair": f"{superseded.pk}:supersede_a"}).status_code == 302
    assert Memory.objects.get(pk=ids["a"]).superseded_by == ids["b"]
    version = MemoryVersion.objects.get(memory_id=ids["a"], kind=VersionKind.SUPERSEDED)
    assert version.actor_kind == "operator"
    assert AuditEvent.objects.filter(action="conflict.supersede").count() == 1
    # A second decision on a resolved pair changes nothing.
    admin_client.post(RESOLVE, {"pair": f"{superseded.pk}:supersede_b"})
    assert Memory.objects.get(pk=ids["b"]).superseded_by is None


def test_a_supersede_is_undone_from_the_queue(admin_client, bucket):
    candidate, ids = conflict(bucket, "I own a car.", "I don't own a car.")
    admin_client.post(RESOLVE, {"pair": f"{candidate.pk}:supersede_a"})
    page = admin_client.get(QUEUE).content.decode()
    assert f'value="{candidate.pk}:undo"' in page  # the superseded pairs, each with its undo
    assert admin_client.post(RESOLVE, {"pair": f"{candidate.pk}:undo"}).status_code == 302
    assert Memory.objects.get(pk=ids["a"]).superseded_by is None
    assert ConflictCandidate.objects.get(pk=candidate.pk).status == ConflictStatus.OPEN
    event = AuditEvent.objects.get(action="conflict.undo")
    assert event.actor_kind == "operator"
    assert f'value="{candidate.pk}:supersede_a"' in admin_client.get(QUEUE).content.decode()  # open again


def test_merge_changes_nothing_until_confirmed(admin_client, bucket):
    candidate, ids = conflict(bucket, "I like cats.", "I dislike cats.")
    confirm = admin_client.post(RESOLVE, {"pair": f"{candidate.pk}:merge_b"})
    assert confirm.status_code == 200 and b'id="confirm-merge"' in confirm.content
    assert Memory.objects.filter(pk__in=ids.values()).count() == 2
    assert ConflictCandidate.objects.get(pk=candidate.pk).status == ConflictStatus.OPEN
    done = admin_client.post(
        RESOLVE, {"pair": f"{candidate.pk}:merge_b", "confirm": "yes", "content": "I like cats, not their hair."}
    )
    assert done.status_code == 302
    assert not Memory.objects.filter(pk=ids["a"]).exists()
    assert Memory.objects.get(pk=ids["b"]).content == "I like cats, not their hair."
    assert AuditEvent.objects.filter(action="conflict.merge").count() == 1


def test_a_bad_or_unknown_pair_is_refused(admin_client, bucket):
    candidate, _ = conflict(bucket, "I like cats.", "I dislike cats.")
    assert admin_client.post(RESOLVE, {"pair": "999999:keep_both"}).status_code == 404
    assert admin_client.post(RESOLVE, {"pair": "x:keep_both"}).status_code == 404
    assert admin_client.post(RESOLVE, {"pair": f"{10**30}:keep_both"}).status_code == 404
    assert admin_client.get(RESOLVE).status_code == 405
    admin_client.post(RESOLVE, {"pair": f"{candidate.pk}:burn"})
    assert ConflictCandidate.objects.get(pk=candidate.pk).status == ConflictStatus.OPEN
