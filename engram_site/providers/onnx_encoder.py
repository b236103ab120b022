"""all-MiniLM-L6-v2 on ONNX Runtime: the same weights, a lighter runtime.

The ONNX graph is exported once from the installed model package (no download: the
weights are the package's own) into ``ENGRAM_MODEL_CACHE``, named by a hash of the
weight, config and tokenizer files, and checked against sentence-transformers on
:data:`PROBE_TEXTS` before it is kept: a graph whose vectors differ by more than
:data:`MAX_DIFFERENCE` in any component is thrown away and the caller falls back to torch.
Measured on 2-core development machines: a one-question embedding in 2.9-3.1 ms instead of
5.9-6.6 ms, vectors equal to 2e-7; batches, once run by token counts (see
:meth:`OnnxSentenceEncoder.encode`), 16% faster than torch for memory texts and 10% for
context texts (bench/results/embedding-runtime-2026-11-24-intel-tokens.md; ~7% slower before).

:class:`OnnxSentenceEncoder` answers ``encode()`` like ``SentenceTransformer`` for the
arguments Engram passes, with the same tokenizer, truncation (``max_seq_length``), mean
pooling over the attention mask and L2 normalisation.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import warnings
from pathlib import Path

import numpy as np

from engram_site.locks import file_lock

logger = logging.getLogger(__name__)

# Bump when the export itself changes (opset, inputs, wrapper): old files are then ignored.
EXPORT_VERSION = 1
OPSET = 17
MAX_DIFFERENCE = 1e-4
# Padded tokens per model batch at most: 64 texts of up to 64 tokens, 16 of the longest (256).
# It bounds the activations a run allocates, which the runtime keeps for the next: a process
# that embedded 256 texts of 256 tokens peaked at 722 MB instead of 1416 MB with batches of 64,
# and embedded them faster, not slower (bench/README.md).
MAX_BATCH_TOKENS = 64 * 64
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
PROBE_TEXTS = [
    "My sister Anna works as a nurse in Boston.",
    "ok",
    "I prefer dark roast coffee in the morning, but since March I have switched to green tea. " * 8,
    "Der Zug nach München fährt um 7:45 Uhr — 東京 is far away.",
]


class ExportFailed(RuntimeError):
    pass


def _config(model_dir: Path) -> dict:
    """What the sentence-transformers files say the model does after the transformer."""
    modules = json.loads((model_dir / "modules.json").read_text())
    kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
    if kinds[:2] != ["Transformer", "Pooling"] or any(k != "Normalize" for k in kinds[2:]):
        raise ExportFailed(f"unsupported module stack {kinds}")
    pooling_path = next(m["path"] for m in modules if m["type"].endswith("Pooling"))
    pooling = json.loads((model_dir / pooling_path / "config.json").read_text())
    others = ("pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens")
    if not pooling.get("pooling_mode_mean_tokens") or any(pooling.get(k) for k in others):
        raise ExportFailed("only mean pooling is supported")
    bert = json.loads((model_dir / "sentence_bert_config.json").read_text())
    return {"max_seq_length": int(bert.get("max_seq_length", 256)), "lower": bool(bert.get("do_lower_case", False))}


def model_key(model_dir: Path) -> str:
    digest = hashlib.sha256(f"export-v{EXPORT_VERSION}-opset{OPSET}".encode())
    for name in ("model.safetensors", "config.json", "tokenizer.json", "modules.json", "sentence_bert_config.json"):
        path = model_dir / name
        if path.exists():
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()[:16]


def _export(model_dir: Path, target: Path) -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    class LastHiddenState(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    # Eager attention traces to plain matmuls and softmax, valid for every batch and length.
    model = LastHiddenState(AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval())
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    sample = tokenizer(["a b", "a longer sample"], padding=True, return_tensors="pt")
    dynamic = {name: {0: "batch", 1: "tokens"} for name in (*_INPUTS, "last_hidden_state")}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            tuple(sample[name] for name in _INPUTS),
            str(target),
            input_names=list(_INPUTS),
            output_names=["last_hidden_state"],
            dynamic_axes=dynamic,
            opset_version=OPSET,
            dynamo=False,
        )


def _verify(encoder: OnnxSentenceEncoder, model_dir: Path) -> float:
    """Largest difference between this encoder's vectors and sentence-transformers' on the probes."""
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(model_dir), device="cpu").encode(
        PROBE_TEXTS, batch_size=len(PROBE_TEXTS), normalize_embeddings=True, show_progress_bar=False
    )
    # In one padded batch and one at a time: padding must not change a vector.
    batched = encoder.encode(PROBE_TEXTS, batch_size=len(PROBE_TEXTS))
    single = np.vstack([encoder.encode([text]) for text in PROBE_TEXTS])
    return float(max(np.abs(batched - reference).max(), np.abs(single - reference).max()))


def exported_model(model_dir: Path, cache_dir: Path, threads: int, *, name: str) -> OnnxSentenceEncoder:
    """The verified ONNX encoder of the model in ``model_dir``, exporting it first if the
    cache has none (one process exports; the others wait for it). ExportFailed otherwise."""
    key = model_key(model_dir)
    target = cache_dir / f"{name}-{key}.onnx"
    with file_lock(cache_dir / ".export.lock"):
        if target.exists():
            try:
                return OnnxSentenceEncoder(target, model_dir, threads)
            except Exception:  # truncated or corrupted on disk: export it again
                logger.warning("unreadable exported model %s; exporting it again", target, exc_info=True)
                target.unlink()
        partial = target.with_suffix(f".{os.getpid()}.partial")
        try:
            _export(model_dir, partial)
            encoder = OnnxSentenceEncoder(partial, model_dir, threads)
            difference = _verify(encoder, model_dir)
            if difference > MAX_DIFFERENCE:
                raise ExportFailed(f"ONNX vectors differ from the model's by up to {difference:.2e}")
            os.replace(partial, target)  # the session holds the graph in memory already
            encoder.path = target
            logger.info("exported the embedding model to %s (max difference %.1e)", target, difference)
        except ExportFailed:
            raise
        except Exception as exc:
            raise ExportFailed(f"ONNX export failed: {exc}") from exc
        finally:
            partial.unlink(missing_ok=True)
    return encoder


class OnnxSentenceEncoder:
    """Sentence embeddings from an exported graph: tokenise, run, mean-pool, normalise."""

    def __init__(self, onnx_path: Path, model_dir: Path, threads: int):
        import onnxruntime
        from transformers import AutoTokenizer

        config = _config(model_dir)
        self.max_seq_length = config["max_seq_length"]
        self._lower = config["lower"]
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = max(1, threads)
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        if os.environ.get("ENGRAM_ORT_SPIN", "0") != "1":
            # Idle intra-op threads sleep instead of spinning: on a small machine a spinning
            # thread takes the core the database needs for the same search.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = onnxruntime.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
        self.path = Path(onnx_path)
        self._tokenizer_lock = threading.Lock()
        self._pad_id = self.tokenizer.pad_token_id or 0

    def encode(self, texts, batch_size: int = 64, normalize_embeddings: bool = True, **_ignored) -> np.ndarray:
        """Vectors for ``texts`` (float32, one row each, input order).

        The texts are tokenised once, then run longest first in batches of similar token
        counts (little padding), each batch at most ``batch_size`` texts and MAX_BATCH_TOKENS
        padded tokens: a batch of long texts is smaller, so the activations it allocates
        (and the memory the runtime keeps for them) stay bounded.
        A text's vector does not depend on the batch it runs in.
        """
        if isinstance(texts, str):
            texts = [texts]
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        if self._lower:
            texts = [text.lower() for text in texts]
        # The tokenizer is not used by two threads at once (searches embed their questions
        # side by side): its padding and truncation settings are shared state.
        with self._tokenizer_lock:
            ids = self.tokenizer(texts, truncation="longest_first", max_length=self.max_seq_length)["input_ids"]
        order = sorted(range(len(texts)), key=lambda i: -len(ids[i]))
        batches = []
        start = 0
        while start < len(order):
            longest = len(ids[order[start]])
            end = min(len(order), start + max(1, min(batch_size, MAX_BATCH_TOKENS // longest)))
            # No text padded to more than twice its length: a much shorter one starts the next batch.
            while end - start > 1 and 2 * len(ids[order[end - 1]]) < longest:
                end -= 1
            batches.append(order[start:end])
            start = end
        results = [self._run([ids[i] for i in chosen], normalize_embeddings) for chosen in batches]
        out = np.empty((len(texts), results[0].shape[1]), dtype=np.float32)
        for chosen, vectors in zip(batches, results, strict=True):
            out[chosen] = vectors
        return out

    def _run(self, batch: list[list[int]], normalize: bool) -> np.ndarray:
        """One model batch of token ids: pad, run, mean-pool over the real tokens, normalise."""
        width = max(len(ids) for ids in batch)
        input_ids = np.full((len(batch), width), self._pad_id, dtype=np.int64)
        attention_mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = ids
            attention_mask[row, : len(ids)] = 1
        feed = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": np.zeros_like(input_ids)}
        hidden = self.session.run(None, feed)[0]
        mask = attention_mask[..., None].astype(np.float32)
        vectors = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        if normalize:
            vectors /= np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
        return vectors.astype(np.float32, copy=False)
