"""The optional LLM distiller (``ENGRAM_DISTILLER=llm``): the statements from an OpenAI-compatible
endpoint, the rules when it fails."""

from __future__ import annotations

import json
import logging
import re

from engram_site.providers import llm
from sources.distill.rules import RulesDistiller
from sources.distill.statements import bounded, unique
from sources.distill.units import Distiller, DistillResult, Statement, Unit

logger = logging.getLogger(__name__)

LLM_MAX_STATEMENTS = 50

_LLM_SYSTEM = """You turn text into memories for an AI assistant's long-term memory.
Return the facts stated in the TEXT as a JSON object {"statements": ["...", ...]}: each statement one
self-contained fact that can be understood on its own, in the TEXT's language. Rules:
- Drop greetings, thanks, filler, small talk and questions that carry no information.
- Keep every date, number, name and place exactly as written; never invent facts.
- Replace pronouns with what they refer to when the TEXT or its context makes it clear.
- If SPEAKER is given, write the speaker's name instead of "I", "me", "my".
- A short answer to the previous message's question becomes a full statement.
- An empty list is a valid answer. Return only the JSON object."""


class LLMDistiller:
    def __init__(self, fallback: Distiller | None = None):
        self._llm = llm
        self.fallback = fallback or RulesDistiller()
        self.name = f"llm:{llm.model_name()}"

    def _prompt(self, unit: Unit) -> str:
        parts = []
        if unit.title:
            parts.append(f"TITLE: {unit.title}")
        if unit.heading:
            parts.append(f"SECTION: {unit.heading}")
        if unit.role:
            parts.append(f"ROLE: {unit.role}")
        if unit.speaker:
            parts.append(f"SPEAKER: {unit.speaker}")
        if unit.previous_text:
            parts.append(f"PREVIOUS MESSAGE ({unit.previous_role}): {unit.previous_text[:2000]}")
        parts.append(f"TEXT:\n{unit.text}")
        return "\n".join(parts)

    def _parse(self, reply: str) -> list[str]:
        text = reply.strip()
        fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
        if fenced:
            text = fenced.group(1).strip()
        if not text.startswith(("{", "[")):
            start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
            if start < 0:
                raise ValueError("no JSON in the answer")
            text = text[start:]
        data = json.loads(text)
        items = data.get("statements") if isinstance(data, dict) else data
        if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
            raise ValueError("statements must be a list of strings")
        return [s.replace("\x00", "").strip() for s in items if s.strip()][:LLM_MAX_STATEMENTS]

    def distill(self, unit: Unit) -> DistillResult:
        try:
            reply = self._llm.chat(
                [{"role": "system", "content": _LLM_SYSTEM}, {"role": "user", "content": self._prompt(unit)}],
                max_tokens=2048,
            )
            texts = self._parse(reply)
        except (self._llm.LLMUnavailable, ValueError) as exc:
            logger.warning("LLM distiller failed (%s); falling back to %s", exc, self.fallback.name)
            result = self.fallback.distill(unit)
            result.by = f"{self.fallback.name} (llm fallback)"
            return result
        statements = unique([Statement(bounded(t)) for t in texts])
        return DistillResult(statements=statements, dropped=0, by=self.name)
