"""What a chunk's memories are written with: their identifiers (by the rule an erasure also
follows) and the agents of the token that submitted the source."""

from __future__ import annotations

from datetime import timedelta

from memories.services import MemoryInput
from sources.models import Source, SourceChunk, SourceKind
from tenants.models import AgentRestriction


def chunk_speaker(source: Source, chunk: SourceChunk) -> str | None:
    """Who wrote the message: its ``name``, or for user messages the conversation's speaker."""
    if chunk.name:
        return chunk.name
    return source.options.get("speaker") if chunk.role == "user" else None


def held_options(held_to: AgentRestriction | None) -> dict:
    """The options that remember a submitting token's agents (not part of the content hash)."""
    if held_to is None:
        return {}
    return {"held_to_agents": list(held_to.agent_ids), "held_include_shared": held_to.include_shared}


def submitter_agents(source: Source) -> AgentRestriction | None:
    """The agents of the token that submitted ``source``, when it was held to agents: the
    sequence context of its memories is then drawn only from memories those agents may read,
    as for the token's own writes."""
    options = source.options or {}
    if not options.get("held_to_agents"):
        return None
    return AgentRestriction(tuple(options["held_to_agents"]), bool(options.get("held_include_shared")))


def memory_input(source: Source, chunk: SourceChunk, text: str, position: int) -> MemoryInput:
    options = source.options or {}
    if source.kind == SourceKind.DOCUMENT:
        attributed_to, actor = options.get("attributed_to"), options.get("source_actor_id")
    else:
        attributed_to = chunk.role
        actor = chunk_speaker(source, chunk) or options.get("source_actor_id")
    return MemoryInput(
        content=text,
        attributed_to=attributed_to,
        agent_id=chunk.agent_id or options.get("agent_id"),
        # Without a run, a source's memories form one sequence of their own (sequence context).
        run_id=chunk.run_id or options.get("run_id") or str(source.pk),
        source_actor_id=actor,
        # A microsecond apart within the chunk: memories keep their order across chunks and attempts.
        created_at=chunk.timestamp + timedelta(microseconds=position) if chunk.timestamp else None,
    )
