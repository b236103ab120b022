"""The embedded broker: kombu's filesystem transport, with publishing and claiming
made safe for several processes on one machine.

Used when neither ``CELERY_BROKER_URL`` nor ``REDIS_URL`` is set, so that
``./engram serve`` runs real background work with no server to install. A
message is one file in ``$ENGRAM_BROKER_DIR/queue``; a consumer claims it with
an atomic ``rename`` into ``claimed/`` (only one process can win a rename),
reads it and deletes it. Two changes to the stock transport, both about
atomicity:

* **Publishing** writes the message under ``tmp/`` and renames it into
  ``queue/``. The stock transport writes in place, so a consumer polling at the
  wrong moment could pick up a half-written file (an empty or truncated JSON
  payload) and lose it.
* **Claiming** renames into ``claimed/`` on the same filesystem. The stock
  transport moves messages to the system temp folder, which is often another
  filesystem: ``shutil.move`` then copies and deletes, and two consumers can
  both copy the same message before either deletes it.

Delivery is at most once: a worker killed with SIGKILL loses the messages it
had claimed. That is acceptable because the broker only carries *hints*; the
database is the queue of record and the periodic sweeps redo whatever a lost
message would have done (docs/MAINTENANCE.md).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import time
import uuid
from pathlib import Path
from queue import Empty

from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads
from kombu.utils.objects import cached_property

logger = logging.getLogger(__name__)

FOLDERS = ("queue", "tmp", "claimed", "control")


def transport_options(root: Path) -> dict:
    """kombu transport options for a broker kept in ``root``. Creates the folders
    when possible; a folder that cannot be created makes publishing fail later
    (which callers tolerate), never the process start."""
    for name in FOLDERS:
        try:
            (root / name).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            logger.warning("cannot create broker folder %s: %s", root / name, exc)
    return {
        "data_folder_in": str(root / "queue"),
        "data_folder_out": str(root / "queue"),
        "tmp_folder": str(root / "tmp"),
        "processed_folder": str(root / "claimed"),
        "control_folder": str(root / "control"),
        # How often an idle worker lists the queue folder.
        "polling_interval": 0.5,
    }


def _table(raw: bytes) -> list:
    """An exchange table's entries; an empty file (just created) holds none."""
    return [filesystem.exchange_queue_t(*entry) for entry in loads(bytes_to_str(raw))] if raw.strip() else []


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        # Wall-clock nanoseconds first so that a sorted listing is FIFO across
        # processes and across reboots (the stock transport uses the monotonic clock).
        name = f"{time.time_ns():020d}_{uuid.uuid4().hex}.{queue}.msg"
        tmp = os.path.join(self.tmp_folder, name)
        try:
            with open(tmp, "wb") as handle:
                handle.write(str_to_bytes(dumps(payload)))
            os.rename(tmp, os.path.join(self.data_folder_out, name))
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise filesystem.ChannelError(f"cannot publish to {self.data_folder_out!r}: {exc}") from exc

    def _get(self, queue):
        # The listing is kept between calls and re-read only when used up: a backlog of
        # N messages (workers down for a while) drains in O(N) directory reads, not O(N^2).
        backlog = self._backlogs.setdefault(queue, collections.deque())
        for attempt in range(2):
            if not backlog:
                if attempt:
                    break
                backlog.extend(self._listing(queue))
            while backlog:
                payload = self._claim(backlog.popleft())
                if payload is not None:
                    return payload
        raise Empty()

    def _listing(self, queue) -> list[str]:
        wanted = f"{queue}.msg"
        try:
            names = os.listdir(self.data_folder_in)
        except FileNotFoundError:
            return []
        return sorted(n for n in names if n.partition(".")[2] == wanted)

    def _claim(self, name: str):
        claimed = os.path.join(self.processed_folder, name)
        try:
            # The claim: exactly one process wins the rename; the others get ENOENT.
            os.rename(os.path.join(self.data_folder_in, name), claimed)
        except OSError:
            return None
        try:
            with open(claimed, "rb") as handle:
                payload = handle.read()
        finally:
            with contextlib.suppress(OSError):
                os.unlink(claimed)
        try:
            return loads(bytes_to_str(payload))
        except ValueError:
            logger.error("dropping unreadable broker message %s", name)
            return None

    # --- the exchange table (control/<exchange>.exchange): which queues an exchange routes to -----
    # The stock transport creates the file (opened "wb") before it locks it: a process declaring
    # the same queue in between reads an empty file and fails to parse it (seen with three
    # consumers starting at once). Here the file is created and locked in one step, read under
    # the lock, and an empty file is an empty table.

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        file = self._exchange_file(exchange)
        entry = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        try:
            self.control_folder.mkdir(exist_ok=True)
            with os.fdopen(os.open(file, os.O_RDWR | os.O_CREAT, 0o644), "r+b", buffering=0) as handle:
                filesystem.lock(handle, filesystem.LOCK_EX)
                try:
                    queues = _table(handle.read())
                    if entry not in queues:
                        handle.seek(0)
                        handle.truncate()
                        handle.write(str_to_bytes(dumps([entry, *queues])))
                finally:
                    filesystem.unlock(handle)
        except OSError as exc:
            raise filesystem.ChannelError(f"Cannot open {file}") from exc

    def get_table(self, exchange):
        file = self._exchange_file(exchange)
        try:
            with open(file, "rb") as handle:
                filesystem.lock(handle, filesystem.LOCK_SH)
                try:
                    return _table(handle.read())
                finally:
                    filesystem.unlock(handle)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise filesystem.ChannelError(f"Cannot open {file}") from exc

    @cached_property
    def _backlogs(self) -> dict:
        return {}

    @property
    def tmp_folder(self) -> str:
        return self.transport_options.get("tmp_folder") or os.path.join(self.data_folder_out, os.pardir, "tmp")


class Transport(filesystem.Transport):
    Channel = Channel
    # Not shared with the stock filesystem transport's in-process state.
    global_state = filesystem.virtual.BrokerState()
    driver_name = "engram-filesystem"
    # No host: without this kombu warns "No hostname was supplied" on every connection.
    default_connection_params: dict = {}
