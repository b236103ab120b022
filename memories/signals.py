"""Signals the apps above memories listen to (connected in their AppConfig.ready): notifications,
sent after the transaction commits, that need no answer. A receiver's failure is logged and does
not undo the committed write (memories.services.signalling.send_safely).

What the apps above must do to their own rows *inside* an operation (a bucket merge, an erasure,
a memory's delete or absorption) is not a signal: they are participants
(:mod:`memories.participants`), called in order, and their failure rolls the operation back."""

from django.dispatch import Signal

# bucket_id, memory_ids: new memories were stored (or a deleted one restored).
memories_created = Signal()
# bucket_id, memory_id: a memory's content or time changed (derived structures must follow).
memory_changed = Signal()
