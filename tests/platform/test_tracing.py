"""OpenTelemetry traces: a search's span with its signals' spans as children (across the
executor threads), a write's span with its stages, and a web server configured with an OTLP
endpoint sending its spans there."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler

import pytest
from django.test import override_settings
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memories.retrieval import memories_search
from memories.services import MemoryInput, memories_ingest
from tests.support import LoopbackServer, base_env, http_get, test_database_url, wait_for, web_server

_exporter = InMemorySpanExporter()


@pytest.fixture(scope="module")
def spans():
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # OpenTelemetry keeps the first provider set
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    processors = provider._active_span_processor._span_processors  # no public way to list them
    if not any(getattr(p, "span_exporter", None) is _exporter for p in processors):
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
    return _exporter


@pytest.fixture
def _close_thread_connections():
    from memories.retrieval import close_search_connections

    yield
    close_search_connections()


@pytest.mark.django_db(transaction=True)
@override_settings(ENGRAM_SEARCH_PARALLEL=True)
def test_a_search_span_has_one_child_span_per_signal(spans, bucket, _close_thread_connections):
    memories_ingest(bucket=bucket, items=[MemoryInput(content="Alice lives in Oslo.")])
    spans.clear()

    # Under a root span of the test's own: spans of anything else this process runs are not counted.
    with trace.get_tracer("tests").start_as_current_span("test") as root:
        memories_search(bucket=bucket, query="Where does Alice live?", mode="hybrid", record_access=False)

    finished = [s for s in spans.get_finished_spans() if s.context.trace_id == root.get_span_context().trace_id]
    (search,) = [s for s in finished if s.name == "engram.search"]
    assert search.attributes["engram.mode"] == "hybrid"
    signals = [s for s in finished if s.name == "engram.search.signal"]
    assert {s.attributes["signal"] for s in signals} >= {"keyword", "vector"}
    # Signals ran in executor threads and are still children of the search's span.
    assert {s.parent.span_id for s in signals} == {search.context.span_id}
    assert {s.context.trace_id for s in signals} == {search.context.trace_id}


def test_a_write_span_has_its_stages_as_children(spans, bucket):
    spans.clear()
    with trace.get_tracer("tests").start_as_current_span("test") as root:
        memories_ingest(bucket=bucket, items=[MemoryInput(content="Bob drinks green tea every morning.")])

    finished = [s for s in spans.get_finished_spans() if s.context.trace_id == root.get_span_context().trace_id]
    (write,) = [s for s in finished if s.name == "engram.write"]
    stages = {s.name: s for s in finished if s.name.startswith("engram.write.")}
    assert set(stages) == {"engram.write.lemmatize", "engram.write.embed", "engram.write.insert"}
    assert {s.parent.span_id for s in stages.values()} == {write.context.span_id}


class Collector(LoopbackServer):
    """An OTLP/HTTP collector: keeps the span names of every export it receives."""

    def __init__(self):
        self.names: list[str] = []
        self.arrived = threading.Event()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                request = ExportTraceServiceRequest()
                request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        collector.names += [span.name for span in scope.spans]
                collector.arrived.set()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(Handler)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_server_with_an_otlp_endpoint_sends_its_request_spans_there(tmp_path, tenant, bucket):
    from tenants import services

    secret = services.token_issue(tenant=tenant, name="tracing", scopes=["read"]).secret
    with Collector() as collector:
        env = base_env(
            DATABASE_URL=test_database_url(), ENGRAM_EMBEDDINGS="off", OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
            OTEL_BSP_SCHEDULE_DELAY="100",
        )  # fmt: skip
        with web_server(env, workers=1, log=tmp_path / "server.log") as base:
            import json
            import urllib.request

            request = urllib.request.Request(
                f"{base}/api/v1/buckets/{bucket.id}/search",
                data=json.dumps({"query": "tea", "mode": "keyword"}).encode(),
                headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=30) as answer:
                assert answer.status == 200
            wait_for(lambda: "engram.search" in collector.names, timeout=30)
            assert http_get(base + "/health")[0] == 200
    assert "engram.search.signal" in collector.names
