"""The Python client (clients/python, ``engram_client``) against a live Engram: gunicorn on the
test database, started and stopped here. Every call goes over HTTP to the real API; a small
local stub stands in for the server only where a live one cannot be made to fail on cue
(retries on 429, 503 and refused connections).

The server runs without the embedding model (searches answer in keyword mode): what is tested
is the client, not retrieval.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import shutil
import subprocess
import sys
import sysconfig
import uuid
import venv
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import SimpleNamespace

import engram_client
import pytest
from engram_client import (
    APIConnectionError,
    AsyncEngram,
    AuthenticationError,
    Conflict,
    Engram,
    EngramError,
    NotFound,
    PermissionDenied,
    PreconditionFailed,
    PreconditionRequired,
    RateLimited,
    ServiceUnavailable,
    ValidationError,
)
from engram_client import _core as client_core

from memories.services.buckets import bucket_create
from tenants import services as tenant_services
from tests.support import ROOT, LoopbackServer, base_env, free_port, manage, test_database_url, web_server

CLIENT_DIR = ROOT / "clients" / "python"

# The test database is set up for marked modules only; the tests themselves reach it through
# the server (and the rows the fixture commits).
pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def live(django_db_setup, django_db_blocker, tmp_path_factory):
    """gunicorn on the test database, and a tenant with two buckets and tokens of every kind
    (all committed: the server has its own connection), plus an outsider tenant."""
    log = tmp_path_factory.mktemp("client") / "server.log"
    env = base_env(DATABASE_URL=test_database_url(), ENGRAM_EMBEDDINGS="off", ENGRAM_TOKEN_RATE="100000/min")
    with django_db_blocker.unblock():
        tenant = tenant_services.tenant_create(name="Client tests")
        main = bucket_create(tenant=tenant, name="main")
        spare = bucket_create(tenant=tenant, name="spare")
        outsider = tenant_services.tenant_create(name="Client outsider")
        elsewhere = bucket_create(tenant=outsider, name="theirs")

        def token(owner, scopes, bucket=None):
            return tenant_services.token_issue(tenant=owner, name="client", scopes=scopes, bucket=bucket).secret

        tokens = SimpleNamespace(
            rw=token(tenant, ["read", "write"]),
            admin=token(tenant, ["read", "write", "admin"]),
            read_only=token(tenant, ["read"]),
            write_only=token(tenant, ["write"]),
            restricted=token(tenant, ["read", "write"], bucket=main),
            outsider=token(outsider, ["read", "write"]),
        )
    try:
        with web_server(env, workers=1, log=log) as base:
            yield SimpleNamespace(
                base=base, env=env, main=str(main.pk), spare=str(spare.pk), elsewhere=str(elsewhere.pk),
                tokens=tokens, log=log,
            )  # fmt: skip
    finally:
        with django_db_blocker.unblock():
            tenant.delete()
            outsider.delete()


def client(live, token: str | None = None, **options) -> Engram:
    return Engram(live.base, token or live.tokens.rw, **options)


# --- the synchronous client ------------------------------------------------------------------------


@pytest.mark.slow
def test_a_memory_is_written_found_edited_deleted_and_restored(live):
    with client(live) as engram:
        written = engram.add_memory(
            live.main, "Ana's sister lives in Porto.", attributed_to="user", agent_id="agent-1", run_id="run-1",
            source_actor_id="ana", hint_root="family", hint_tags=["family", "home"], metadata={"channel": "chat"},
            importance=0.8, expires_at=datetime.now(UTC) + timedelta(days=30),
        )  # fmt: skip
        assert not written.deduplicated
        assert engram.add_memory(live.main, "ana's sister lives in porto").id == written.id  # normalised duplicate
        assert engram.add_memory(live.main, "Ana's sister lives in Porto!").deduplicated

        memory = engram.get_memory(written.id)
        assert (memory.content, memory.attributed_to, memory.hint_tags) == (
            "Ana's sister lives in Porto.", "user", ["family", "home"],
        )  # fmt: skip
        assert (memory.importance, memory.metadata, memory.bucket_id) == (0.8, {"channel": "chat"}, live.main)
        assert isinstance(memory.created_at, datetime) and memory.expires_at > datetime.now(UTC)
        assert memory["enrichment"] == memory.enrichment  # the raw answer stays readable

        found = engram.search(
            live.main, "Where does Ana's sister live?", mode="hybrid", limit=5, token_budget=500,
            filters={"hint_tags": ["family"], "attributed_to": "user"}, explain=True, ranking={"fusion": "rrf"},
            now=datetime.now(UTC), excerpt="whole",
        )  # fmt: skip
        assert [hit.id for hit in found] == [written.id]
        assert found.results[0].excerpt is None  # a short memory is returned whole
        assert found.mode_used == "keyword" and found.warnings  # the server runs without the model
        assert found.results[0].score > 0 and found.results[0].explain is not None
        assert not engram.search(live.main, "Where does Ana's sister live?", filters={"hint_tags": ["work"]})

        edited = engram.update_memory(written.id, content="Ana's sister moved to Lisbon.", importance=None)
        assert (edited.content, edited.importance) == ("Ana's sister moved to Lisbon.", None)
        assert edited.hint_tags == ["family", "home"]  # what was not given is unchanged
        history = engram.get_memory_history(written.id)
        assert history.state == "live"
        assert history.versions[0].kind == "edited"
        assert history.versions[0].previous["content"] == "Ana's sister lives in Porto."

        engram.delete_memory(written.id)
        with pytest.raises(NotFound):
            engram.get_memory(written.id)
        deleted = list(engram.list_deleted_memories(live.main))
        assert [(d.id, d.reason) for d in deleted] == [(written.id, "deleted")]
        assert engram.restore_memory(written.id).content == "Ana's sister moved to Lisbon."
        assert engram.get_memory(written.id).content == "Ana's sister moved to Lisbon."
        assert [v.kind for v in engram.get_memory_history(written.id).versions] == ["edited", "deleted", "restored"]
        # Feedback, from a search's hit: stored (without a vector: this server has no model) and in the history.
        [hit] = engram.search(live.main, "Where does Ana's sister live?", limit=1)
        rated = engram.rate(hit, "useful", query="Where does Ana's sister live?", run_id="r1")
        assert (rated.memory_id, rated.signal, rated.run_id, rated.embedded) == (written.id, "useful", "r1", False)
        assert engram.get_memory_history(written.id).versions[-1].details["signal"] == "useful"
        with pytest.raises(ValidationError):
            engram.rate(written.id, "great", query="q")  # type: ignore[arg-type]


@pytest.mark.slow
def test_a_batch_and_the_list_iterate_every_page(live):
    with client(live) as engram:
        bucket = engram.create_bucket(f"pages-{uuid.uuid4().hex[:8]}", description="listing")
        texts = [f"Fact number {i} of the listing." for i in range(7)]
        results = engram.add_memories(bucket.id, [texts[0], {"content": texts[1], "hint_tags": ["odd"]}, *texts[2:]])
        assert len(results) == 7 and not any(r.deduplicated for r in results)
        assert [r.deduplicated for r in engram.add_memories(bucket.id, texts[:2], sequence=False)] == [True, True]

        listed = list(engram.list_memories(bucket.id, page_size=2))  # four pages
        assert [m.id for m in listed] == [r.id for r in reversed(results)]  # newest first
        assert [m.content for m in engram.list_memories(bucket.id, hint_tags=["odd"])] == [texts[1]]
        assert list(engram.list_memories(bucket.id, created_after=datetime.now(UTC) + timedelta(days=1))) == []
        assert engram.get_bucket(bucket.id).memory_count == 7


@pytest.mark.slow
def test_buckets_are_created_listed_updated_merged_and_deleted(live):
    with client(live, live.tokens.admin) as engram:
        names = [f"b-{uuid.uuid4().hex[:8]}" for _ in range(2)]
        source, target = (engram.create_bucket(name) for name in names)
        assert {live.main, live.spare, source.id, target.id} <= {b.id for b in engram.list_buckets(page_size=1)}
        updated = engram.update_bucket(source.id, description="to merge", retention_days=7)
        assert (updated.name, updated.description, updated.retention_days) == (names[0], "to merge", 7)

        engram.add_memories(source.id, ["Merged fact one.", "Merged fact two."])
        engram.add_memory(target.id, "Merged fact two.")
        preview = engram.merge_bucket(source.id, target.id, dry_run=True)
        assert (preview.dry_run, preview.memories_to_move, preview.memories_to_dedup) == (True, 1, 1)
        merged = engram.merge_bucket(source.id, target.id, remove_source=True)
        assert (merged.moved, merged.deduplicated, merged.source_removed) == (1, 1, True)
        with pytest.raises(NotFound):
            engram.get_bucket(source.id)
        assert engram.get_bucket(target.id).memory_count == 2

        engram.delete_bucket(target.id)
        assert target.id not in {b.id for b in engram.list_buckets()}


@pytest.mark.slow
def test_export_lines_import_into_another_bucket(live, tmp_path):
    with client(live) as engram:
        source = engram.create_bucket(f"export-{uuid.uuid4().hex[:8]}")
        engram.add_memories(source.id, ["We moved to Porto in May.", "The cat is called Miso."])
        lines = list(engram.export_bucket(source.id, versions=True))
        assert [line["content"] for line in lines] == ["We moved to Porto in May.", "The cat is called Miso."]
        assert all("engram" in line and "versions" in line for line in lines)

        copy = engram.create_bucket(f"import-{uuid.uuid4().hex[:8]}")
        report = engram.import_bucket(copy.id, iter(lines))
        assert (report.lines, report.imported, report.deduplicated) == (2, 2, 0)

        path = tmp_path / "more.jsonl"
        path.write_text(json.dumps({"content": "The cat is called Miso."}) + "\n\n" + '{"content": "Miso is 3."}\n')
        report = engram.import_bucket(copy.id, path)
        assert (report.lines, report.imported, report.deduplicated) == (2, 1, 1)
        with path.open("rb") as handle:
            assert engram.import_bucket(copy.id, handle).deduplicated == 2

        with pytest.raises(ValidationError) as refused:
            engram.import_bucket(copy.id, [{"content": "fine"}, {"content": ""}])
        assert refused.value.code == "invalid_lines" and refused.value.body["rejected"][0]["line"] == 2
        report = engram.import_bucket(copy.id, ['{"content": "Kept despite the next line."}', "{"], skip_invalid=True)
        assert (report.imported, report.rejected_count) == (1, 1)
        assert engram.get_bucket(copy.id).memory_count == 4


@pytest.mark.slow
def test_documents_conversations_and_the_graph(live):
    with client(live) as engram:
        bucket = engram.create_bucket(f"sources-{uuid.uuid4().hex[:8]}")
        document = engram.submit_document(bucket.id, "Notes", "# Home\n\nAlice lives in Boston.", agent_id="a")
        assert (document.status, document.deduplicated) == ("pending", False)
        assert engram.submit_document(bucket.id, "Notes", "# Home\n\nAlice lives in Boston.", agent_id="a").deduplicated
        conversation = engram.submit_conversation(
            bucket.id, [{"role": "user", "content": "Alice works at Initech."}], title="Chat", speaker="Bob"
        )
        assert {s.id for s in engram.list_sources(bucket.id, page_size=1)} == {document.id, conversation.id}
        assert [s.id for s in engram.list_sources(bucket.id, kind="conversation")] == [conversation.id]
        detail = engram.get_source(document.id, chunk_limit=10)
        assert (detail.kind, detail.title, detail.progress["chunks_total"]) == ("document", "Notes", 1)
        assert len(detail.chunks) == 1
        assert engram.delete_source(document.id).id == document.id
        with pytest.raises(NotFound):
            engram.get_source(document.id)

        # The graph is derived by the background worker, which this test does not run: the
        # operator's command builds it (in its own process, so that the server sees it committed).
        engram.add_memories(
            bucket.id,
            [
                "Alice lives in Boston.",
                "Alice works at Initech.",
                "Jordan Lee lives in Oslo.",
                "Jordan Park lives in Rome.",
            ],
        )
        manage("rebuild_graph", "--bucket", bucket.id, env=live.env)
        alice = next(engram.list_entities(bucket.id, q="Alice"))
        assert alice.name == "Alice" and alice.mention_count >= 2
        entity = engram.get_entity(alice.id)
        assert {edge.predicate for edge in entity.current_edges} >= {"lives_in"}
        edge = next(engram.list_edges(bucket.id, entity=alice.id, predicate="lives_in"))
        assert edge.subject.name == "Alice" and edge.current
        stating = engram.get_edge_memories(edge.id)
        assert [m.content for m in stating.results] == ["Alice lives in Boston."]

        # What is known about Alice, by name and by id, with a digest.
        profile = engram.get_profile(bucket.id, name="alice", budget=40)
        assert profile.entity.name == "Alice" and profile.history == []
        boston = next(fact for fact in profile.current if fact.relation == "lives_in")
        assert (boston.value, boston.entity.name, boston.direction, boston.valid_to) == (
            "Boston",
            "Boston",
            "out",
            None,
        )
        assert [m.content for m in boston.memories] == ["Alice lives in Boston."] and boston.memory_count == 1
        assert isinstance(boston.valid_from, datetime) and "Boston" in profile.digest and profile.digest_tokens <= 40
        assert {r.name for r in profile.related} >= {"Boston", "Initech"}
        assert engram.get_profile(bucket.id, entity_id=alice.id).current == profile.current
        with pytest.raises(Conflict) as ambiguous:
            engram.get_profile(bucket.id, name="Jordan")
        assert ambiguous.value.code == "ambiguous_name"
        assert {c["name"] for c in ambiguous.value.candidates} == {"Jordan Lee", "Jordan Park"}
        with pytest.raises(ValueError):
            engram.get_profile(bucket.id)


@pytest.mark.slow
def test_erasure_deletes_the_memories_of_an_identifier(live):
    with client(live, live.tokens.admin) as engram:
        engram.add_memory(live.spare, "Erase me: I like tea.", agent_id="agent-to-erase")
        engram.add_memory(live.spare, "Keep me: I like coffee.", agent_id="agent-to-keep")
        preview = engram.erase(agent_id="agent-to-erase", bucket_id=live.spare, dry_run=True)
        assert (preview.dry_run, preview.memories) == (True, 1)
        assert engram.erase(agent_id="agent-to-erase").memories == 1
        assert [m.content for m in engram.list_memories(live.spare, agent_id="agent-to-erase")] == []
        assert [m.content for m in engram.list_memories(live.spare, agent_id="agent-to-keep")] == [
            "Keep me: I like coffee."
        ]


@pytest.mark.slow
def test_a_block_is_created_edited_on_its_version_searched_with_and_its_history_read(live):
    with client(live) as engram, client(live) as other:
        label = f"persona-{uuid.uuid4().hex[:6]}"
        created = engram.put_block(live.spare, label, "I am terse.", reason="first", max_tokens=50)
        assert (created.version, created.token_count > 0, created.agent_id) == (1, True, None)
        with pytest.raises(PreconditionRequired) as required:
            engram.put_block(live.spare, label, "Blind overwrite.")
        assert required.value.etag == created.etag
        # Two agents based on version 1: the first wins, the second is told the current version.
        first = engram.edit_block(live.spare, label, append="I like lists.", if_match=created, reason="taught")
        with pytest.raises(PreconditionFailed) as stale:
            other.edit_block(live.spare, label, append="I like prose.", if_match=created.etag)
        assert (stale.value.status, stale.value.version, stale.value.etag) == (412, 2, first.etag)
        assert engram.get_block(live.spare, label).content == "I am terse.\nI like lists."
        assert other.edit_block(live.spare, label, replace="lists", replace_with="tables", if_match="*").version == 3
        assert [v.reason for v in engram.get_block_history(live.spare, label)] == ["", "taught", "first"]
        assert label in [b.label for b in engram.list_blocks(live.spare)]
        engram.add_memory(live.spare, "Tables suit the terse.")
        answer = engram.search(live.spare, "tables", token_budget=200, include_blocks=[label])
        assert [b.label for b in answer.blocks] == [label] and answer.blocks_left_out == []
        assert answer.total_tokens <= 200
        engram.delete_block(live.spare, label, if_match="*")
        with pytest.raises(NotFound):
            engram.get_block(live.spare, label)


@pytest.mark.slow
def test_a_buckets_learned_ranking_is_read_and_reset(live):
    with client(live) as engram, client(live, live.tokens.read_only) as reader:
        learned = engram.get_learned_ranking(live.spare)
        assert learned.status == "none" and learned.settings == {} and learned.min_ratings == 30
        assert learned.bucket_id == live.spare
        reset = engram.reset_learned_ranking(live.spare)  # nothing learned: left as it is
        assert reset.status == "none" and reset.reset_at is None
        assert reader.get_learned_ranking(live.spare).status == "none"
        with pytest.raises(PermissionDenied):
            reader.reset_learned_ranking(live.spare)
        with pytest.raises(NotFound):
            engram.get_learned_ranking(live.elsewhere)


# --- errors --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_errors_carry_the_api_code_message_status_and_body(live):
    with client(live) as engram:
        first = engram.add_memory(live.main, "Bob drives a red Toyota.")
        second = engram.add_memory(live.main, "Bob drives a blue Fiat.")

        with pytest.raises(NotFound) as missing:
            engram.get_memory(str(uuid.uuid4()))
        assert (missing.value.status, missing.value.code) == (404, "not_found")

        with pytest.raises(Conflict) as duplicate:
            engram.update_memory(second.id, content="Bob drives a red Toyota.")
        assert (duplicate.value.status, duplicate.value.code) == (409, "duplicate_content")
        assert duplicate.value.existing_id == first.id
        with pytest.raises(Conflict) as exists:
            engram.create_bucket("main")
        assert exists.value.code == "bucket_exists"

        with pytest.raises(ValidationError) as invalid:
            engram.add_memory(live.main, "Too important.", importance=2)
        assert (invalid.value.status, invalid.value.code) == (400, "invalid")
        assert "importance" in invalid.value.errors and "importance" in invalid.value.message
        with pytest.raises(ValidationError) as unknown:
            engram.add_memories(live.main, [{"content": "x", "colour": "red"}])
        assert list(unknown.value.errors["memories"]) == ["0"]

    with client(live, live.tokens.read_only) as reader, pytest.raises(PermissionDenied) as scope:
        reader.add_memory(live.main, "A reader may not write.")
    assert scope.value.status == 403 and scope.value.code in ("permission_denied", "forbidden")
    with client(live, live.tokens.write_only) as writer, pytest.raises(PermissionDenied):
        writer.search(live.main, "Bob")
    with client(live, live.tokens.restricted) as restricted:
        assert [b.id for b in restricted.list_buckets()] == [live.main]
        with pytest.raises(NotFound):
            restricted.add_memory(live.spare, "Outside the token's bucket.")
    with client(live, live.tokens.outsider) as outsider:
        with pytest.raises(NotFound):
            outsider.get_memory(first.id)  # another tenant's memory is a missing one
        with pytest.raises(NotFound):
            outsider.update_memory(first.id, content="Hijacked.")
        with pytest.raises(NotFound):
            outsider.search(live.main, "Bob")
    with client(live, "egm_not-a-token") as stranger, pytest.raises(AuthenticationError) as unknown_token:
        next(stranger.list_buckets())
    assert unknown_token.value.status == 401
    assert isinstance(unknown_token.value, EngramError)


@pytest.mark.slow
def test_one_search_reads_several_buckets_and_names_each_hits_bucket(live):
    with client(live) as engram:
        first = engram.add_memory(live.main, "Quillon's team ships the kayak app on Thursdays.")
        second = engram.add_memory(live.spare, "Quillon wants the kayak app release notes short.")
        found = engram.search_buckets("Quillon kayak app", buckets=[live.main, live.spare], limit=5)
        assert {hit.id: hit.bucket_id for hit in found} == {first.id: live.main, second.id: live.spare}
        assert [b["id"] for b in found.buckets] == [live.main, live.spare]
    with client(live, live.tokens.restricted) as restricted:
        found = restricted.search_buckets("Quillon kayak app")  # every bucket it can read: its one
        assert [b["id"] for b in found.buckets] == [live.main] and [hit.id for hit in found] == [first.id]
        with pytest.raises(NotFound):
            restricted.search_buckets("Quillon", buckets=[live.main, live.spare])

    async def scenario():
        async with AsyncEngram(live.base, live.tokens.rw) as engram:
            found = await engram.search_buckets("Quillon kayak app", buckets=[live.spare], token_budget=1000)
            assert [(hit.id, hit.bucket_id) for hit in found] == [(second.id, live.spare)]

    asyncio.run(scenario())


@pytest.mark.slow
def test_the_environment_gives_the_defaults(live, monkeypatch):
    monkeypatch.setenv("ENGRAM_URL", live.base + "/api/v1/")
    monkeypatch.setenv("ENGRAM_TOKEN", live.tokens.rw)
    with Engram() as engram:
        assert engram.base_url == live.base + "/api/v1/"
        assert live.main in {b.id for b in engram.list_buckets()}
    with Engram(token=live.tokens.restricted) as restricted:  # an argument wins over the environment
        assert [b.id for b in restricted.list_buckets()] == [live.main]
    monkeypatch.delenv("ENGRAM_TOKEN")
    with pytest.raises(EngramError, match="ENGRAM_TOKEN"):
        Engram()


# --- the asynchronous client ---------------------------------------------------------------------


@pytest.mark.slow
def test_the_async_client_does_the_same(live):
    async def scenario():
        async with AsyncEngram(live.base, live.tokens.rw) as engram:
            bucket = await engram.create_bucket(f"async-{uuid.uuid4().hex[:8]}")
            written = await engram.add_memory(bucket.id, "Carla plays the cello.", hint_tags=["music"])
            batch = await engram.add_memories(bucket.id, ["Carla lives in Madrid.", "Carla has two cats."])
            found = await engram.search(bucket.id, "What instrument does Carla play?", limit=3)
            assert found.results[0].id == written.id
            rated = await engram.rate(found.results[0], "irrelevant", query="What instrument does Carla play?")
            assert (rated.memory_id, rated.signal) == (written.id, "irrelevant")
            edited = await engram.update_memory(written.id, content="Carla plays the viola.")
            assert edited.content == "Carla plays the viola."
            assert (await engram.get_memory_history(written.id)).versions[1].previous == {
                "content": "Carla plays the cello."
            }
            listed = [m.id async for m in engram.list_memories(bucket.id, page_size=1)]
            assert listed == [batch[1].id, batch[0].id, written.id]
            await engram.delete_memory(batch[1].id)
            assert [d.id async for d in engram.list_deleted_memories(bucket.id)] == [batch[1].id]
            assert (await engram.restore_memory(batch[1].id)).id == batch[1].id
            exported = [line async for line in engram.export_bucket(bucket.id)]
            assert len(exported) == 3
            copy = await engram.create_bucket(f"async-copy-{uuid.uuid4().hex[:8]}")

            async def lines():
                for line in exported:
                    yield line

            assert (await engram.import_bucket(copy.id, lines())).imported == 3
            exported_ids = {m.content: m.id async for m in engram.list_memories(copy.id)}
            assert {b.id async for b in engram.list_buckets()} >= {bucket.id, copy.id}
            dogs = await engram.add_memory(copy.id, "Carla has two dogs.")
            with pytest.raises(Conflict) as duplicate:
                await engram.update_memory(dogs.id, content="Carla has two cats.")
            assert duplicate.value.existing_id == exported_ids["Carla has two cats."]
            with pytest.raises(NotFound):
                await engram.get_memory(str(uuid.uuid4()))

        async with AsyncEngram(live.base, live.tokens.read_only) as reader:
            with pytest.raises(PermissionDenied):
                await reader.add_memory(live.main, "Not allowed.")

    asyncio.run(scenario())


def test_the_sync_and_async_clients_offer_the_same_methods():
    def public(cls):
        return {
            name: inspect.signature(member)
            for name, member in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith("_") and name not in ("close", "aclose")
        }

    sync, asynchronous = public(Engram), public(AsyncEngram)
    assert sync.keys() == asynchronous.keys()
    for name, signature in sync.items():
        assert list(signature.parameters) == list(asynchronous[name].parameters), name
        assert [p.default for p in signature.parameters.values()] == [
            p.default for p in asynchronous[name].parameters.values()
        ], name


# --- retries, against a stub that fails on cue ---------------------------------------------------


class Stub(LoopbackServer):
    """A local HTTP server answering each request with the next of ``answers``
    (``(status, headers, body)``), then 200 ``{}``; it records the requests it got."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests: list[tuple[str, str]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                stub.requests.append((self.command, self.path))
                status, headers, payload = stub.answers.pop(0) if stub.answers else (200, {}, {})
                data = json.dumps(payload).encode()
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _answer

            def log_message(self, *args):
                pass

        super().__init__(Handler)


UNAVAILABLE = (503, {"Retry-After": "0"}, {"detail": "The database is temporarily unavailable.",
                                            "code": "database_unavailable"})  # fmt: skip
THROTTLED = (429, {"Retry-After": "0"}, {"detail": "Request was throttled.", "code": "throttled"})
MEMORY = (200, {}, {"id": "m1", "content": "x", "added_by_a_newer_server": {"kind": "note"}})


def test_reads_are_retried_on_503_429_and_refused_connections(monkeypatch):
    with Stub([UNAVAILABLE, THROTTLED, MEMORY]) as stub, Engram(stub.url, "t", backoff=0.01) as engram:
        memory = engram.get_memory("m1")
        assert stub.requests == [("GET", "/api/v1/memories/m1")] * 3
        # A field this client does not know is kept, not refused.
        assert memory.content == "x" and memory["added_by_a_newer_server"] == {"kind": "note"}
        assert memory.extra == {"added_by_a_newer_server": {"kind": "note"}}
    with Stub([UNAVAILABLE] * 3) as stub, Engram(stub.url, "t", retries=2, backoff=0.01) as engram:
        with pytest.raises(ServiceUnavailable) as failed:
            engram.get_memory("m1")
        assert (failed.value.status, failed.value.code, len(stub.requests)) == (503, "database_unavailable", 3)
    with Stub([UNAVAILABLE, (200, {}, {"results": []})]) as stub, Engram(stub.url, "t", backoff=0.01) as engram:
        assert not engram.search("b1", "a read sent as POST")
        assert len(stub.requests) == 2

    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    waits = []
    monkeypatch.setattr(client_core, "sleep", waits.append)  # the pause between attempts, recorded
    with Engram(closed, "t", retries=2, backoff=0.05) as engram, pytest.raises(APIConnectionError):
        engram.get_memory("m1")
    # Two waits for three attempts, backoff × 2ⁿ with jitter: half to all of 0.05 s, then of 0.1 s.
    assert len(waits) == 2 and 0.025 <= waits[0] <= 0.05 and 0.05 <= waits[1] <= 0.1


def test_writes_are_retried_only_when_the_server_certainly_did_nothing():
    written = (201, {}, {"results": [{"id": "m1", "deduplicated": False}]})
    with Stub([UNAVAILABLE, written]) as stub, Engram(stub.url, "t", backoff=0.01) as engram:
        with pytest.raises(ServiceUnavailable):  # the write may have landed: not sent again
            engram.add_memory("b1", "x")
        assert len(stub.requests) == 1
    with Stub([THROTTLED, written]) as stub, Engram(stub.url, "t", backoff=0.01) as engram:
        assert engram.add_memory("b1", "x").id == "m1"  # throttled before any work: sent again
        assert len(stub.requests) == 2
    rolled_back = (409, {}, {"detail": "The request collided with a concurrent change.", "code": "retry"})
    with Stub([rolled_back, written]) as stub, Engram(stub.url, "t", backoff=0.01) as engram:
        assert engram.add_memory("b1", "x").id == "m1"
        assert len(stub.requests) == 2
    with Stub([THROTTLED]) as stub, Engram(stub.url, "t", retries=0) as engram:
        with pytest.raises(RateLimited) as throttled:
            engram.add_memory("b1", "x")
        assert throttled.value.retry_after == 0 and len(stub.requests) == 1
    too_long = (429, {"Retry-After": "3600"}, {"detail": "Request was throttled.", "code": "throttled"})
    with Stub([too_long]) as stub, Engram(stub.url, "t", max_backoff=5) as engram:
        with pytest.raises(RateLimited):  # a wait past max_backoff is not waited
            engram.get_memory("m1")
        assert len(stub.requests) == 1


def test_the_async_client_retries_too():
    async def scenario(url):
        async with AsyncEngram(url, "t", backoff=0.01) as engram:
            return await engram.get_memory("m1")

    with Stub([UNAVAILABLE, MEMORY]) as stub:
        assert asyncio.run(scenario(stub.url)).id == "m1"
        assert len(stub.requests) == 2


# --- installed on its own ----------------------------------------------------------------------------

QUICKSTART = """
from engram_client import Engram

with Engram() as engram:  # ENGRAM_URL, ENGRAM_TOKEN
    bucket = next(engram.list_buckets())
    engram.add_memory(bucket.id, "Dana's favourite tea is genmaicha.", attributed_to="user")
    for hit in engram.search(bucket.id, "Which tea does Dana like?"):
        print(hit.content)
import engram_client
print(engram_client.__file__)
"""


@pytest.mark.slow
def test_the_package_installs_into_a_fresh_virtualenv_and_works(live, tmp_path):
    # A new virtualenv; its dependencies (httpx, mcp) and the build backend come from the
    # project's environment through a path file, as the test may not download anything. The
    # project's own editable install of the client is not visible there (path files of an
    # added directory are not read), so the import below is the fresh install's.
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.check_output([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                        text=True).strip())  # fmt: skip
    project_site = Path(sysconfig.get_path("purelib"))
    (site / "project-dependencies.pth").write_text(f"{project_site}\n")
    # From a copy: building writes build/ and *.egg-info next to the sources.
    source = shutil.copytree(CLIENT_DIR, tmp_path / "engram-client", ignore=shutil.ignore_patterns("*.egg-info"))
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
         "--no-build-isolation", "--no-index", str(source)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    assert (env_dir / "bin" / "engram-mcp").exists()

    run = subprocess.run(
        [python, "-c", QUICKSTART],
        env={"ENGRAM_URL": live.base, "ENGRAM_TOKEN": live.tokens.restricted, "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    found, location = run.stdout.strip().splitlines()
    assert found == "Dana's favourite tea is genmaicha."
    assert Path(location).is_relative_to(env_dir)


def test_the_client_version_is_the_distribution_version():
    from importlib import metadata

    assert engram_client.__version__ == metadata.version("engram-client") == "0.1.0"
