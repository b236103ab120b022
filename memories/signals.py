"""Signals other apps (the graph) listen to. Sent after the transaction commits."""

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
