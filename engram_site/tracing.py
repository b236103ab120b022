"""OpenTelemetry traces: a span per search, per retrieval signal and per write stage, sent to
an OTLP collector when one is configured.

Off by default: without ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``…_TRACES_ENDPOINT``) no tracer
provider is installed and OpenTelemetry's API hands out non-recording spans, which cost a
function call each. On, each web worker and each background worker process sends its spans in
batches from a thread of its own (``configure``), named ``OTEL_SERVICE_NAME`` (``engram``).
The search's signals run in executor threads; ``memories.retrieval.concurrency`` carries the
caller's context into them, so their spans are children of the search's.
"""

from __future__ import annotations

import functools
import logging
import os

from django.conf import settings
from opentelemetry import trace

from engram_site import stopwatch

logger = logging.getLogger(__name__)

tracer = trace.get_tracer("engram")


def configure() -> bool:
    """Install the OTLP exporter in this process when an endpoint is configured (idempotent:
    OpenTelemetry keeps the first provider a process sets)."""
    if not settings.ENGRAM_TRACING:
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "engram")}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    logger.info("sending traces to the OTLP endpoint")
    return True


def traced(name: str, *, keywords: tuple[str, ...] = (), **attributes):
    """Decorator: run the call inside a span called ``name`` with fixed ``attributes``, plus
    the call's keyword arguments named in ``keywords`` (as strings) when it has them. The call
    is also a stage of the request's stopwatch (:mod:`engram_site.stopwatch`), named by its
    ``signal`` attribute or by ``name`` without ``engram.`` ("search", "write.embed")."""
    stage_name = attributes.get("signal") or name.removeprefix("engram.")

    def decorate(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            found = {f"engram.{key}": str(kwargs[key]) for key in keywords if kwargs.get(key) is not None}
            with stopwatch.stage(stage_name), tracer.start_as_current_span(name, attributes={**attributes, **found}):
                return function(*args, **kwargs)

        return wrapper

    return decorate
