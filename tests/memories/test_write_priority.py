"""A write's vectors are made below the searches' priority (ENGRAM_WRITE_NICE): the write path's
embedding threads are lowered for their life, and the model runs for them on a second session whose
runtime threads were created by a lowered thread and so are lowered too. The vectors are the same.
(The test settings leave ENGRAM_WRITE_NICE at 0: here it is the subject.)"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from engram_site import db_priority
from engram_site.providers import embedding
from memories.services.ingest import insert

pytestmark = pytest.mark.skipif(not hasattr(os, "getpriority"), reason="thread priorities (Linux)")


def _nice(thread_id: int | None = None) -> int:
    return os.getpriority(os.PRIO_PROCESS, thread_id or threading.get_native_id())


def _threads() -> dict[int, int]:
    """This process's threads and their nice values."""
    found = {}
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # ended meanwhile
            found[int(task)] = _nice(int(task))
    return found


def _in_lowered_thread(nice: int, work):
    with ThreadPoolExecutor(max_workers=1, initializer=db_priority.lower_this_thread, initargs=(nice,)) as pool:
        return pool.submit(work).result()


def test_lowering_a_thread_leaves_the_others_and_passes_to_the_threads_it_starts():
    process = _nice(os.getpid())

    def work():
        seen = {"self": _nice(), "lowered": db_priority.this_thread_lowered()}
        child = threading.Thread(target=lambda: seen.update(child=_nice()))
        child.start()
        child.join()
        return seen

    seen = _in_lowered_thread(min(19, process + 5), work)
    assert seen == {"self": min(19, process + 5), "lowered": True, "child": min(19, process + 5)}
    assert _nice() == process and not db_priority.this_thread_lowered()


def test_the_write_paths_embedding_threads_are_lowered_by_the_setting(settings):
    settings.ENGRAM_WRITE_NICE = min(19, _nice(os.getpid()) + 5)
    assert insert._embed_executor._initializer is insert._lower_embedding_thread
    with ThreadPoolExecutor(max_workers=1, initializer=insert._lower_embedding_thread) as pool:
        assert pool.submit(_nice).result() == settings.ENGRAM_WRITE_NICE


def test_a_lowered_thread_embeds_on_lowered_runtime_threads_and_gets_the_same_vectors(monkeypatch):
    texts = ["Maya moved from Lisbon to Porto in March 2025.", "The team standup is at 9:30 every weekday."]
    plain = embedding.embed_texts(texts)
    loaded = embedding.get_model(embedding.MODEL_NAME)
    if not isinstance(loaded, embedding.onnx_encoder.OnnxSentenceEncoder):
        pytest.skip("the model runs on torch here: one set of threads, no second session")
    monkeypatch.setattr(embedding, "_lowered", {})  # this test makes the second session
    nice = min(19, _nice(os.getpid()) + 5)
    before = _threads()
    vectors = _in_lowered_thread(nice, lambda: embedding.embed_texts(texts))
    started = {tid: value for tid, value in _threads().items() if tid not in before}

    np.testing.assert_allclose(vectors, plain, atol=1e-6)
    assert embedding._lowered[embedding.MODEL_NAME] is not loaded, "ran on the searches' session"
    assert started, "the second session started no runtime threads"
    assert set(started.values()) == {nice}, f"runtime threads at {started}"
    # A thread that is not lowered (a search, the worker lowered whole) uses the model itself.
    assert embedding._for_this_thread(embedding.MODEL_NAME) is loaded


def test_a_web_process_makes_the_lowered_session_at_start_when_models_are_preloaded(settings, monkeypatch):
    submitted = []
    monkeypatch.setattr(insert, "_embed_executor", type("Pool", (), {"submit": lambda self, f: submitted.append(f)})())
    settings.ENGRAM_PRELOAD_MODELS, settings.ENGRAM_EMBEDDINGS_ENABLED, settings.ENGRAM_WRITE_NICE = True, True, 5
    insert.warm_up_write_embedding()
    assert submitted == [embedding.warm_up]
    for preload, enabled, nice in ((False, True, 5), (True, False, 5), (True, True, 0)):
        settings.ENGRAM_PRELOAD_MODELS, settings.ENGRAM_EMBEDDINGS_ENABLED, settings.ENGRAM_WRITE_NICE = (
            preload,
            enabled,
            nice,
        )
        insert.warm_up_write_embedding()
    assert submitted == [embedding.warm_up], "warmed up though models are not preloaded, off, or writes not lowered"

    monkeypatch.setattr(embedding, "_lowered", {})
    _in_lowered_thread(min(19, _nice(os.getpid()) + 5), embedding.warm_up)
    assert embedding.MODEL_NAME in embedding._lowered
