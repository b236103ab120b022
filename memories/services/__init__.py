"""The write gateway of the memories table: every insert, update and delete of a memory row
happens in this package, and nowhere else (tests/platform/test_architecture.py checks it).

One module per kind of change:

- :mod:`~memories.services.ingest` — new memories (dedup, derived columns, sequence context);
- :mod:`~memories.services.edits` — a memory's edit and delete, audited in the same transaction;
- :mod:`~memories.services.history` — the version each change of a memory records;
- :mod:`~memories.services.feed_writer` — the change-feed event each change records, the expiry events and the
  feed's retention (memories/feed_reader.py reads the feed);
- :mod:`~memories.services.lifecycle` — deleted memories kept restorable, restoring, the purge job;
- :mod:`~memories.services.enrichment` — derived columns a write could not compute;
- :mod:`~memories.services.enrichment_failures` — rows a derived step keeps failing on (for
  every step, the graph's and classification's included): their records, backoff and retry;
- :mod:`~memories.services.merge` — one memory absorbing another, a bucket's rows moving;
- :mod:`~memories.services.transfer` — a bucket's memories exported and imported as JSON Lines;
- :mod:`~memories.services.buckets` — creating, changing, deleting and merging buckets (their
  memories and what the apps above hang on them, through their participants);
- :mod:`~memories.services.erasure` — erasing every memory of a person's identifier, with what
  is kept about them (the apps above through their participants);
- :mod:`~memories.services.blocks` — memory blocks: conditional writes (compare-and-set on their
  version), their history, a bucket merge's move and an agent's erasure;
- :mod:`~memories.services.links`, :mod:`~memories.services.topics`,
  :mod:`~memories.services.classification`, :mod:`~memories.services.supersession`,
  :mod:`~memories.services.access` — the columns other apps and jobs maintain.

Two change no row and serve every change: :mod:`~memories.services.signalling` (the after-commit
signals, sent so a receiver's failure never fails the write) and
:mod:`~memories.services.stats_cache` (the search statistics told what was written or moved).

Other apps never write the table themselves: they call these functions, learn about
changes from :mod:`memories.signals` (and :mod:`memories.hooks` for background work), and
change their own rows inside these functions' transactions as participants
(:mod:`memories.participants`).
"""

from memories.services.edits import EDITABLE_FIELDS, memories_delete, memory_delete, memory_update
from memories.services.enrichment import (
    ENRICHMENT_KINDS,
    EnrichmentReport,
    memories_enrich_all_pending,
    memories_enrich_pending,
    pending_enrichment_count,
)
from memories.services.erasure import ERASURE_FIELDS, ErasureReport, memories_erase
from memories.services.ingest.context import CONTEXT_PREDECESSORS, run_sequence_id
from memories.services.ingest.derived import document_lemmas, join_context
from memories.services.ingest.insert import constraint_name, memories_ingest
from memories.services.ingest.locks import hold_bucket
from memories.services.ingest.rows import Carried, IngestResult, MemoryInput
from memories.services.lifecycle import PurgeReport, memories_purge, memory_restore
from memories.services.transfer import ImportReport, memories_export, memories_import

__all__ = [
    "CONTEXT_PREDECESSORS",
    "Carried",
    "EDITABLE_FIELDS",
    "ENRICHMENT_KINDS",
    "ERASURE_FIELDS",
    "EnrichmentReport",
    "ErasureReport",
    "ImportReport",
    "IngestResult",
    "MemoryInput",
    "constraint_name",
    "document_lemmas",
    "hold_bucket",
    "join_context",
    "memories_enrich_all_pending",
    "memories_enrich_pending",
    "memories_erase",
    "memories_export",
    "memories_import",
    "memories_ingest",
    "memories_delete",
    "memories_purge",
    "memory_restore",
    "PurgeReport",
    "memory_delete",
    "memory_update",
    "pending_enrichment_count",
    "run_sequence_id",
]
