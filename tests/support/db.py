"""The database read back for assertions: a fingerprint of every table (did a refused request
change anything?) and a bucket's knowledge graph. Unlike the rest of tests/support, these need
Django set up."""

from __future__ import annotations

from contextlib import ExitStack

from django.apps import apps
from django.db import connection, transaction

from graph.models import Edge, Entity, Mention
from memories.models import Memory

SNAPSHOT_APPS = {"tenants", "memories", "graph", "maintenance", "audit", "sources", "auth", "admin",
                 "django_celery_beat", "webhooks"}  # fmt: skip
# Written on every authenticated API request (at most once a minute): not a change to tenant data.
VOLATILE_COLUMNS = ["last_used_at"]


def db_snapshot() -> dict[str, tuple[int, str]]:
    """Every table of the apps that hold data: its row count and a hash of its rows."""
    tables = sorted(
        {m._meta.db_table for m in apps.get_models(include_auto_created=True) if m._meta.app_label in SNAPSHOT_APPS}
    )
    state = {}
    with connection.cursor() as cur:
        for table in tables:
            cur.execute(
                f"""
                SELECT count(*), coalesce(md5(string_agg(h, ',' ORDER BY h)), '')
                FROM (SELECT md5((to_jsonb(t) - %s::text[])::text) AS h FROM {connection.ops.quote_name(table)} t) rows
                """,
                [VOLATILE_COLUMNS],
            )
            state[table] = cur.fetchone()
    return state


def assert_unchanged(before: dict, what: str) -> None:
    after = db_snapshot()
    changed = [t for t in before if before[t] != after[t]]
    assert not changed, f"{what} changed the database: {changed}"


def graph_facts(bucket, *, current_only=False) -> set[tuple]:
    """The bucket's edges as (subject, predicate, object) names."""
    edges = Edge.objects.for_bucket(bucket).select_related("subject", "object_entity")
    if current_only:
        edges = edges.current()
    return {(e.subject.name, e.predicate, e.object_entity.name if e.object_entity else e.object_literal) for e in edges}


def graph_snapshot(bucket):
    """Everything extraction decides for a bucket: entities, edges with their validity,
    supersession and links of its memories, the number of mentions."""
    entities = sorted(Entity.objects.for_bucket(bucket).values_list("normalized_name", "type", "mention_count"))
    edges = sorted(
        (e.subject.normalized_name, e.predicate, e.object_entity.normalized_name if e.object_entity else "",
         e.object_literal or "", e.valid_from, e.valid_to, str(e.source_memory_id))
        for e in Edge.objects.for_bucket(bucket).select_related("subject", "object_entity")
    )  # fmt: skip
    memories = sorted(
        (str(m.pk), m.superseded_at, str(m.superseded_by), sorted(m.linked_memory_ids or []))
        for m in Memory.objects.for_bucket(bucket)
    )
    mentions = Mention.objects.filter(bucket_id=bucket.pk).count()
    return entities, edges, memories, mentions


class ModuleRows:
    """Rows made once for a whole test module, rolled back when it ends (or at ``release()``).

    A module-scoped fixture makes its rows inside ``with ModuleRows(django_db_blocker) as held:``
    and yields them. Each test of the module still runs in its own transaction (pytest-django's
    ``db``), a savepoint inside this one, so what a test writes is rolled back after it and the
    next test finds the rows as they were made. For the generated matrices, whose world of a
    dozen kinds of rows took longer to make than most of their tests took to run.

    A transactional test (``django_db(transaction=True)``: a server in another process reads
    committed rows) must not run inside the open transaction: pytest-django runs those last,
    and tests/conftest.py calls ``release_all()`` before each (the module's fixture may still be
    up when one of the same module follows its last test)."""

    _open: list[ModuleRows] = []

    def __init__(self, django_db_blocker):
        self._stack: ExitStack | None = ExitStack()
        self._blocker = django_db_blocker

    def __enter__(self) -> ModuleRows:
        self._stack.enter_context(self._blocker.unblock())
        self._stack.enter_context(transaction.atomic())
        ModuleRows._open.append(self)
        return self

    def release(self) -> None:
        if self._stack is not None:
            ModuleRows._open.remove(self)
            transaction.set_rollback(True)
            stack, self._stack = self._stack, None
            stack.close()

    @classmethod
    def release_all(cls) -> None:
        for held in reversed(cls._open[:]):
            held.release()

    @property
    def held(self) -> bool:
        return self._stack is not None

    def __exit__(self, *exc) -> None:
        self.release()
