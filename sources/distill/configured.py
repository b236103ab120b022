"""The distiller the settings choose."""

from __future__ import annotations

import logging

from django.conf import settings

from engram_site.providers import llm
from sources.distill.llm import LLMDistiller
from sources.distill.rules import RulesDistiller
from sources.distill.units import Distiller

logger = logging.getLogger(__name__)


def get_distiller(name: str | None = None) -> Distiller:
    """The configured distiller (``ENGRAM_DISTILLER``): rules, or llm when an endpoint is configured."""
    name = (name or settings.ENGRAM_DISTILLER or "rules").lower()
    if name == "llm":
        if llm.configured():
            return LLMDistiller()
        logger.warning("ENGRAM_DISTILLER=llm but no LLM is configured (ENGRAM_LLM_*); using the rules")
    return RulesDistiller()
