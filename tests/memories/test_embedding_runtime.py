"""The embedding model on ONNX Runtime: same vectors as torch, exported once, and torch
whenever the export cannot be trusted."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from django.conf import settings

from engram_site.providers import embedding, onnx_encoder

TEXTS = [
    "Our dog Biscuit is a golden retriever who loves the beach.",
    "hi",
    "What did I say about the quarterly report?",
    "Mein Bruder wohnt in Köln und arbeitet bei der Bahn.",
    "ThinkPad X1 Carbon, 14-inch, bought in March 2024 for 1,249 euros. " * 30,  # past 256 tokens
    "",
]


# ONNX exports made and checked against torch: minutes of CPU.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def torch_model():
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(embedding._model_path(), device="cpu")


@pytest.fixture
def model_dir() -> Path:
    return Path(embedding._model_path())


@pytest.fixture
def fresh_model(monkeypatch):
    """get_model() loads anew (and the previous model is back afterwards)."""
    monkeypatch.setattr(embedding, "_models", {})
    monkeypatch.setattr(embedding, "_last_failure", {})
    embedding._embed_query_cached.cache_clear()
    yield
    embedding._embed_query_cached.cache_clear()


def reference(torch_model, texts, batch_size=64):
    return torch_model.encode(texts, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)


def test_the_server_runs_the_model_on_onnx_by_default():
    embedding.get_model()
    assert settings.ENGRAM_EMBEDDING_RUNTIME == "onnx"
    assert embedding.runtime() == "onnx"


def test_onnx_vectors_equal_torch_vectors_batched_and_one_by_one(torch_model):
    model = embedding.get_model()
    assert embedding.runtime() == "onnx"
    expected = reference(torch_model, TEXTS)
    for batch_size in (64, 2):  # padding to the longest text of a batch must not move a vector
        got = model.encode(TEXTS, batch_size=batch_size)
        assert got.shape == (len(TEXTS), embedding.DIMENSIONS) and got.dtype == np.float32
        assert np.abs(got - expected).max() < 1e-5
    one_by_one = np.vstack([embedding.embed_texts([t]) for t in TEXTS])
    assert np.abs(one_by_one - expected).max() < 1e-5
    assert np.allclose(np.linalg.norm(one_by_one, axis=1), 1.0, atol=1e-5)
    assert embedding.embed_texts([]).shape == (0, embedding.DIMENSIONS)


def test_long_texts_are_cut_where_torch_cuts_them(torch_model):
    model = embedding.get_model()
    long_text = "alpha beta gamma " * 400
    assert model.max_seq_length == torch_model.max_seq_length == 256
    # Only the first 256 tokens count: a different tail changes nothing.
    assert np.abs(model.encode([long_text]) - model.encode([long_text + "delta epsilon " * 100])).max() < 1e-6
    assert np.abs(model.encode([long_text]) - reference(torch_model, [long_text])).max() < 1e-5


@pytest.fixture(scope="module")
def first_export(tmp_path_factory):
    """An export into an empty cache folder, made once for the tests that only read it (an export
    and its check against torch: seconds of CPU). Returns the folder and the encoder."""
    folder = tmp_path_factory.mktemp("onnx-cache")
    return folder, onnx_encoder.exported_model(Path(embedding._model_path()), folder, 1, name="m")


def test_the_export_is_made_once_and_then_reused(first_export, model_dir, monkeypatch):
    folder, first = first_export
    files = sorted(p.name for p in folder.glob("*.onnx"))
    assert files == [first.path.name] and not list(folder.glob("*.partial"))

    def no_export(*args):
        raise AssertionError("exported again")

    monkeypatch.setattr(onnx_encoder, "_export", no_export)
    second = onnx_encoder.exported_model(model_dir, folder, 1, name="m")
    assert second.path == first.path
    assert np.array_equal(second.encode(TEXTS[:3]), first.encode(TEXTS[:3]))


def test_a_corrupted_export_on_disk_is_made_again(first_export, tmp_path, model_dir):
    _folder, first = first_export
    corrupted = tmp_path / first.path.name  # where this cache folder keeps its export
    corrupted.write_bytes(b"not an onnx graph")
    again = onnx_encoder.exported_model(model_dir, tmp_path, 1, name="m")
    assert again.path == corrupted and again.path.stat().st_size > 1_000_000
    assert np.abs(again.encode(TEXTS[:3]) - first.encode(TEXTS[:3])).max() < 1e-6


def test_an_export_that_disagrees_with_torch_is_not_kept(tmp_path, model_dir, monkeypatch):
    monkeypatch.setattr(onnx_encoder, "_verify", lambda encoder, model_dir: 0.25)
    with pytest.raises(onnx_encoder.ExportFailed, match="differ"):
        onnx_encoder.exported_model(model_dir, tmp_path, 1, name="m")
    assert list(tmp_path.iterdir()) == [tmp_path / ".export.lock"]  # neither the graph nor a partial file


@pytest.mark.parametrize("failure", ["export-raises", "onnxruntime-missing"])
def test_without_a_usable_export_the_model_runs_on_torch(
    failure, fresh_model, tmp_path, monkeypatch, caplog, torch_model
):
    monkeypatch.setattr(settings, "ENGRAM_MODEL_CACHE", tmp_path)
    if failure == "export-raises":

        def broken(model_dir, target):
            Path(target).write_bytes(b"half a file")
            raise RuntimeError("exporter crashed")

        monkeypatch.setattr(onnx_encoder, "_export", broken)
    else:
        import builtins

        real_import = builtins.__import__

        def no_onnxruntime(name, *args, **kwargs):
            if name == "onnxruntime":
                raise ImportError("No module named 'onnxruntime'")
            return real_import(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", no_onnxruntime)
    with caplog.at_level(logging.WARNING, logger="engram_site.providers.embedding"):
        vectors = embedding.embed_texts(TEXTS[:3])
    assert embedding.runtime() == "torch"
    assert "using torch" in caplog.text
    assert np.abs(vectors - reference(torch_model, TEXTS[:3])).max() < 1e-6
    assert not list(tmp_path.glob("*.onnx")) and not list(tmp_path.glob("*.partial"))


def test_the_torch_runtime_can_be_chosen(fresh_model, monkeypatch, torch_model):
    monkeypatch.setattr(settings, "ENGRAM_EMBEDDING_RUNTIME", "torch")
    vectors = embedding.embed_texts(TEXTS[:2])
    assert embedding.runtime() == "torch"
    assert np.abs(vectors - reference(torch_model, TEXTS[:2])).max() < 1e-6


def test_counting_tokens_while_another_thread_embeds_changes_no_vector():
    # Ingest counts tokens in the request thread while the model embeds the first chunk in
    # a helper thread (and a search may embed its query meanwhile): counting must not touch
    # the truncation and padding the model's tokenizer works with.
    import threading

    texts = TEXTS * 2
    expected = embedding.embed_texts(texts)
    counts = embedding.count_tokens(texts)
    assert counts[4] > 256  # counted without truncation
    errors, results = [], []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            try:
                assert embedding.count_tokens(texts) == counts
            except Exception as exc:
                errors.append(exc)
                return

    counter = threading.Thread(target=count)
    counter.start()
    try:
        for _ in range(4):
            results.append(embedding.embed_texts(texts, batch_size=4))
    except Exception as exc:
        errors.append(exc)
    finally:
        stop.set()
        counter.join()
    assert errors == []
    for vectors in results:
        assert np.abs(vectors - expected).max() < 1e-4


# --- batches by token count --------------------------------------------------------------


class _RecordingSession:
    """Wraps an ONNX session and records the shape of every batch it runs."""

    def __init__(self, session):
        self.session = session
        self.shapes: list[tuple[int, int]] = []

    def run(self, outputs, feed):
        self.shapes.append(feed["input_ids"].shape)
        return self.session.run(outputs, feed)


def test_a_batch_holds_texts_of_similar_token_counts_within_the_token_budget(torch_model, monkeypatch):
    model = embedding.get_model()
    recording = _RecordingSession(model.session)
    monkeypatch.setattr(model, "session", recording)
    long_text, short_text = "alpha beta gamma " * 200, "hi"  # 256 tokens once cut, and 3
    texts = [short_text, long_text] * 30 + [long_text] * 10
    got = model.encode(texts, batch_size=64)
    expected = dict(zip((long_text, short_text), reference(torch_model, [long_text, short_text]), strict=True))
    assert np.abs(got - np.vstack([expected[t] for t in texts])).max() < 1e-5
    # 40 texts of 256 tokens, 16 at a time (the last 8 alone); the 30 short ones together,
    # padded to 3 tokens, not 256.
    assert onnx_encoder.MAX_BATCH_TOKENS == 64 * 64
    assert sorted(recording.shapes) == [(8, 256), (16, 256), (16, 256), (30, 3)]
