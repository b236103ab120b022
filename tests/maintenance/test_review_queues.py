"""The review queues' shared machinery (maintenance/review.py), the same for near-duplicates and
conflicts: locking a pair to decide it, and following merges, erasure and bucket merges."""

from __future__ import annotations

import pytest
from django.utils import timezone

from engram_site.exceptions import Conflict, NotFound
from maintenance.models import ConflictStatus, DuplicateStatus
from maintenance.review import CONFLICTS, DUPLICATES, QUEUES
from memories.services.buckets import bucket_create
from tests.factories import write

pytestmark = pytest.mark.django_db

# What each queue's rows need besides the pair, and the status and fields of a decision.
ROW = {
    DUPLICATES.counted_as: {"similarity": 0.95},
    CONFLICTS.counted_as: {"code": "negation", "reason": "negated in one memory only", "score": 0.8},
}
DECIDED = {
    DUPLICATES.counted_as: {"status": DuplicateStatus.KEPT_BOTH},
    CONFLICTS.counted_as: {"status": ConflictStatus.KEPT_BOTH, "resolved_by": "operator"},
}
queues = pytest.mark.parametrize("queue", QUEUES, ids=[q.counted_as for q in QUEUES])


def pair(queue, bucket, x, y, decided: bool = False):
    a, b = sorted([x, y])
    fields = {**ROW[queue.counted_as], **(DECIDED[queue.counted_as] if decided else {})}
    if decided:
        fields[queue.decision[0]] = timezone.now()
    return queue.model.objects.create(tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory_a_id=a, memory_b_id=b,
                                      **fields)  # fmt: skip


@queues
def test_a_pair_is_decided_once(queue, bucket):
    x, y = write(bucket, "I drink coffee.", "I don't drink coffee.", sequence=False)
    waiting = pair(queue, bucket, x, y)
    with queue.deciding(waiting) as locked:
        assert locked.pk == waiting.pk
        queue.model.objects.filter(pk=locked.pk).update(**DECIDED[queue.counted_as])
    with pytest.raises(Conflict) as decided, queue.deciding(waiting):
        pass
    assert decided.value.code == queue.decided_code
    queue.model.objects.filter(pk=waiting.pk).delete()
    with pytest.raises(NotFound), queue.deciding(waiting):
        pass


@queues
def test_an_error_while_deciding_leaves_the_pair_waiting(queue, bucket):
    x, y = write(bucket, "I drink coffee.", "I don't drink coffee.", sequence=False)
    waiting = pair(queue, bucket, x, y)
    with pytest.raises(RuntimeError), queue.deciding(waiting) as locked:
        queue.model.objects.filter(pk=locked.pk).update(**DECIDED[queue.counted_as])
        raise RuntimeError("the merge failed")
    assert queue.model.objects.undecided().filter(pk=waiting.pk).exists()


@queues
def test_a_merge_repoints_pairs_and_drops_a_pair_with_itself(queue, bucket):
    x, y, z = write(bucket, "I drink coffee.", "I drink a lot of coffee.", "I don't drink coffee.", sequence=False)
    with_itself, elsewhere = pair(queue, bucket, x, y), pair(queue, bucket, y, z)
    assert queue.repoint(mapping={y: x}) == 1
    assert not queue.model.objects.filter(pk=with_itself.pk).exists()
    moved = queue.model.objects.get(pk=elsewhere.pk)
    assert {moved.memory_a_id, moved.memory_b_id} == {x, z} and moved.memory_a_id < moved.memory_b_id


@queues
@pytest.mark.parametrize("decided_side", ["survivor", "absorbed"])
def test_when_two_pairs_become_one_the_decision_is_kept(queue, bucket, decided_side):
    x, y, z = write(bucket, "I drink coffee.", "I drink a lot of coffee.", "I don't drink coffee.", sequence=False)
    survivors = pair(queue, bucket, x, z, decided=decided_side == "survivor")
    pair(queue, bucket, y, z, decided=decided_side == "absorbed")
    queue.repoint(mapping={y: x})
    (left,) = queue.model.objects.all()
    assert left.pk == survivors.pk and left.status != queue.model.UNDECIDED
    assert all(getattr(left, name) for name in queue.decision[:1])


@queues
def test_erasure_and_bucket_merges_take_the_pairs_along(queue, bucket, tenant):
    x, y, z = write(bucket, "I drink coffee.", "I don't drink coffee.", "I like tea.", sequence=False)
    pair(queue, bucket, x, y)
    kept = pair(queue, bucket, y, z)
    assert queue.erase(tenant=tenant, memory_ids=[x]) == 1
    assert list(queue.model.objects.values_list("pk", flat=True)) == [kept.pk]
    target = bucket_create(tenant=tenant, name="target")
    assert queue.move(source=bucket, target=target) == 1
    assert queue.model.objects.get(pk=kept.pk).bucket_id == target.pk
