"""What happens after memories are committed: asynchronous enrichment.

Called from ``transaction.on_commit`` by the write services, so nothing is
queued for a write that rolled back.
"""

from __future__ import annotations

import logging
import uuid

logger = logging.getLogger(__name__)


def after_ingest(*, bucket_id: uuid.UUID, memory_ids: list[uuid.UUID]) -> None:
    """Queue the background work new memories need. Never raises: a broker
    outage must not turn a committed write into an error."""
    logger.debug("ingested %d memories into bucket %s", len(memory_ids), bucket_id)
