"""Passages of long memories: cut to fit the model's window, built after the write and by the
backfill, built again when the text, the splitter or the model changes, gone with the memory."""

from __future__ import annotations

import bisect

import pytest

from audit.services import Actor
from engram_site.providers import embedding
from maintenance.services.enrichment import PASSAGE_SWEEP_LIMIT  # noqa: F401  (the sweep's passage pass exists)
from memories import passages
from memories.models import DeletedMemory, Memory, MemoryPassage
from memories.services import memories_erase, memory_delete, memory_restore, memory_update
from memories.services.buckets import bucket_create, bucket_merge
from memories.services.passages import memory_passages_build, passages_pending_count
from tests.factories import write

pytestmark = pytest.mark.django_db

SYSTEM = Actor.system("test")

TOPICS = [
    "The boiler in the basement is serviced every March by the company from Leeds.",
    "Our cat Miso sleeps on the windowsill of the kitchen most afternoons.",
    "The quarterly budget review moved from Tuesday to Thursday at ten.",
    "Priya prefers her coffee black and never drinks it after four in the afternoon.",
    "The garden needs the hedge trimmed before the neighbours' party in June.",
    "Marco's flight to Lisbon leaves at seven in the morning from terminal two.",
]


def long_text(paragraphs: int = 12) -> str:
    """A memory far past the model's window: paragraphs of distinct sentences."""
    return "\n\n".join(
        " ".join(f"{TOPICS[(p + i) % len(TOPICS)]} Note {p}.{i} adds a detail of its own." for i in range(4))
        for p in range(paragraphs)
    )


def _passages(memory_id) -> list[MemoryPassage]:
    return list(MemoryPassage.objects.filter(memory_id=memory_id).order_by("ordinal"))


def test_a_long_text_is_cut_into_overlapping_sentence_windows_that_fit_the_model():
    text = long_text()
    spans = passages.split(text)
    offsets = embedding.token_offsets(text)
    starts = [s for s, _e in offsets]
    assert len(spans) >= 3
    assert spans[0].start == 0 and spans[-1].end == len(text)
    for before, after in zip(spans, spans[1:], strict=False):
        assert after.start <= before.end  # no gap; consecutive windows share their boundary sentences
        assert after.start > before.start
    for span in spans:
        assert bisect.bisect_left(starts, span.end) - bisect.bisect_left(starts, span.start) <= passages.PASSAGE_TOKENS
        # Whole sentences: a window starts where a sentence does and ends after one.
        assert text[span.start].isupper() and text[span.end - 1] == "."
    assert any(after.start < before.end for before, after in zip(spans, spans[1:], strict=False))


def test_a_sentence_longer_than_a_window_is_cut_between_word_pieces():
    text = " ".join(f"word{i}" for i in range(600))  # no sentence end at all
    spans = passages.split(text)
    assert len(spans) >= 3 and spans[0].start == 0 and spans[-1].end == len(text)
    starts = [s for s, _e in embedding.token_offsets(text)]
    for span in spans:
        assert bisect.bisect_left(starts, span.end) - bisect.bisect_left(starts, span.start) <= passages.PASSAGE_TOKENS


def test_a_long_memory_gets_passages_and_a_short_one_none(bucket):
    [long_id, short_id] = write(bucket, long_text(), "The boiler is serviced in March.", sequence=False)
    assert passages_pending_count(bucket=bucket) == 1
    report = memory_passages_build(bucket=bucket)
    assert (report.scanned, report.built) == (1, 1)
    rows = _passages(long_id)
    memory = Memory.objects.get(pk=long_id)
    assert [p.ordinal for p in rows] == list(range(len(rows))) and len(rows) >= 3
    assert all(p.embedding is not None and p.embedding_model == bucket.embedding_model for p in rows)
    assert all(p.text_hash == memory.text_hash and p.bucket_id == bucket.pk for p in rows)
    assert [(p.char_start, p.char_end) for p in rows] == [(s.start, s.end) for s in passages.split(memory.content)]
    assert _passages(short_id) == []
    assert passages_pending_count(bucket=bucket) == 0 and memory_passages_build(bucket=bucket).scanned == 0


def test_a_model_failure_loses_no_write_and_the_next_pass_builds_them(bucket, monkeypatch):
    def down(*args, **kwargs):
        raise embedding.EmbeddingUnavailable("the model is down")

    [memory] = write(bucket, long_text(), sequence=False)
    monkeypatch.setattr(embedding, "embed_texts", down)
    report = memory_passages_build(bucket=bucket)
    assert report.failed == 1 and "the model is down" in report.errors[0]
    assert Memory.objects.filter(pk=memory).exists() and _passages(memory) == []
    monkeypatch.undo()
    assert passages_pending_count(bucket=bucket) == 1
    assert memory_passages_build(bucket=bucket).built == 1 and _passages(memory)


def test_the_enrichment_sweep_builds_missing_passages(bucket):
    from engram_site.jobs.runner import JobRecorder
    from maintenance.services.enrichment import enrichment_sweep

    [memory] = write(bucket, long_text(), sequence=False)
    recorder = JobRecorder(None)
    enrichment_sweep(recorder=recorder)
    assert _passages(memory) and recorder.counts["passages_built"] == 1


def test_an_edit_deletes_the_passages_and_the_next_build_cuts_the_new_text(bucket):
    [memory] = write(bucket, long_text(), sequence=False)
    memory_passages_build(bucket=bucket)
    memory_update(memory=Memory.objects.get(pk=memory), content=long_text(8))
    assert _passages(memory) == []
    assert memory_passages_build(bucket=bucket).built == 1
    edited = Memory.objects.get(pk=memory)
    assert [(p.char_start, p.char_end) for p in _passages(memory)] == [
        (s.start, s.end) for s in passages.split(edited.content)
    ]
    # Edited short: nothing to build.
    memory_update(memory=Memory.objects.get(pk=memory), content="Now it is short.")
    assert _passages(memory) == [] and passages_pending_count(bucket=bucket) == 0


def test_deleted_with_the_memory_and_built_again_when_it_is_restored(bucket):
    [memory] = write(bucket, long_text(), sequence=False)
    memory_passages_build(bucket=bucket)
    memory_delete(memory=Memory.objects.get(pk=memory))
    assert not MemoryPassage.objects.filter(memory_id=memory).exists()
    memory_restore(deleted=DeletedMemory.objects.get(pk=memory))
    assert passages_pending_count(bucket=bucket) == 1
    assert memory_passages_build(bucket=bucket).built == 1 and _passages(memory)


def test_an_erasure_takes_the_passages(tenant, bucket):
    [erased] = write(bucket, long_text(), agent_id="agent-zed", sequence=False)
    [kept] = write(bucket, long_text(9), agent_id="agent-amy", sequence=False)
    memory_passages_build(bucket=bucket)
    memories_erase(tenant=tenant, fields={"agent_id": "agent-zed"}, actor=SYSTEM)
    assert not MemoryPassage.objects.filter(memory_id=erased).exists() and _passages(kept)


def test_a_bucket_merge_moves_the_passages(tenant, bucket):
    second = bucket_create(tenant=tenant, name="second")
    [moved] = write(bucket, long_text(), sequence=False)
    memory_passages_build(bucket=bucket)
    bucket_merge(source=bucket, target=second, remove_source=True, actor=SYSTEM)
    assert {p.bucket_id for p in _passages(moved)} == {second.pk}
    assert passages_pending_count(bucket=second) == 0


def test_the_backfill_resumes_and_a_new_splitter_builds_again(bucket, monkeypatch):
    ids = write(bucket, *[long_text(8 + i) for i in range(4)], sequence=False)
    assert passages_pending_count(bucket=bucket) == 4
    assert memory_passages_build(bucket=bucket, limit=2, batch_size=1).built == 2
    assert passages_pending_count(bucket=bucket) == 2  # a stopped run leaves the rest for the next
    assert memory_passages_build(bucket=bucket).built == 2
    monkeypatch.setattr(passages, "PASSAGE_VERSION", passages.PASSAGE_VERSION + 1)
    assert passages_pending_count(bucket=bucket) == 4
    assert memory_passages_build(memory_ids=ids).built == 4
    assert set(MemoryPassage.objects.for_bucket(bucket).values_list("version", flat=True)) == {passages.PASSAGE_VERSION}


def test_passages_of_another_embedding_model_are_built_again(bucket):
    [memory] = write(bucket, long_text(), sequence=False)
    memory_passages_build(bucket=bucket)
    MemoryPassage.objects.filter(memory_id=memory).update(embedding_model="some-older-model")
    assert passages_pending_count(bucket=bucket) == 1
    memory_passages_build(bucket=bucket)
    assert {p.embedding_model for p in _passages(memory)} == {bucket.embedding_model}
