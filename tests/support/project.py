"""Where the project is, and which packages are its apps: the root packages of the import
contracts in pyproject.toml, so that a new app is checked by the tests that walk the code the
day it joins the contracts."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS: tuple[str, ...] = tuple(
    tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
)
