"""Conversations in: messages distilled into memories with the right attribution, times and ids."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memories.models import Memory
from sources.models import SourceChunk, SourceChunkMemory, SourceStatus
from sources.services.process import source_process
from sources.services.submit import MessageInput, source_submit_conversation

pytestmark = pytest.mark.django_db

T0 = datetime(2024, 5, 4, 18, 30, tzinfo=UTC)


def message(role, content, minutes=None, **kwargs):
    return MessageInput(role=role, content=content, timestamp=T0 + timedelta(minutes=minutes) if minutes is not None
                        else None, **kwargs)  # fmt: skip


CHAT = [
    message("user", "hey! how are you?", 0),
    message("assistant", "Hi! I'm doing well, thanks. How can I help?", 1),
    message("user", "ugh, I moved to Lisbon last month and I still haven't found a dentist", 2),
    message(
        "assistant",
        "Moving is a lot. Lisbon has many English-speaking dentists in Príncipe Real. How old is your daughter Zuri?",
        3,
    ),  # fmt: skip
    message("user", "9 already!", 4),
    message(
        "assistant", "Then a paediatric dentist is worth it: Clínica Sorriso in Campo de Ourique sees children.", 5
    ),
    message("user", "thanks!! lol", 6),
    message("user", "ok", 7),
]


def submit(bucket, messages=CHAT, **kwargs):
    return source_submit_conversation(bucket=bucket, messages=messages, **kwargs).source


def memories_by_chunk(source):
    out: dict[int, list[Memory]] = {}
    for link in (
        SourceChunkMemory.objects.filter(source_id=source.pk)
        .select_related("chunk")
        .order_by("chunk__ordinal", "memory__created_at")
    ):
        out.setdefault(link.chunk.ordinal, []).append(Memory.objects.get(pk=link.memory_id))
    return out


def test_user_and_assistant_messages_become_memories_with_attribution_and_times(bucket):
    source = submit(bucket, agent_id="helper")
    assert source.chunks_total == len(CHAT)
    assert source_process(source_id=source.pk).status == "done"
    by_chunk = memories_by_chunk(source)

    [moved] = by_chunk[2]
    assert moved.content == "I moved to Lisbon last month and I still haven't found a dentist"
    assert moved.attributed_to == "user" and moved.agent_id == "helper"
    assert moved.created_at == T0 + timedelta(minutes=2)  # the message's time
    assert moved.run_id == str(source.pk)  # no run given: the conversation is the run

    assistant = by_chunk[3][:3]  # (the fourth is the user's answer, which cites this message)
    assert [m.content for m in assistant] == [
        "Moving is a lot.",
        "Lisbon has many English-speaking dentists in Príncipe Real.",
        "How old is your daughter Zuri?",  # a question that names someone is kept
    ]
    assert {m.attributed_to for m in assistant} == {"assistant"}
    # Statements of one message keep their order, a microsecond apart.
    assert assistant[2].created_at - assistant[1].created_at == timedelta(microseconds=1)
    assert by_chunk[5][0].content.startswith("Then a paediatric dentist is worth it")


def test_trivial_messages_are_dropped(bucket):
    source = submit(bucket)
    source_process(source_id=source.pk)
    by_chunk = memories_by_chunk(source)
    # "hey! how are you?", the assistant's pleasantries, "thanks!! lol" and "ok" make no memory.
    assert 0 not in by_chunk and 1 not in by_chunk and 6 not in by_chunk and 7 not in by_chunk
    contents = " ".join(m.content for m in Memory.objects.for_bucket(bucket))
    assert "thanks" not in contents.lower() and "how are you" not in contents.lower()
    chunks = {c.ordinal: c for c in SourceChunk.objects.filter(source=source)}
    assert chunks[0].dropped == 2 and chunks[7].dropped == 1 and chunks[7].statements == 0
    source.refresh_from_db()
    assert source.status == SourceStatus.DONE and source.chunks_done == len(CHAT) and source.dropped >= 6


def test_a_short_answer_carries_its_question_and_cites_both_messages(bucket):
    source = submit(bucket)
    source_process(source_id=source.pk)
    [answer] = memories_by_chunk(source)[4]
    assert answer.content == "How old is your daughter Zuri? 9 already!"
    assert answer.attributed_to == "user" and answer.created_at == T0 + timedelta(minutes=4)
    # Provenance: the answer's message created it; the question's message is cited too.
    links = set(SourceChunkMemory.objects.filter(memory_id=answer.pk).values_list("chunk__ordinal", "created"))
    assert links == {(4, True), (3, False)}


def test_speaker_resolves_first_person_in_user_messages(bucket):
    messages = [
        message("user", "I moved to Lisbon in March. My sister Ana lives in Porto.", 0),
        message("user", "I work nights and I'm training for a marathon.", 1),
        message("assistant", "I can draft a training plan around your shifts.", 2),
    ]
    source = submit(bucket, messages=messages, speaker="Maya", resolve_first_person=True)
    source_process(source_id=source.pk)
    contents = [m.content for ms in memories_by_chunk(source).values() for m in ms]
    assert contents == [
        "Maya moved to Lisbon in March.",
        "Maya's sister Ana lives in Porto.",
        "Maya works nights and Maya is training for a marathon.",
        "I can draft a training plan around your shifts.",  # the assistant's "I" is not Maya
    ]
    actors = {m.attributed_to: m.source_actor_id for m in Memory.objects.for_bucket(bucket)}
    assert actors == {"user": "Maya", "assistant": None}


def test_first_person_stays_by_default_and_the_speaker_is_the_actor(bucket):
    messages = [message("user", "I moved to Lisbon in March.", 0)]
    source = submit(bucket, messages=messages, speaker="Maya")
    source_process(source_id=source.pk)
    [memory] = Memory.objects.for_bucket(bucket)
    assert (memory.content, memory.attributed_to, memory.source_actor_id) == (
        "I moved to Lisbon in March.",
        "user",
        "Maya",
    )


def test_message_name_and_ids_override_the_conversation(bucket):
    messages = [
        message("user", "I adopted a greyhound called Pepper.", 0, name="Dele", run_id="run-7", agent_id="a2"),
        message("assistant", "Pepper is a lovely name for a greyhound from the track.", 1),
    ]
    source = submit(
        bucket, messages=messages, speaker="Maya", resolve_first_person=True, agent_id="a1", run_id="run-1",
        source_actor_id="acct-9",
    )  # fmt: skip
    source_process(source_id=source.pk)
    by_chunk = memories_by_chunk(source)
    [user] = by_chunk[0]
    assert user.content == "Dele adopted a greyhound called Pepper."
    assert (user.source_actor_id, user.run_id, user.agent_id) == ("Dele", "run-7", "a2")
    [assistant] = by_chunk[1]
    assert (assistant.source_actor_id, assistant.run_id, assistant.agent_id) == ("acct-9", "run-1", "a1")


def test_messages_without_timestamps_keep_their_order(bucket):
    messages = [
        MessageInput(role="user", content="My first car was a 2009 Honda Fit."),
        MessageInput(role="user", content="Now I drive a 2021 Kia Niro hybrid."),
    ]
    source = submit(bucket, messages=messages)
    source_process(source_id=source.pk)
    first, second = (ms[0] for ms in memories_by_chunk(source).values())
    assert first.created_at < second.created_at
    assert second.context_text == first.content  # one sequence: the second carries the first as context


def test_resubmitting_a_conversation_dedups(bucket):
    source = submit(bucket)
    source_process(source_id=source.pk)
    count = Memory.objects.count()
    again = source_submit_conversation(bucket=bucket, messages=CHAT)
    assert again.deduplicated and again.source.pk == source.pk
    assert Memory.objects.count() == count
    # Another speaker changes the memories: a different source.
    assert not source_submit_conversation(bucket=bucket, messages=CHAT, speaker="Maya").deduplicated
