"""The apps that keep rows about buckets and memories, and what each does to its own rows at each
step of a bucket's and a memory's life.

Merging a bucket, erasing a person's memories or deleting one memory must change rows that the
apps above memories own (graph entities and edges, review candidates, documents), in the same
transaction. memories cannot import those apps, and a signal is the wrong tool for it: a signal
has no order one can rely on, and its receivers' answers are not meant to be read. So each app
that keeps such rows registers one :class:`Participant` in its ``AppConfig.ready``, overriding the
steps it takes part in, and the operation here calls every participant at each of its steps:

- in one declared order, :data:`ORDER`, whatever the order the apps load in (the locks the
  participants take, and the errors a failure reports, come in the same order every time);
- inside the operation's transaction, so a participant's exception rolls the whole operation
  back (the link pass alone calls them after its links are committed);
- through :func:`run` (no answer) or :func:`collect` (counts for the operation's report or plan),
  which refuses a count two participants both answer, or one the report has no field for, rather
  than letting one answer silently replace another.

A notification after the commit that needs no answer (new memories, a memory's new text) stays a
signal (:mod:`memories.signals`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from datetime import datetime

from django.core.exceptions import ImproperlyConfigured

from memories.models import Memory
from tenants.models import Bucket, Tenant

# Who takes part, in the order they are called: the apps that keep rows per bucket or per memory.
# (webhooks keeps none: its subscriptions and deliveries belong to the tenant, and the change
# feed it reads is memories' own.) A new participant adds its app's label here.
ORDER = ("graph", "maintenance", "sources")


class ParticipantError(Exception):
    """A participant answered what no one may answer: a programming error, never the user's."""


class Participant:
    """What one app does to its own rows at each step. A subclass (in the app's
    ``participants.py``) overrides the steps the app takes part in; the others do nothing.
    ``name`` is the app's label, its place in :data:`ORDER`."""

    name: str = ""

    # --- a bucket merge (memories.services.buckets.bucket_merge) ------------------------------------

    def merge_plan(self, *, source: Bucket, target: Bucket) -> dict[str, int]:
        """What merging ``source`` into ``target`` would do to this app's rows, changing nothing:
        counts for the plan (fields of ``BucketMergePlan``)."""
        return {}

    def merge_before(self, *, source: Bucket, target: Bucket) -> dict[str, int]:
        """Before any memory moves: move what the memories' move depends on. Counts for the
        result (fields of ``BucketMergeResult``)."""
        return {}

    def merge_after(
        self, *, source: Bucket, target: Bucket, oldest_moved: datetime | None, memory_ids: list[uuid.UUID]
    ) -> None:
        """Every memory of ``source`` is now in ``target`` (``memory_ids``: those moved, and the
        target's memories that absorbed one): move the rest, recompute what depends on the
        memories. Afterwards no row of this app may name ``source``."""

    # --- deleting and restoring -------------------------------------------------------------------

    def bucket_delete(self, *, bucket: Bucket) -> None:
        """Before a bucket goes with its memories. Rows with a foreign key to the bucket or its
        memories go with them (ON DELETE CASCADE) without this step."""

    def memory_delete(self, *, bucket_id: uuid.UUID, memory_id: uuid.UUID) -> None:
        """Before one memory's row is deleted (a client's or an operator's delete, the purge of an
        expired memory), while what hangs on it is still there. A delete has already copied the
        row into the trash (``memories_deleted``, the same id) when this runs; a purge has not."""

    def memory_restore(self, *, memory: Memory) -> None:
        """A deleted memory is back in ``memories``, under its id; its trash row
        (``memories_deleted``) is deleted after this step, so what a participant kept of the
        memory while it was in the trash can still hang on it. (New memories, restored ones
        included, are announced after the commit by ``signals.memories_created``.)"""

    def memories_absorb(self, *, mapping: dict[uuid.UUID, uuid.UUID]) -> None:
        """Each memory of ``mapping``'s keys is being merged into the memory it maps to, and is
        deleted next: move what hangs on an absorbed memory onto its survivor."""

    # --- links (maintenance's link pass, maintenance.services.links) ---------------------------------

    def links_recorded(self, *, bucket: Bucket) -> dict[str, int]:
        """The link pass recorded new links between ``bucket``'s memories (committed; each
        participant's writes make their own transactions): recompute what derives from them.
        Counts for the pass (``superseded``: memories marked superseded)."""
        return {}

    # --- erasure (memories.services.erasure.memories_erase) -----------------------------------------

    def erasure_lock(
        self, *, tenant: Tenant, bucket_id: uuid.UUID | None, bucket_ids: list[uuid.UUID], fields: dict[str, str]
    ) -> None:
        """Before the erasure chooses its memories (``fields``: the values all to match, in
        ``bucket_id`` or, None, every bucket; ``bucket_ids``: the buckets holding such memories):
        keep this app's writers of such memories out until the erasure commits."""

    def erase(
        self, *, tenant: Tenant, bucket_id: uuid.UUID | None, memory_ids: list[uuid.UUID], fields: dict[str, str]
    ) -> dict[str, int]:
        """Before the erased memories (live and deleted) go: delete what this app keeps about
        them or what names the erased values. Counts for the report (fields of ``ErasureReport``)."""
        return {}


_registered: dict[str, Participant] = {}


def register(participant: Participant) -> None:
    """Take part in every operation from now on (called from the app's ``AppConfig.ready``).
    Registering the same participant again is harmless; another one under a taken name, or a
    name :data:`ORDER` does not list, is refused."""
    if participant.name not in ORDER:
        raise ImproperlyConfigured(
            f"Participant {participant.name!r} is not in memories.participants.ORDER: add it there, in its place."
        )
    current = _registered.get(participant.name)
    if current is not None and type(current) is not type(participant):
        raise ImproperlyConfigured(f"Two participants are named {participant.name!r}: {current!r}, {participant!r}.")
    _registered[participant.name] = participant


def participants() -> list[Participant]:
    """The registered participants, in :data:`ORDER`."""
    return [_registered[name] for name in ORDER if name in _registered]


def run(step: Callable, **kwargs) -> None:
    """Call ``step`` (a method of :class:`Participant`, e.g. ``Participant.merge_after``) on every
    participant, in order, in the caller's transaction. An exception propagates."""
    for participant in participants():
        getattr(participant, step.__name__)(**kwargs)


def collect(step: Callable, *, reported: Iterable[str], **kwargs) -> dict[str, int]:
    """Call ``step`` on every participant, in order, and combine their counts into one dict.
    Each count has one owner: a name answered by two participants, or one not in ``reported``
    (the counts the operation reports), raises :class:`ParticipantError`."""
    reported = frozenset(reported)
    combined: dict[str, int] = {}
    owners: dict[str, str] = {}
    for participant in participants():
        for name, count in (getattr(participant, step.__name__)(**kwargs) or {}).items():
            if name not in reported:
                raise ParticipantError(f"{participant.name}.{step.__name__} answered {name!r}, which is not reported.")
            if name in combined:
                raise ParticipantError(
                    f"{participant.name}.{step.__name__} and {owners[name]}.{step.__name__} both answered {name!r}."
                )
            combined[name], owners[name] = count, participant.name
    return combined
