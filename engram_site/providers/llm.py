"""The optional LLM provider: an OpenAI-compatible chat endpoint, off by default.

Configured by ``ENGRAM_LLM_BASE_URL`` (e.g. ``http://127.0.0.1:11434/v1``),
``ENGRAM_LLM_MODEL`` and, when the endpoint wants one, ``ENGRAM_LLM_API_KEY``.
This module is the only place that talks to a language model; nothing on the
write or read path does.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request

from django.conf import settings

logger = logging.getLogger(__name__)


class LLMUnavailable(RuntimeError):
    pass


def configured() -> bool:
    return bool(settings.ENGRAM_LLM_BASE_URL and settings.ENGRAM_LLM_MODEL)


def model_name() -> str:
    return settings.ENGRAM_LLM_MODEL


def chat(messages: list[dict], *, max_tokens: int = 1024) -> str:
    """The assistant's reply to ``messages`` (temperature 0), or LLMUnavailable."""
    if not configured():
        raise LLMUnavailable("no LLM configured (ENGRAM_LLM_BASE_URL and ENGRAM_LLM_MODEL)")
    url = settings.ENGRAM_LLM_BASE_URL.rstrip("/") + "/chat/completions"
    body = json.dumps(
        {"model": settings.ENGRAM_LLM_MODEL, "messages": messages, "temperature": 0, "max_tokens": max_tokens}
    ).encode()
    headers = {"Content-Type": "application/json"}
    if settings.ENGRAM_LLM_API_KEY:
        headers["Authorization"] = f"Bearer {settings.ENGRAM_LLM_API_KEY}"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=settings.ENGRAM_LLM_TIMEOUT) as response:
            payload = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode(errors="replace")
        raise LLMUnavailable(f"LLM endpoint answered {exc.code}: {detail}") from exc
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
        raise LLMUnavailable(f"LLM endpoint unreachable or unreadable: {exc}") from exc
    try:
        return payload["choices"][0]["message"]["content"] or ""
    except (KeyError, IndexError, TypeError) as exc:
        raise LLMUnavailable(f"unexpected LLM response shape: {str(payload)[:300]}") from exc
