"""Importing the settings has no side effect on the database, and test-only defaults come from
the test settings (engram_site/settings_test.py), never from sniffing ``sys.modules``."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import psutil
import pytest
from django.conf import settings

from tests.support import ROOT, base_env

# Import everything a process loads before its first query: the settings, the apps, the WSGI
# application and the Celery app. Then, only then, connect.
IMPORT_THEN_CONNECT = """
import json, os, sys
from pathlib import Path
import django
django.setup()
import engram_site.celery, engram_site.wsgi
from django.db import connection
home = Path(os.environ["ENGRAM_HOME"])
before = {"pgdata": (home / "pgdata").exists(), "holders": (home / "pgdata.holders").exists()}
if sys.argv[1] == "connect":
    connection.ensure_connection()
print(json.dumps({"before": before, "host": connection.settings_dict["HOST"]}))
"""

TEST_DEFAULTS = (
    "ENGRAM_PRELOAD_MODELS",
    "ENGRAM_ACCESS_BACKGROUND",
    "ENGRAM_STATS_BACKGROUND",
    "ENGRAM_SEARCH_PARALLEL",
)


def postgres_processes_of(home) -> list[int]:
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if str(home) in cmdline and "postgres" in (process.info["name"] or "") + cmdline:
            found.append(process.pid)
    return found


def run_in_fresh_process(home, action: str) -> dict:
    env = base_env(ENGRAM_HOME=str(home), ENGRAM_PRELOAD_MODELS="0")
    env.pop("DATABASE_URL", None)
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_THEN_CONNECT, action],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_importing_settings_and_entry_points_starts_no_postgres_until_the_first_connection(pg_home):
    # Nothing is started or contacted by imports: no data directory, no holder, no server.
    result = run_in_fresh_process(pg_home, "import")
    assert result == {"before": {"pgdata": False, "holders": False}, "host": ""}
    assert not (pg_home / "pgdata").exists()
    assert postgres_processes_of(pg_home) == []

    # The first connection starts the embedded server and fills in where it listens; the
    # process, its only holder, stops it again when it exits.
    result = run_in_fresh_process(pg_home, "connect")
    assert result["before"] == {"pgdata": False, "holders": False}
    assert result["host"]
    assert (pg_home / "pgdata" / "PG_VERSION").exists()
    assert postgres_processes_of(pg_home) == []


def test_the_settings_do_not_look_at_sys_modules():
    for name in ("settings.py", "settings_test.py"):
        tree = ast.parse((ROOT / "engram_site" / name).read_text())
        attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        assert "modules" not in attributes and "TESTING" not in names, name


@pytest.mark.slow
def test_production_defaults_hold_even_with_pytest_imported():
    env = base_env()
    for name in TEST_DEFAULTS:
        env.pop(name, None)
    code = (
        "import json, pytest; from engram_site import settings; "
        f"print(json.dumps([getattr(settings, name) for name in {TEST_DEFAULTS!r}]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [True, True, True, True]


def test_the_test_settings_are_in_effect():
    assert settings.SETTINGS_MODULE == "engram_site.settings_test"
    for name in TEST_DEFAULTS:
        if os.environ.get(name) in (None, ""):
            assert getattr(settings, name) is False, name
