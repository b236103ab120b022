"""The distillers: rules (default, no network) and the optional LLM one against a local fake endpoint."""

from __future__ import annotations

import pytest

from engram_site.providers import nlp
from memories.models import Memory
from sources.distill.configured import get_distiller
from sources.distill.llm import LLMDistiller
from sources.distill.rules import RulesDistiller
from sources.distill.sentences import sentences
from sources.distill.statements import is_filler
from sources.distill.units import RULES_VERSION, Unit
from sources.models import Source
from sources.services.process import source_process
from sources.services.submit import MessageInput, source_submit_conversation, source_submit_document
from tests.support import FakeLLM

RULES = RulesDistiller()


def texts(unit: Unit) -> list[str]:
    return [s.text for s in RULES.distill(unit).statements]


def chat(text, role="user", **kwargs) -> list[str]:
    return texts(Unit(kind="conversation", text=text, role=role, **kwargs))


@pytest.mark.parametrize(
    "text",
    ["ok", "thanks!", "Thank you so much!!", "lol", "how are you?", "hey there :)", "Good morning!", "ok cool, thx",
     "Sounds good, see you later!", "yes", "Got it.", "haha", "np", "bye!"],
)  # fmt: skip
def test_greetings_thanks_and_filler_are_dropped(text):
    result = RULES.distill(Unit(kind="conversation", text=text, role="user"))
    assert result.statements == [] and result.dropped >= 1


@pytest.mark.parametrize(
    "text",
    ["any tricks?", "what do you think?", "Repair or replace?", "What's your setup?", "is that normal?"],
)
def test_questions_without_information_are_dropped(text):
    assert chat(text, role="assistant") == []


def test_questions_that_carry_information_are_kept():
    assert chat("How old is Biscuit?", role="assistant") == ["How old is Biscuit?"]
    assert chat("should I get my sister a gift card for her 40th?") == [
        "Should I get my sister a gift card for her 40th?"
    ]


def test_dates_and_numbers_are_kept_and_interjections_trimmed():
    assert chat("ugh, my flight to Oslo is on March 3rd at 6:40am lol") == [
        "My flight to Oslo is on March 3rd at 6:40am"
    ]
    assert chat("ok so the rent went up to $1,450 in 2024. crazy") == ["The rent went up to $1,450 in 2024. Crazy"]


def test_fragments_join_their_sentence():
    assert chat("paper accepted at Bioinformatics!!! first author") == [
        "Paper accepted at Bioinformatics!!! First author"
    ]
    assert chat("finished in 5h40. everyone else had carbon road bikes") == [
        "Finished in 5h40. Everyone else had carbon road bikes"
    ]
    assert chat("We went to Porto. Great trip. The food was amazing.") == [
        "We went to Porto. Great trip.",
        "The food was amazing.",
    ]


def test_a_sentence_cut_by_the_parser_is_mended():
    assert chat("I work nights and I'm training for a marathon") == ["I work nights and I'm training for a marathon"]


def test_first_person_becomes_the_speaker_with_agreeing_verbs():
    assert chat("I'm a nurse and I work nights. My dog Biscuit is 5.", speaker="Maya") == [
        "Maya is a nurse and Maya works nights.",
        "Maya's dog Biscuit is 5.",
    ]
    assert chat("I have two kids. I don't eat meat. I've lived in Pittsburgh since 2019.", speaker="Maya") == [
        "Maya has two kids.",
        "Maya doesn't eat meat.",
        "Maya has lived in Pittsburgh since 2019.",
    ]
    assert chat("I moved to Lisbon", speaker="Maya") == ["Maya moved to Lisbon"]
    # Without a speaker, first person stays (attributed_to says who spoke).
    assert chat("I moved to Lisbon") == ["I moved to Lisbon"]


def test_a_short_answer_gets_the_question_it_answers():
    [statement] = RULES.distill(
        Unit(kind="conversation", text="5 years already!", role="user",
             previous_text="Beagles are vocal! How old is Biscuit?", previous_role="assistant")
    ).statements  # fmt: skip
    assert statement.text == "How old is Biscuit? 5 years already!" and statement.cites_previous
    # A long answer stands on its own; an answer to a pleasantry gets nothing.
    long = "He turned five in March and still acts like a puppy at the park."
    assert chat(long, previous_text="How old is Biscuit?", previous_role="assistant") == [long]
    assert chat("Fine, busy week at work", previous_text="How are you?", previous_role="assistant") == [
        "Fine, busy week at work"
    ]


def test_markdown_is_cleaned_lists_get_their_intro_and_headings_give_context():
    text = """Allergies:

- **peanuts** (anaphylaxis)
- shellfish, see [the chart](https://example.com/chart)

It was confirmed by Dr. Ruiz in 2021.

```
not = "a statement"
```
"""
    got = texts(Unit(kind="document", text=text, title="Health record", heading="Family > Zuri's health"))
    assert got == [
        "Allergies: Peanuts (anaphylaxis)",
        "Allergies: Shellfish, see the chart",
        "Zuri's health: It was confirmed by Dr. Ruiz in 2021.",
    ]


def test_units_prepared_together_give_the_statements_each_gives_alone(monkeypatch):
    """The key documents of a batch of memories split their sentences in one nlp.pipe call, with the
    parser alone: the same statements as a full parse of each."""
    units = [
        Unit(kind="conversation", text=text, role="user", speaker=speaker)
        for text, speaker in [
            ("We went to Porto. Great trip. The food was amazing.", None),
            ("I work nights and I'm training for a marathon", None),
            ("I'm a nurse and I work nights. My dog Biscuit is 5.", "Maya"),
            ("Allergies:\n\n- **peanuts** (anaphylaxis)\n- shellfish, see the chart", None),
            ("ok so the rent went up to $1,450 in 2024. crazy", None),
        ]
    ]
    alone = [[s.text for s in RulesDistiller().distill(unit).statements] for unit in units]
    parsed = []
    pipeline = nlp.get_pipeline()
    original = pipeline.pipe

    def pipe(texts, **kwargs):
        texts = list(texts)
        parsed.append(len(texts))
        return original(texts, **kwargs)

    monkeypatch.setattr(pipeline, "pipe", pipe)
    prepared = RulesDistiller()
    prepared.prepare(units)
    assert [[s.text for s in prepared.distill(unit).statements] for unit in units] == alone
    assert parsed == [4]  # one batch; the list's short items are statements without a parse


def test_the_regex_splitter_is_used_when_spacy_is_unavailable(monkeypatch):
    def unavailable():
        raise nlp.PipelineUnavailable("spaCy is not installed")

    # The provider itself refuses, so the splitter and the first-person rewriting both see it.
    monkeypatch.setattr(nlp, "get_pipeline", unavailable)
    assert sentences("Dr. Smith moved on Jan. 5 to Lisbon. She loves it! any tips? ok") == [
        "Dr. Smith moved on Jan. 5 to Lisbon.",
        "She loves it!",
        "any tips?",
        "ok",
    ]
    # No parse, no first-person rewriting.
    assert chat("I moved to Lisbon in 2023.", speaker="Maya") == ["I moved to Lisbon in 2023."]


def test_the_default_distiller_is_the_rules(settings):
    assert settings.ENGRAM_DISTILLER == "rules"
    assert get_distiller().name == RULES_VERSION
    settings.ENGRAM_DISTILLER = "llm"
    settings.ENGRAM_LLM_BASE_URL = ""
    assert get_distiller().name == RULES_VERSION  # no endpoint configured


# --- the LLM distiller against a local fake of an OpenAI-compatible endpoint -------------------------


@pytest.fixture
def llm(settings):
    def configure(fake: FakeLLM) -> None:
        settings.ENGRAM_DISTILLER = "llm"
        settings.ENGRAM_LLM_BASE_URL = fake.base_url
        settings.ENGRAM_LLM_MODEL = "fake-model"
        settings.ENGRAM_LLM_API_KEY = "sk-test"
        settings.ENGRAM_LLM_TIMEOUT = 5

    return configure


@pytest.mark.django_db
def test_llm_distiller_turns_messages_into_statements_through_the_endpoint(bucket, llm):
    def reply(body):
        text = body["messages"][-1]["content"]
        if "Lisbon" in text:
            return 200, '```json\n{"statements": ["Maya moved to Lisbon in March 2024."]}\n```'
        return 200, '{"statements": []}'

    with FakeLLM(reply) as fake:
        llm(fake)
        source = source_submit_conversation(
            bucket=bucket,
            speaker="Maya",
            resolve_first_person=True,
            messages=[
                MessageInput(role="user", content="thanks!"),
                MessageInput(role="user", content="I moved to Lisbon in March 2024"),
            ],
        ).source
        assert source_process(source_id=source.pk).status == "done"
    assert list(Memory.objects.for_bucket(bucket).values_list("content", "attributed_to", "source_actor_id")) == [
        ("Maya moved to Lisbon in March 2024.", "user", "Maya")
    ]
    source.refresh_from_db()
    assert source.distilled_by == "llm:fake-model"
    first, second = fake.requests
    assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer sk-test"
    assert first["body"]["model"] == "fake-model" and first["body"]["temperature"] == 0
    prompt = second["body"]["messages"][-1]["content"]
    assert "SPEAKER: Maya" in prompt and "ROLE: user" in prompt and "I moved to Lisbon in March 2024" in prompt
    assert "PREVIOUS MESSAGE (user): thanks!" in prompt


@pytest.mark.django_db
def test_llm_failures_fall_back_to_the_rules(bucket, llm):
    with FakeLLM(lambda body: (500, "overloaded")) as fake:
        llm(fake)
        text = "The boiler was serviced in May 2024.\n\nThe roof was redone in 2019.\n\nThe deck was stained in 2022."
        source = source_submit_document(bucket=bucket, title="Notes", text=text).source
        # (three paragraphs, one chunk: the document is small)
        assert source_process(source_id=source.pk).status == "done"
    assert len(fake.requests) == 1
    assert sorted(Memory.objects.for_bucket(bucket).values_list("content", flat=True)) == [
        "Notes: The deck was stained in 2022.",  # names nothing: the title is its context
        "Notes: The roof was redone in 2019.",
        "The boiler was serviced in May 2024.",
    ]
    assert Source.objects.get(pk=source.pk).distilled_by == "rules-v1 (llm fallback)"


def test_llm_answers_are_parsed_strictly():
    d = LLMDistiller.__new__(LLMDistiller)
    assert d._parse('{"statements": ["a", " ", "b"]}') == ["a", "b"]
    assert d._parse('Here you go: ["x"]') == ["x"]
    for bad in ["no json here", '{"statements": "a"}', '{"statements": [1, 2]}', "{broken"]:
        with pytest.raises(ValueError):
            d._parse(bad)


def test_long_repetitive_input_is_distilled_not_mistaken_for_filler():
    # Filler phrases overlap ("see you" / "see you later"): the check is a linear word split,
    # not a backtracking regular expression, so input like this cannot make it explode.
    for text in ["see you later " * 1400 + "x", "kk" * 10_000 + "!", " lol" * 5000 + " x", "a" * 20_000]:
        assert is_filler(text) is False
        assert RULES.distill(Unit(kind="conversation", text=text, role="user")).statements
