"""Signals the write gateway sends after a change commits, sent so that a receiver's failure is
logged and never turns a committed write into an error."""

from __future__ import annotations

import logging

from django.dispatch import Signal

from memories.models import Memory

logger = logging.getLogger(__name__)


def send_safely(signal: Signal, **kwargs) -> None:
    """Receivers run after commit; their failure must not turn a committed write into an error."""
    for receiver, result in signal.send_robust(Memory, **kwargs):
        if isinstance(result, Exception):
            logger.error("%s receiver %r failed: %s", signal, receiver, result)
