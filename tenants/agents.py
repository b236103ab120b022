"""What a token held to agents may write (docs/API.md, "Tokens held to agents").

What it may read is :class:`tenants.models.AgentRestriction`'s (``q``, ``sql``); these checks
turn a write it may not make into a clear error before anything changes.
"""

from __future__ import annotations

from engram_site.exceptions import DomainError, Forbidden
from tenants.models import AgentRestriction


def write_agent(agents: AgentRestriction | None, agent_id: str | None) -> str | None:
    """The agent a new row written by the token is stored under: ``agent_id`` as given for a
    token not held to agents; else the one given, which must be one of the token's, or, when
    none is given, the token's only agent. 400 ``agent_required`` when none is given and the
    token has several; 403 ``agent_forbidden`` for an agent not its own."""
    if agents is None:
        return agent_id
    if agent_id is None:
        if len(agents.agent_ids) == 1:
            return agents.agent_ids[0]
        raise DomainError(
            "This token is held to several agents: say which one in agent_id.",
            code="agent_required",
            extra={"errors": {"agent_id": ["Required with a token held to several agents."]}},
        )
    if agent_id not in agents.agent_ids:
        raise Forbidden(f"This token may not write as agent {agent_id!r}.", code="agent_forbidden")
    return agent_id


def check_writable(agents: AgentRestriction | None, agent_id: str | None) -> None:
    """403 ``agent_forbidden`` unless the token may change (edit, delete, restore) a stored row
    of ``agent_id``. A shared row (no agent) is read-only to a token held to agents; another
    agent's row never gets here, since the token cannot read it (404)."""
    if agents is not None and not agents.can_write(agent_id):
        raise Forbidden(
            "This token is held to agents and may not change a shared memory (one without an agent_id).",
            code="agent_forbidden",
        )


def refuse_agent_held(token, what: str) -> None:
    """403 ``agent_forbidden`` for a token held to agents: ``what`` (creating or changing a
    bucket) touches what every agent's memories share."""
    if token.agents is not None:
        raise Forbidden(
            f"A token held to agents cannot {what}: it holds every agent's memories.", code="agent_forbidden"
        )
