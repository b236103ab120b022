"""Signals the write gateway sends after the transaction commits: notifications that need no
answer, which the apps above, and memories itself, listen to (connected in AppConfig.ready).
A receiver's failure is logged and does not undo the committed write
(memories.services.signalling.send_safely).

What the apps above must do to their own rows *inside* an operation (a bucket merge, an erasure,
a memory's delete or absorption) is not a signal: they are participants
(:mod:`memories.participants`), called in order, and their failure rolls the operation back."""

from django.dispatch import Signal

# bucket_id, memory_ids: new memories were stored, or a deleted one restored (restored=True).
# The memories app's own receiver queues their enrichment (memories/receivers.py).
memories_created = Signal()
# bucket_id, memory_id: a memory's content or time changed (derived structures must follow).
memory_changed = Signal()
# stage, memory_ids: an operator retried a failed enrichment stage for these memories; the
# memories app's receiver queues it (the graph's and maintenance's stages through
# memories.hooks.register_retry).
enrichment_retried = Signal()
