"""Plain contradictions written through the API among a user's other memories are listed as
conflicts after the hourly scan, whichever of the two was written first — and nothing else is.

The five pairs are the kinds an outside check found missing (a habit that changed, an age that
changed, never owned against sold, single against married, opening days), the second memory of
each written a year after the first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from maintenance import tasks
from memories.services.buckets import bucket_create
from tests.factories import write

pytestmark = pytest.mark.django_db

PAIRS = [
    ("I don't drink coffee at all, it gives me headaches.", "I drink two cups of coffee every morning now."),
    ("I'm 34.", "I just turned 35."),
    ("I have never owned a car.", "I sold my car last month."),
    ("I'm single.", "I got married in June."),
    ("The bakery on Rua Augusta is open Monday to Friday.", "The bakery on Rua Augusta is closed on Mondays."),
]

# The rest of the user's memories: the same topics (coffee, ages, cars, weddings, opening hours),
# nothing that contradicts the pairs or each other.
OTHERS = [
    "I drink green tea in the afternoon.",
    "My sister Ana drinks her coffee black.",
    "The café next to the office makes a great flat white.",
    "Coffee prices went up again this year.",
    "My brother's colleague roasts his own coffee beans.",
    "My brother Rui is 31.",
    "My daughter's best friend turned 7 in April.",
    "Ana and I share a birthday week in March.",
    "My parents sold their house in Sintra.",
    "I take the train to work every day.",
    "My neighbour's car alarm went off at 3 am.",
    "I rented a car for the trip to the Algarve.",
    "Car insurance in Lisbon is expensive.",
    "My best friend Joana got engaged last week.",
    "Our cousins got married in a vineyard near Porto.",
    "I went to three weddings last summer.",
    "The butcher next to the bakery is closed on Sundays.",
    "The pharmacy on our street is open every day until 10 pm.",
    "The bakery on Rua Augusta sells the best pastel de nata in town.",
    "I buy bread at the bakery every Friday.",
    "The team standup is at 9:30 every weekday.",
    "I go swimming twice a week.",
    "Maya is allergic to peanuts.",
    "Our flat has a south-facing balcony.",
    "I'm learning to play the guitar.",
    "The dentist appointment is on the 14th.",
    "I prefer the window seat on long flights.",
    "My manager is Sofia Marques.",
    "I read before bed most nights.",
    "The kids' school starts at 8:45.",
]
# A user who talks about other people's weddings a lot: in meaning these crowd "I'm single" out of
# the ten memories nearest to "I got married in June"; the status words still find it.
WEDDINGS = [
    f"{name} got married in {month}."
    for name, month in (
        ("My cousin Rita", "May"),
        ("Our neighbour Luis", "July"),
        ("My colleague Marta", "September"),
        ("My old flatmate Pedro", "August"),
        ("Joana's brother", "April"),
        ("My friend Tiago", "October"),
        ("Our friends Tom and Lea", "March"),
        ("My boss's daughter", "June"),
        ("My piano teacher", "December"),
        ("The couple next door", "February"),
        ("My university friend Ines", "November"),
        ("My brother's best friend", "January"),
    )
] + [
    "The wedding in Porto had three hundred guests.",
    "I was a bridesmaid at Rita's wedding.",
    "Weddings in Portugal often go on until sunrise.",
    "Tom and Lea got married on a beach in the Azores.",
]


def _at(days: float) -> str:
    return (datetime(2025, 1, 10, 9, 0, tzinfo=UTC) + timedelta(days=days)).isoformat()


def _listed(bucket, api) -> set[frozenset]:
    response = api.get(f"/api/v1/buckets/{bucket.pk}/conflicts?limit=100")
    assert response.status_code == 200, response.content
    return {frozenset((row["memory_a"]["content"], row["memory_b"]["content"])) for row in response.json()["results"]}


def _hourly_scan() -> None:
    result = tasks.scan_conflicts()  # the scheduled task's body, as the worker runs it
    assert result["status"] == "succeeded", result


@pytest.mark.parametrize("order", ["as written", "reversed"])
def test_plain_contradictions_are_listed_after_the_hourly_scan_and_nothing_else(bucket, api, order):
    pairs = PAIRS if order == "as written" else [(b, a) for a, b in PAIRS]
    target = bucket if order == "as written" else bucket_create(tenant=bucket.tenant, name="reversed")
    # The first memory of each pair and the rest of the user's memories, scanned as they come ...
    write(target, *[{"content": a, "created_at": _at(i / 24)} for i, (a, _) in enumerate(pairs)], api=api)
    write(target, *[{"content": text, "created_at": _at(30 + 5 * i)} for i, text in enumerate(OTHERS + WEDDINGS)],
          api=api)  # fmt: skip
    _hourly_scan()
    assert _listed(target, api) == set()

    # ... and a year later the second: the scan visits only these, and finds each pair.
    write(target, *[{"content": b, "created_at": _at(365 + i / 24)} for i, (_, b) in enumerate(pairs)], api=api)
    assert _listed(target, api) == set()  # nothing is found in the write itself
    _hourly_scan()
    assert _listed(target, api) == {frozenset(pair) for pair in PAIRS}
