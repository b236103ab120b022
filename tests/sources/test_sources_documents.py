"""Documents in: chunks by headings and paragraphs, atomic memories linked to their chunk."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memories.models import Memory
from sources.chunking import chunk_document
from sources.models import ChunkStatus, Source, SourceChunk, SourceChunkMemory, SourceStatus
from sources.services.process import source_process
from sources.services.submit import source_submit_document

pytestmark = pytest.mark.django_db

HANDBOOK = """# Maya's household notes

Maya Okafor works nights as a pediatric ER nurse at St. Brennan's Hospital.

## Pets

- Biscuit: a beagle, born in 2018. He barks at delivery trucks.
- Pepper: a retired racing greyhound, adopted in **May 2023**.

Hi all! Thanks!

## Car

The family car is a 2019 Toyota Sienna. It was bought used in March 2022 for $24,500.
Oil changes happen every 5,000 miles at [Sam's Garage](https://example.com/sams).

```python
print("code is not a statement")
```

| item | due |
|---|---|
| registration | 2025-06-30 |
"""


def submit(bucket, text=HANDBOOK, **kwargs):
    return source_submit_document(bucket=bucket, title=kwargs.pop("title", "Household"), text=text, **kwargs)


def memories_of(source):
    links = (
        SourceChunkMemory.objects.filter(source_id=source.pk)
        .select_related("chunk")
        .order_by("chunk__ordinal", "position")
    )
    return [(link.chunk.ordinal, Memory.objects.get(pk=link.memory_id).content) for link in links]


def test_markdown_becomes_heading_bounded_chunks():
    chunks = chunk_document(HANDBOOK)
    assert [c.heading for c in chunks] == [
        "Maya's household notes",
        "Maya's household notes > Pets",
        "Maya's household notes > Car",
    ]
    assert "Biscuit" in chunks[1].text and "Sienna" in chunks[2].text
    assert "print(" in chunks[2].text  # chunks keep the raw text, code included (provenance)


def test_chunks_are_bounded_and_cut_between_sentences():
    text = "# Big\n\n" + " ".join(f"Sentence number {i} is about item {i}." for i in range(400))
    chunks = chunk_document(text, max_chars=500)
    assert len(chunks) > 10
    assert all(len(c.text) <= 500 for c in chunks)
    assert all(c.text.endswith(".") for c in chunks)
    assert all(c.heading == "Big" for c in chunks)


def test_a_markdown_document_becomes_atomic_memories_linked_to_their_chunks(bucket):
    result = submit(bucket)
    source = result.source
    assert not result.deduplicated
    assert source.status == SourceStatus.PENDING and source.chunks_total == 3
    report = source_process(source_id=source.pk)
    assert report.status == "done" and report.chunks == 3

    source.refresh_from_db()
    assert source.status == SourceStatus.DONE and source.chunks_done == 3 and source.finished_at
    assert set(SourceChunk.objects.filter(source=source).values_list("status", flat=True)) == {ChunkStatus.DONE}
    got = memories_of(source)
    contents = [c for _, c in got]
    assert (0, "Maya Okafor works nights as a pediatric ER nurse at St. Brennan's Hospital.") in got
    # List items are statements of their own; the heading is context where one needs it.
    assert (1, "Pets: Biscuit: a beagle, born in 2018. He barks at delivery trucks.") in got
    assert any(c.startswith("Pets: Pepper: a retired racing greyhound, adopted in May 2023") for c in contents)
    # Markdown is gone, dates and numbers are kept, code is not a memory, greetings are dropped.
    assert any("$24,500" in c and "March 2022" in c for c in contents)
    assert any("Sam's Garage" in c and "](" not in c for c in contents)
    assert not any("print(" in c or "Thanks" in c or c.startswith("Hi") for c in contents)
    assert any("registration" in c and "2025-06-30" in c for c in contents)
    assert source.memories_created == len(got) == Memory.objects.for_bucket(bucket).count()
    assert source.dropped >= 2


def test_document_memories_form_one_sequence_in_document_order(bucket):
    created_at = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
    source = submit(bucket, created_at=created_at, agent_id="notes-agent").source
    source_process(source_id=source.pk)
    memories = list(Memory.objects.for_bucket(bucket).order_by("created_at"))
    assert {m.run_id for m in memories} == {str(source.pk)}  # no run given: the source is the run
    assert {m.agent_id for m in memories} == {"notes-agent"}
    assert all(m.created_at >= created_at and (m.created_at - created_at).total_seconds() < 1 for m in memories)
    ordered = [m.content for m in memories]
    assert [c for _, c in memories_of(source)] == ordered
    # Sequence context: later memories carry their predecessors.
    assert memories[1].context_text == memories[0].content


def test_resubmitting_an_identical_document_returns_the_same_source_and_writes_nothing(bucket):
    first = submit(bucket).source
    source_process(source_id=first.pk)
    count = Memory.objects.count()
    again = submit(bucket, metadata={"note": "metadata does not make it a new source"})
    assert again.deduplicated and again.source.pk == first.pk and again.source.status == SourceStatus.DONE
    assert source_process(source_id=first.pk).status == "done"
    assert Memory.objects.count() == count and Source.objects.count() == 1
    # A changed text is a new source, and its repeated statements deduplicate onto existing memories.
    changed = submit(bucket, text=HANDBOOK + "\nThe Sienna's plate is KLM-2041.\n").source
    assert changed.pk != first.pk
    source_process(source_id=changed.pk)
    changed.refresh_from_db()
    first.refresh_from_db()
    assert changed.memories_created == 1 and changed.memories_deduplicated == first.memories_created
    assert (
        not SourceChunkMemory.objects.filter(source_id=changed.pk, created=True)
        .exclude(memory__content__contains="KLM-2041")
        .exists()
    )


def test_the_same_document_in_another_bucket_is_another_source(bucket, tenant):
    from memories.services.buckets import bucket_create

    other = bucket_create(tenant=tenant, name="second")
    assert submit(bucket).source.pk != submit(other).source.pk


def test_plain_text_and_heading_context_only_where_a_sentence_needs_it(bucket):
    text = "Ravi's flat is in Gundeldingen, Basel.\n\nThe lease started on 1 June 2024. It costs CHF 1,850 a month."
    source = submit(bucket, text=text, title="Lease").source
    source_process(source_id=source.pk)
    assert [c for _, c in memories_of(source)] == [
        "Ravi's flat is in Gundeldingen, Basel.",  # names what it is about
        "The lease started on 1 June 2024.",  # mentions the subject already
        "Lease: It costs CHF 1,850 a month.",  # "it" needs the heading
    ]
