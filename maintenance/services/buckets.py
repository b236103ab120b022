"""Bucket merges: review candidates and scan cursors follow (memories.services.buckets.bucket_merge)."""

from __future__ import annotations

import uuid
from datetime import datetime

from maintenance.models import ScanCursor
from maintenance.review import QUEUES
from tenants.models import Bucket


def maintenance_bucket_merge(*, source: Bucket, target: Bucket, oldest_moved: datetime | None) -> dict:
    """Move ``source``'s review pairs (near-duplicates, conflicts) to ``target`` and
    drop its scan cursors.

    The target's cursors are moved back to ``oldest_moved`` (the oldest memory that
    moved), so the hourly near-duplicate, conflict and link scans compare the moved memories
    with the target's own: the database stays the queue of record, nothing depends
    on a hint.
    """
    moved = {queue.counted_as: queue.move(source=source, target=target) for queue in QUEUES}
    ScanCursor.objects.filter(tenant_id=source.tenant_id, bucket_id=source.pk).delete()
    rewound = 0
    if oldest_moved is not None:
        # (oldest_moved, nil uuid): the next scan starts with the oldest moved memory.
        rewound = ScanCursor.objects.filter(
            tenant_id=target.tenant_id, bucket_id=target.pk, position_at__gte=oldest_moved
        ).update(position_at=oldest_moved, position_id=uuid.UUID(int=0))
    return {**moved, "cursors_rewound": rewound}
