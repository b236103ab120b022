"""What maintenance does to its own rows (review candidates, scan cursors) when buckets and
memories change (memories.participants; registered in MaintenanceConfig.ready). Every step runs
inside the operation's transaction."""

from __future__ import annotations

from maintenance.models import DuplicateCandidate
from maintenance.review import QUEUES
from maintenance.services.buckets import maintenance_bucket_merge
from memories.participants import Participant


class MaintenanceParticipant(Participant):
    name = "maintenance"

    def merge_plan(self, *, source, target):
        # The plan counts near-duplicate pairs only (the contradiction pairs move too, uncounted).
        return {"duplicate_candidates": DuplicateCandidate.objects.for_bucket(source).count()}

    def merge_after(self, *, source, target, oldest_moved, memory_ids):
        maintenance_bucket_merge(source=source, target=target, oldest_moved=oldest_moved)

    def memories_absorb(self, *, mapping):
        for queue in QUEUES:
            queue.repoint(mapping=mapping)

    def erase(self, *, tenant, bucket_id, memory_ids, fields):
        return {queue.counted_as: queue.erase(tenant=tenant, memory_ids=memory_ids) for queue in QUEUES}
