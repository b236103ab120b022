"""How maintenance bookkeeping follows the memories table."""

from __future__ import annotations

from django.dispatch import receiver

from memories import signals


@receiver(signals.memories_absorbing)
def move_candidates_to_survivors(sender, *, mapping, **kwargs):
    # Inside the merge's transaction: an error here rolls the merge back.
    from maintenance.services import duplicate_candidates_repoint

    duplicate_candidates_repoint(mapping=mapping)
