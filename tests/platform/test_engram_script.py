"""``./engram``'s install step: it reinstalls when, and only when, what it installs changed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import ROOT

FAKE_PYTHON = """#!/bin/sh
echo "$@" >> "$(dirname "$0")/calls.log"
"""


def _checkout(tmp_path: Path) -> tuple[Path, Path]:
    """The files the install step reads, and a virtualenv whose python only logs its calls."""
    repo = tmp_path / "repo"
    (repo / "clients" / "python").mkdir(parents=True)
    shutil.copy(ROOT / "engram", repo / "engram")
    for requirements in ROOT.glob("requirements*.txt"):
        shutil.copy(requirements, repo / requirements.name)
    shutil.copy(ROOT / "clients" / "python" / "pyproject.toml", repo / "clients" / "python" / "pyproject.toml")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(FAKE_PYTHON)
    (venv / "bin" / "python").chmod(0o755)
    return repo, venv


def _installs(repo: Path, venv: Path) -> int:
    """Run ``./engram manage check``; how many pip installs it made."""
    log = venv / "bin" / "calls.log"
    log.unlink(missing_ok=True)
    env = {**os.environ, "ENGRAM_VENV": str(venv), "ENGRAM_HOME": str(repo / "var")}
    subprocess.run([str(repo / "engram"), "manage", "check"], cwd=repo, env=env, check=True, capture_output=True)
    calls = log.read_text().splitlines()
    assert calls[-1] == "manage.py check"  # then it ran the command
    return sum(call.startswith("-m pip install") for call in calls)


@pytest.mark.slow
def test_the_install_is_redone_when_the_clients_pyproject_changes(tmp_path):
    repo, venv = _checkout(tmp_path)
    assert _installs(repo, venv) > 0  # first run
    assert _installs(repo, venv) == 0  # nothing changed
    # requirements.txt installs the client (-e ./clients/python): its dependencies are in here.
    pyproject = repo / "clients" / "python" / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n# a dependency added\n")
    assert _installs(repo, venv) > 0
    assert _installs(repo, venv) == 0
    (repo / "requirements.txt").write_text((repo / "requirements.txt").read_text() + "\n")
    assert _installs(repo, venv) > 0
