"""Signals the apps above memories listen to (connected in their AppConfig.ready). Unless a
comment says otherwise, sent after the transaction commits."""

from django.dispatch import Signal

# bucket_id, memory_ids: new memories were stored.
memories_created = Signal()
# bucket_id, memory_id: a memory's content or time changed (derived structures must follow).
memory_changed = Signal()
# bucket_id, memory_id, graph_state: a memory was deleted (receivers get what they saved before).
memory_deleted = Signal()
# bucket_id, memory_id: about to delete; receivers may return state to get back in memory_deleted.
memory_deleting = Signal()
# mapping {absorbed_id: survivor_id}: sent by memories.merge.memories_absorb inside its
# transaction, before the absorbed rows are deleted. Receivers move what they hang on an
# absorbed memory (graph mentions and edges, review candidates) onto its survivor; an
# exception rolls the whole merge back.
memories_absorbing = Signal()

# --- bucket merges (memories.services.buckets.bucket_merge), sent inside the merge's transaction ------
# source, target: what merging would do, changing nothing. Receivers return a dict of counts
# for the plan (entities, entities_to_merge, duplicate_candidates, sources, sources_to_dedup).
bucket_merge_planning = Signal()
# source, target: before any memory moves. Receivers move what they keep per bucket that the
# memories' move depends on (graph entities) and may return a dict of counts (entities_merged).
bucket_merging = Signal()
# source, target, oldest_moved, memory_ids (moved and absorbing target memories): after every
# memory is in the target. Receivers move the rest (review candidates, documents) and
# recompute what depends on the memories (graph timelines). An exception rolls it all back.
bucket_merged = Signal()

# --- erasure (memories.services.erasure.memories_erase), sent inside the erasure's transaction -----
# tenant, bucket_id (None: every bucket), bucket_ids (those holding matching memories), fields
# ({agent_id, run_id, attributed_to, source_actor_id: value}, all to match): before the erasure
# chooses its memories. Receivers take the locks that keep their own writers of such memories
# out until it commits (the sources app: processing of the documents and conversations it deletes).
erasure_locking = Signal()
# tenant, bucket_id, memory_ids (live and deleted), fields: before the erased rows are deleted.
# Receivers delete what they keep about those memories or what names the erased values, and
# return a dict of counts for the report. An exception rolls the whole erasure back.
memories_erasing = Signal()

# --- links (the memories' ``links`` column), sent by maintenance's link pass after it commits -----
# bucket: the link pass recorded new links in this bucket. A receiver may return how many
# memories it marked superseded (the graph's supersession pass); the pass reports the sum.
links_recorded = Signal()
