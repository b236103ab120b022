"""Tenant scopes (engram_site/scoping.py): a tenant-owned model cannot be read without one.

- every tenant-owned model has the scoped manager, and the list of them is complete;
- outside a scope a query of any of them raises, unless it names its tenant (for_tenant/for_bucket);
- inside ``scope(tenant=A)`` no model shows a row of tenant B, ``scopes_disabled()`` shows both;
- requests, tasks, commands and threads run in the scope of their own tenant, not in the
  lifted scope of the test that calls them (tests/conftest.py lifts it for test bodies).
"""

from __future__ import annotations

import contextlib
import threading
import uuid

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.db.models import Exists, ForeignKey, OneToOneField, OuterRef
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_scopes import get_scope

from audit.services import Actor, audit_record
from engram_site.scoping import (
    ScopeError,
    TenantScopedManager,
    in_this_context,
    scope,
    scopes_disabled,
    tenant_owned_models,
)
from graph.models import Correction, Edge, Entity, Mention, Processed
from maintenance.models import ConflictCandidate, DuplicateCandidate, PendingComparison, ScanCursor
from memories.models import (
    Memory,
    MemoryAccess,
    MemoryEvent,
    MemoryEventTrim,
    NextEmbedding,
)
from memories.services import MemoryInput, memories_ingest, memory_delete, memory_update
from memories.services.blocks import Expected, block_put
from memories.services.buckets import bucket_create
from memories.services.enrichment_failures import failures_record
from memories.services.feedback import feedback_record
from memories.services.keys import memory_keys_build
from memories.services.passages import memory_passages_build
from memories.services.ranking_learning import ranking_learn
from sources.models import SourceChunk, SourceChunkMemory, TrashedChunkLink
from sources.services.submit import source_submit_document
from tenants import services
from tenants.models import OperatorMembership, Tenant, TenantUsage
from tests.factories import make_client, make_operator
from webhooks.models import WebhookAttempt, WebhookDelivery, WebhookSubscription

PROJECT_APPS = {"audit", "tenants", "memories", "graph", "sources", "maintenance", "webhooks", "console", "mcp_server"}


def _label(model) -> str:
    return model._meta.label


def _project_models():
    return [m for m in apps.get_models() if m._meta.app_label in PROJECT_APPS]


def _owned_by_relations() -> set[str]:
    """The models whose rows belong to a tenant, found from the schema alone: a relation to
    Tenant, or to a model whose rows do (the oracle the scoped managers are checked against)."""
    owned: set[str] = set()
    changed = True
    while changed:
        changed = False
        for model in _project_models():
            if model is Tenant or _label(model) in owned:
                continue
            for field in model._meta.get_fields():
                if isinstance(field, (ForeignKey, OneToOneField)) and (
                    field.related_model is Tenant or _label(field.related_model) in owned
                ):
                    owned.add(_label(model))
                    changed = True
                    break
    return owned


TENANT_OWNED = sorted(_label(m) for m in tenant_owned_models())


# --- the list of tenant-owned models --------------------------------------------------------------


def test_every_model_with_rows_of_a_tenant_has_the_scoped_default_manager():
    assert set(TENANT_OWNED) == _owned_by_relations()
    for label in TENANT_OWNED:
        model = apps.get_model(label)
        assert isinstance(model.objects, TenantScopedManager), label
        assert model._default_manager is model.objects, label


# --- outside a scope -------------------------------------------------------------------------------


def _unscoped_reads(model):
    manager = model.objects
    yield "filter", lambda: manager.filter(pk=None)
    yield "get", lambda: manager.get(pk=None)
    yield "count", lambda: manager.count()
    yield "exists", lambda: manager.exists()
    yield "iterate all()", lambda: list(manager.all())
    yield "values", lambda: manager.values("pk")
    yield "update", lambda: manager.update()
    yield "delete", lambda: manager.all().delete()
    yield "subquery", lambda: Exists(manager.all())
    yield "order_by", lambda: manager.order_by("pk")


@pytest.mark.parametrize("label", TENANT_OWNED)
def test_an_unscoped_query_of_a_tenant_owned_model_raises(label):
    model = apps.get_model(label)
    with scope(tenant=None):  # the test body's lifted scope (tests/conftest.py) put back
        answered = []
        for what, read in _unscoped_reads(model):
            try:
                read()
            except ScopeError as exc:
                assert f"on {model.__name__} without a tenant scope" in str(exc)
            else:
                answered.append(what)
        assert not answered, f"{label} answered without a scope: {answered}"
        # The model's own queryset methods refuse as well (a ScopeError, not an AttributeError).
        if hasattr(model.objects, "visible_to"):
            with pytest.raises(ScopeError):
                model.objects.visible_to(None)
        assert "no tenant scope" in repr(model.objects.all())
        assert not list(model.objects.none())  # reads no rows: needs no scope


@pytest.mark.django_db
def test_a_query_that_names_its_tenant_needs_no_scope(bucket, other_bucket):
    [mine] = memories_ingest(bucket=bucket, items=[MemoryInput(content="Ada keeps bees.")], sequence=False)
    memories_ingest(bucket=other_bucket, items=[MemoryInput(content="Bruno keeps goats.")], sequence=False)
    with scope(tenant=None):
        assert [m.pk for m in Memory.objects.for_bucket(bucket)] == [mine.id]
        assert list(Memory.objects.for_tenant(bucket.tenant).values_list("pk", flat=True)) == [mine.id]
        assert Memory.objects.for_tenant(bucket.tenant).filter(content__contains="bees").count() == 1
        with pytest.raises(ScopeError):
            Memory.objects.filter(content__contains="bees").count()


@pytest.mark.django_db
def test_a_related_manager_needs_a_scope_too(bucket):
    memories_ingest(bucket=bucket, items=[MemoryInput(content="Ada keeps bees.")], sequence=False)
    with scope(tenant=None), pytest.raises(ScopeError):
        list(bucket.memories.all())
    with scope(tenant=bucket.tenant_id):
        assert bucket.memories.count() == 1
    with scope(tenant=uuid.uuid4()):
        assert bucket.memories.count() == 0


def test_a_scope_of_none_is_no_scope_even_inside_scopes_disabled():
    with scopes_disabled(), scope(tenant=None), pytest.raises(ScopeError):
        Memory.objects.count()


# --- inside a scope: every model hides the other tenant's rows ------------------------------------


def _build_rows(tenant: Tenant, mark: str) -> None:
    """At least one row of every tenant-owned model, for ``tenant``."""
    bucket = bucket_create(tenant=tenant, name=f"{mark}-bucket")
    ids = [
        r.id
        for r in memories_ingest(
            bucket=bucket,
            items=[
                MemoryInput(content=f"{mark} keeps bees."),
                MemoryInput(content=f"{mark} sails to Porto."),
                MemoryInput(content=f"{mark} once kept a diary."),
            ],  # fmt: skip
            sequence=False,
        )
    ]
    memory = Memory.objects.get(pk=ids[0])
    memory_update(memory=memory, content=f"{mark} keeps many bees.")
    memory_delete(memory=Memory.objects.get(pk=ids[2]))
    now = timezone.now()
    MemoryAccess.objects.create(memory_id=ids[0], accessed_at=now)
    NextEmbedding.objects.create(memory_id=ids[0], bucket=bucket, model="next", source_hash="0" * 32)
    last_event = MemoryEvent.objects.filter(bucket_id=bucket.pk).order_by("id").last()
    MemoryEventTrim.objects.create(bucket=bucket, xid=last_event.xid, event_id=last_event.pk)
    failures_record(stage="graph", errors={ids[0]: f"{mark} tripped"})
    block_put(bucket=bucket, agent_id=None, label="persona", content=f"{mark} persona", expected=Expected())
    feedback_record(memory=memory, signal="useful", query=f"what does {mark} keep?")
    ranking_learn(bucket=bucket)  # one rated question: it keeps the defaults, and says so in its row
    memory_keys_build(memory_ids=[ids[1]], wait=False)
    # A memory past the model's window, and its passages.
    [long] = memories_ingest(
        bucket=bucket,
        items=[MemoryInput(content=" ".join(f"{mark} planted bed {i} with leeks and beans." for i in range(60)))],
        sequence=False,
    )
    assert memory_passages_build(memory_ids=[long.id]).passages >= 2
    person = Entity.objects.create(
        tenant=tenant, bucket=bucket, name=f"{mark} Marta", normalized_name=f"{mark} marta", type="PERSON"
    )
    Mention.objects.create(tenant=tenant, bucket=bucket, memory_id=ids[0], entity=person)
    Edge.objects.create(
        tenant=tenant, bucket=bucket, subject=person, predicate="lives_in", object_literal="Porto",
        valid_from=now, source_memory_id=ids[0],
    )  # fmt: skip
    Processed.objects.create(memory_id=ids[0], extractor_version=1, processed_at=now)
    PendingComparison.objects.get_or_create(memory_id=ids[0])  # the write may have put it on the list
    Correction.objects.create(tenant=tenant, bucket=bucket, kind="rename", actor_kind="system")
    a, b = sorted(ids[:2])
    DuplicateCandidate.objects.create(tenant=tenant, bucket=bucket, memory_a_id=a, memory_b_id=b, similarity=0.9)
    ConflictCandidate.objects.create(
        tenant=tenant, bucket=bucket, memory_a_id=a, memory_b_id=b, code="negation", reason=mark, score=0.5
    )
    ScanCursor.objects.create(tenant=tenant, bucket=bucket, job="links")
    audit_record(actor=Actor.system(mark), action="memory.create", tenant=tenant, object_type="memory", object_ids=ids)
    source = source_submit_document(bucket=bucket, title=mark, text=f"{mark} likes tea.").source
    chunk = SourceChunk.objects.filter(source=source).first() or SourceChunk.objects.create(
        source=source, ordinal=0, text=f"{mark} likes tea."
    )
    SourceChunkMemory.objects.create(source=source, chunk=chunk, memory_id=ids[0], created=True)
    # The link a chunk keeps to a memory in the trash (ids[2] was deleted above).
    TrashedChunkLink.objects.create(source=source, chunk=chunk, memory_id=ids[2], created=True)
    subscription = WebhookSubscription.objects.create(tenant=tenant, url=f"https://{mark}.example/", secret="s")
    delivery = WebhookDelivery.objects.create(
        subscription=subscription, tenant=tenant, event_id=last_event.pk, event_kind="created"
    )
    WebhookAttempt.objects.create(delivery=delivery, number=1, at=now, duration_ms=5)
    services.token_issue(tenant=tenant, name=mark, scopes=["read"])
    OperatorMembership.objects.create(user=User.objects.create_user(f"{mark}-op", is_staff=True), tenant=tenant)
    TenantUsage.objects.create(tenant=tenant, day=now.date())


def _all_pks() -> dict[str, set]:
    with scopes_disabled():
        return {label: set(apps.get_model(label).objects.values_list("pk", flat=True)) for label in TENANT_OWNED}


@pytest.fixture
def two_tenants(tenant, other_tenant):
    """Every tenant-owned model's rows of ``tenant`` and of ``other_tenant``, by model."""
    before = _all_pks()
    _build_rows(tenant, "alpha")
    of_a = _all_pks()
    _build_rows(other_tenant, "beta")
    after = _all_pks()
    rows = {label: (of_a[label] - before[label], after[label] - of_a[label]) for label in TENANT_OWNED}
    return tenant, other_tenant, rows


def test_inside_a_tenant_scope_no_model_shows_another_tenants_rows(two_tenants):
    a, b, rows = two_tenants
    missing = [label for label, (of_a, of_b) in rows.items() if not of_a or not of_b]
    assert not missing, f"the test built no rows of {missing} for one of the tenants"
    leaks, lost = [], []
    for label, (of_a, of_b) in rows.items():
        model = apps.get_model(label)
        with scope(tenant=a.pk):
            seen = set(model.objects.values_list("pk", flat=True))
            # Code that forgot to filter: a filter on something else entirely.
            forgot = set(model.objects.exclude(pk=None).values_list("pk", flat=True))
        with scope(tenant=[a.pk]):
            as_list = set(model.objects.values_list("pk", flat=True))
        if seen & of_b or forgot & of_b or as_list & of_b:
            leaks.append(label)
        if not of_a <= seen or seen != forgot or seen != as_list:
            lost.append(label)
        with scope(tenant=b.pk):
            assert not set(model.objects.values_list("pk", flat=True)) & of_a, label
        with scopes_disabled():
            assert of_a | of_b <= set(model.objects.values_list("pk", flat=True)), label
    assert not leaks, f"tenant B's rows seen in tenant A's scope: {leaks}"
    assert not lost, f"tenant A's own rows not all seen in its scope: {lost}"


def test_inside_a_scope_every_related_manager_reads_its_rows(two_tenants):
    """A related manager (``source.chunks``) is built on the related model's scoped manager: it
    narrows by that model's own path to its tenant."""
    a, b, rows = two_tenants
    checked = []
    for label in TENANT_OWNED:
        model = apps.get_model(label)
        with scopes_disabled():
            owner = model.objects.filter(pk__in=rows[label][0]).first()
        for relation in model._meta.related_objects:
            if not relation.one_to_many or _label(relation.related_model) not in TENANT_OWNED:
                continue
            accessor = relation.get_accessor_name()
            if accessor is None or accessor.endswith("+"):
                continue
            with scope(tenant=a.pk):
                assert (
                    set(getattr(owner, accessor).values_list("pk", flat=True))
                    <= rows[_label(relation.related_model)][0]
                )
            with scope(tenant=b.pk):
                assert not getattr(owner, accessor).exists()
            checked.append(f"{label}.{accessor}")
    assert "sources.Source.chunks" in checked and "webhooks.WebhookDelivery.attempt_rows" in checked, checked


def test_inside_a_scope_a_subquery_is_narrowed_too(two_tenants):
    a, b, rows = two_tenants
    with scope(tenant=a.pk):
        mentioned = Memory.objects.filter(Exists(Mention.objects.filter(memory_id=OuterRef("pk"))))
        assert {m.tenant_id for m in mentioned} == {a.pk}


# --- entry points run in their own scope ------------------------------------------------------------


DISABLED, NO_SCOPE = "scopes disabled", "no scope"


class QueryScopes:
    """The tenant scope every SQL statement ran in: a tenant id, a tuple of them, NO_SCOPE or
    DISABLED."""

    def __init__(self):
        self.seen: list[tuple[str, object]] = []

    def __call__(self, execute, sql, params, many, context):
        current = get_scope()
        tenant = current.get("tenant")
        if not current.get("_enabled", True):
            state = DISABLED
        elif tenant is None:
            state = NO_SCOPE
        else:  # a list of tenants (the console's, a task's) as a tuple, comparable in sets
            state = tuple(tenant) if isinstance(tenant, list) else tenant
        self.seen.append((sql, state))
        return execute(sql, params, many, context)

    def touching(self, table: str) -> list:
        return [state for sql, state in self.seen if f'"{table}"' in sql or f" {table} " in sql]

    def disabled(self) -> list[str]:
        return [sql for sql, state in self.seen if state == DISABLED]


@contextlib.contextmanager
def queries_scopes():
    recorder = QueryScopes()
    with connection.execute_wrapper(recorder):
        yield recorder


@pytest.mark.django_db
def test_an_api_request_runs_in_its_tokens_scope_not_the_tests(api, tenant, bucket, other_bucket):
    assert not get_scope().get("_enabled", True)  # the test body: scopes lifted
    with queries_scopes() as queries:
        response = api.post(
            f"/api/v1/buckets/{bucket.pk}/memories", {"memories": [{"content": "Ada keeps bees."}]}, format="json"
        )
        assert response.status_code == 201, response.content
        assert api.get(f"/api/v1/buckets/{bucket.pk}/memories").status_code == 200
        assert api.get(f"/api/v1/buckets/{other_bucket.pk}/memories").status_code == 404
    # Only the lookup of the token itself reads across tenants.
    assert all("api_tokens" in sql for sql in queries.disabled()), queries.disabled()
    assert queries.touching("memories") and set(queries.touching("memories")) == {tenant.pk}
    assert not get_scope().get("_enabled", True)  # and the test's own state is back


@pytest.mark.django_db
def test_a_streamed_answer_is_read_in_the_requests_scope(api, tenant, bucket):
    memories_ingest(bucket=bucket, items=[MemoryInput(content="Ada keeps bees.")], sequence=False)
    response = api.get(f"/api/v1/buckets/{bucket.pk}/export")
    assert response.status_code == 200
    with queries_scopes() as queries:
        body = b"".join(response.streaming_content)
    assert b"Ada keeps bees." in body
    assert queries.seen and {state for _, state in queries.seen} == {tenant.pk}


@pytest.mark.django_db
def test_a_console_page_runs_in_its_operators_scope(tenant, bucket, other_bucket):
    operator = make_operator("scoped-operator", tenant)
    client = Client()
    client.force_login(operator)
    with queries_scopes() as queries:
        assert client.get("/admin/memories/memory/").status_code == 200
        assert client.get(f"/admin/tenants/bucket/{other_bucket.pk}/change/").status_code == 404
    # Only the lookup of the operator's tenants reads across tenants.
    assert all("operator_memberships" in sql for sql in queries.disabled()), queries.disabled()
    assert queries.touching("memories") and set(queries.touching("memories")) == {(tenant.pk,)}
    assert set(queries.touching("buckets")) == {(tenant.pk,)}


@pytest.mark.django_db
def test_a_superusers_console_page_reads_across_tenants(tenant, other_tenant):
    admin = User.objects.create_superuser("root", password=None)
    client = Client()
    client.force_login(admin)
    with queries_scopes() as queries:
        assert client.get("/admin/tenants/bucket/").status_code == 200
    assert queries.touching("buckets") and set(queries.touching("buckets")) == {DISABLED}


@pytest.mark.django_db
def test_a_task_runs_in_the_scope_of_the_rows_it_was_given(tenant, bucket, celery_eager):
    from graph.tasks import extract_memories

    [memory] = memories_ingest(bucket=bucket, items=[MemoryInput(content="Marta lives in Porto.")], sequence=False)
    with queries_scopes() as queries:
        extract_memories.delay([str(memory.id)])
    # The task asked whose memories it was handed (across tenants), then ran in that tenant's scope;
    # so did the build of their key documents it queued.
    assert len(queries.disabled()) == 2 and all("memories" in sql for sql in queries.disabled())
    assert {state for _, state in queries.seen if state != DISABLED} == {(tenant.pk,)}


@pytest.mark.django_db
def test_a_sweep_task_says_it_is_cross_tenant(bucket, other_bucket, celery_eager):
    from graph.tasks import extract_pending

    for b in (bucket, other_bucket):
        memories_ingest(bucket=b, items=[MemoryInput(content="Marta lives in Porto.")], sequence=False)
    with queries_scopes() as queries:
        extract_pending.delay()
    assert queries.touching("graph_processed") and set(queries.touching("graph_processed")) == {DISABLED}


@pytest.mark.django_db
def test_a_command_on_a_bucket_runs_in_its_tenants_scope(tenant, bucket, tmp_path):
    memories_ingest(bucket=bucket, items=[MemoryInput(content="Ada keeps bees.")], sequence=False)
    out = tmp_path / "export.jsonl"
    with queries_scopes() as queries:
        call_command("export_bucket", str(bucket.pk), "--out", str(out), "--no-progress")
    assert "Ada keeps bees." in out.read_text()
    assert len(queries.disabled()) == 1 and "buckets" in queries.disabled()[0]  # finding the bucket by id
    assert {state for _, state in queries.seen if state != DISABLED} == {tenant.pk}


def test_a_thread_gets_the_callers_scope_only_when_handed_it():
    seen = {}

    def look(name):
        seen[name] = get_scope().get("tenant", "no scope")

    tenant_id = uuid.uuid4()
    with scope(tenant=tenant_id):
        bare = threading.Thread(target=look, args=("bare",))
        handed = threading.Thread(target=in_this_context(look), args=("handed",))
        bare.start(), handed.start()
        bare.join(), handed.join()
    assert seen == {"bare": "no scope", "handed": tenant_id}


@pytest.mark.django_db
def test_a_token_for_another_tenant_changes_the_scope_of_its_own_request_only(tenant, other_tenant, bucket):
    mine, theirs = make_client(tenant), make_client(other_tenant)
    memories_ingest(bucket=bucket, items=[MemoryInput(content="Ada keeps bees.")], sequence=False)
    assert theirs.get(f"/api/v1/buckets/{bucket.pk}/memories").status_code == 404
    assert mine.get(f"/api/v1/buckets/{bucket.pk}/memories").json()["results"][0]["content"] == "Ada keeps bees."


# --- the search path ------------------------------------------------------------------------------------


def _search_statements(api, bucket) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        response = api.post(f"/api/v1/buckets/{bucket.pk}/search", {"query": "who keeps bees?"}, format="json")
        assert response.status_code == 200 and response.json()["results"]
    return [query["sql"] for query in captured.captured_queries]


@pytest.mark.django_db
def test_a_hybrid_search_gains_no_statement_and_no_join_from_its_scope(api, bucket, monkeypatch):
    contents = ["Ada keeps bees.", "Ada sails to Porto.", "Bruno keeps goats.", "The hive is behind the barn."]
    memories_ingest(bucket=bucket, items=[MemoryInput(content=c) for c in contents])
    _search_statements(api, bucket)  # warm: the bucket's statistics, the token's last use
    scoped = _search_statements(api, bucket)
    # The same search with the managers as they were before scoping: no narrowing at all.
    monkeypatch.setattr(
        TenantScopedManager, "get_queryset", lambda self: super(TenantScopedManager, self).get_queryset()
    )
    unscoped = _search_statements(api, bucket)
    assert len(scoped) == len(unscoped)
    assert [sql.count(" JOIN ") for sql in scoped] == [sql.count(" JOIN ") for sql in unscoped]
