"""The code blocks of the documentation, for the tests that run them (docs/INTEGRATIONS.md)."""

from __future__ import annotations

import re
from pathlib import Path


def code_blocks(path: Path, heading: str, language: str = "python") -> list[str]:
    """The ``language`` blocks of the section of ``path`` whose ``##`` heading starts with
    ``heading`` (up to the next ``##`` heading)."""
    text = path.read_text(encoding="utf-8")
    sections = re.split(r"^## ", text, flags=re.MULTILINE)
    (section,) = [s for s in sections if s.startswith(heading)]
    return re.findall(rf"^```{language}\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)
