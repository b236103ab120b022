"""The distiller's part of memories' key documents (memories.keys; registered in
SourcesConfig.ready): the statements the rules distiller makes of a memory.

A memory is distilled as one message of a conversation: filler dropped, fragments joined, and
in a transcript line ("Caroline: I went to a support group yesterday") first person resolved
to its speaker ("Caroline went to a support group yesterday"). A memory a source already
distilled is a statement: it is its own. The rules distiller always (never the LLM one):
keys are built without a network. Only the first :data:`MAX_DISTILLED_CHARS` of a memory are
distilled, which bounds the parse (the key keeps fewer characters of statements anyway).

The distiller opens every item of a list with the line that introduced it ("The usual suspects:
keep-alive race…", "The usual suspects: pool exhaustion…"), so that each is a statement on its
own; a key says the line once: it would otherwise fill the key's room for statements with one
sentence (an assistant's answer of five points said its lead-in five times).
"""

from __future__ import annotations

import logging
import uuid

from memories.keys import KeyFacts
from memories.models import Memory
from memories.text import transcript_speaker
from sources.distill.rules import RulesDistiller
from sources.distill.units import Unit
from sources.models import SourceChunkMemory

logger = logging.getLogger(__name__)

MAX_DISTILLED_CHARS = 4_000


def said_once(statements: list[str]) -> list[str]:
    """``statements`` with a list's introducing line ("Intro: item") kept only where it is
    first said, as a statement of its own or opening an item."""
    out: list[str] = []
    said: list[str] = []  # lines said so far that can introduce a list, without their colon
    for statement in statements:
        intro = next((line for line in said if statement.startswith(line + ": ")), None)
        item = statement[len(intro) + 2 :].strip() if intro is not None else ""
        if item:
            out.append(item[0].upper() + item[1:])
            continue
        out.append(statement)
        said.append(statement.strip().rstrip(":."))
        said += [statement[:at] for at in range(len(statement)) if statement.startswith(": ", at)]
    return out


def key_facts(memories: list[Memory]) -> dict[uuid.UUID, KeyFacts]:
    ids = [m.pk for m in memories]
    distilled = set(SourceChunkMemory.objects.filter(memory_id__in=ids).values_list("memory_id", flat=True))
    distiller = RulesDistiller()
    units: dict[uuid.UUID, Unit] = {}
    for memory in memories:
        if memory.pk in distilled:
            continue
        speaker = transcript_speaker(memory.content) if memory.attributed_to is None else None
        text = memory.content[len(speaker) + 1 :].strip() if speaker else memory.content
        units[memory.pk] = Unit(
            kind="conversation", text=text[:MAX_DISTILLED_CHARS], role=memory.attributed_to, speaker=speaker
        )
    try:
        distiller.prepare(list(units.values()))  # the batch's sentences, parsed together
    except Exception:  # each memory is then parsed on its own
        logger.exception("splitting %d memories into sentences failed", len(units))
    facts: dict[uuid.UUID, KeyFacts] = {}
    for memory in memories:
        if memory.pk in distilled:
            facts[memory.pk] = KeyFacts(statements=[memory.content])
            continue
        try:
            statements = said_once([s.text for s in distiller.distill(units[memory.pk]).statements])
        except Exception:  # the memory's own text stands in (memories.keys.document)
            logger.exception("distilling memory %s for its key failed", memory.pk)
            continue
        facts[memory.pk] = KeyFacts(statements=statements)
    return facts
