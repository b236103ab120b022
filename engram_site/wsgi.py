import contextlib
import io
import os
import re

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "engram_site.settings")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


class ChunkedBodies:
    """Read a chunked request body (no Content-Length) so that Django sees it.

    gunicorn accepts ``Transfer-Encoding: chunked`` and hands the decoded body on, but Django
    reads exactly CONTENT_LENGTH bytes: without one, a valid JSON body would arrive empty and
    be answered with a baffling "content: This field is required.". The body is read up to one
    byte past DATA_UPLOAD_MAX_MEMORY_SIZE, so an oversized one still gets the API's 413.

    An import (``STREAMED``) reads its body as a stream, with a limit of its own
    (ENGRAM_IMPORT_MAX_BYTES): it is left unread, and Django is told a length one byte past that
    limit, so that it reads to the body's end and the import can refuse what goes beyond.
    """

    STREAMED = re.compile(r"/api/v1/buckets/[^/]+/import")

    def __init__(self, app, limit: int, streamed_limit: int):
        self.app, self.limit, self.streamed_limit = app, limit, streamed_limit

    def __call__(self, environ, start_response):
        if not environ.get("CONTENT_LENGTH") and "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower():
            if self.STREAMED.fullmatch(environ.get("PATH_INFO", "")):
                environ["CONTENT_LENGTH"] = str(self.streamed_limit + 1)
            else:
                body = environ["wsgi.input"].read(self.limit + 1)
                environ["wsgi.input"] = io.BytesIO(body)
                environ["CONTENT_LENGTH"] = str(len(body))
        return self.app(environ, start_response)


application = get_wsgi_application()

from django.conf import settings  # noqa: E402

application = ChunkedBodies(application, settings.DATA_UPLOAD_MAX_MEMORY_SIZE, settings.ENGRAM_IMPORT_MAX_BYTES)

# Every module a request reaches through the URLs (views, serializers, services), imported now
# rather than by a worker's first request (2-4 s on a loaded 2-core machine): gunicorn's master
# does it before it binds its port (preload_app), and the workers it forks have them. Plain
# imports: no thread starts and no connection opens.
get_resolver().url_patterns  # noqa: B018 (the access imports them)


def _load_before_fork() -> None:
    """What a worker's first write would otherwise load (about 10 s on a loaded 2-core machine):
    the lemmatizer (spaCy's lookup tables; spaCy imports PyTorch) and the tokenizer that counts
    a text's tokens (transformers). Loaded here, in gunicorn's master before it binds, they reach
    every worker through the fork. Neither starts a thread when loaded (PyTorch's and the
    tokenizer's thread pools start on their first parallel use, which happens in a worker); the
    embedding model, whose ONNX Runtime session does start threads, stays per worker. A failure
    is the first write's to report, as without this."""
    from engram_site.providers import embedding, lemmatizer

    for load in (lemmatizer.preload, embedding.preload_tokenizer):
        # A missing package or model: the write path reports it, as without this.
        with contextlib.suppress(Exception):
            load()


if settings.ENGRAM_PRELOAD_MODELS:
    _load_before_fork()


def start_worker() -> None:
    """What a web worker process starts for itself, once: the OTLP exporter (when tracing is
    configured) and the embedding model's warm-up (ENGRAM_PRELOAD_MODELS). gunicorn calls it in
    each worker (engram_site/gunicorn_config.py, ``post_worker_init``): its master imports this
    module before forking the workers, and threads started there would not survive the fork.
    Another WSGI server would call it in each of its processes."""
    from engram_site import tracing, warmup

    tracing.configure()
    if settings.ENGRAM_PRELOAD_MODELS:
        warmup.warm_up()
