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
