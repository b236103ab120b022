"""Precision and recall of the graph extractor on a hand-labelled set of memories.

    ./engram bench graph_extraction.py                 # writes bench/results/graph-extraction-<date>.md
    ./engram bench graph_extraction.py --show-errors   # and prints every miss and every extra
    ./engram bench graph_extraction.py --label after   # graph-extraction-<date>-after.md
    ./engram bench graph_extraction.py --data bench/graph/heldout.jsonl --label heldout

The set (bench/graph/labelled.jsonl) was written for this benchmark: one memory per
line with its ``kind`` (possessive, apposition, copula, org, product, pet, family,
work, place, first_person, speaker, negation, names), optional ``attributed_to``, and
the entities (name, type) and edges (subject, predicate, object) a careful reader
would extract in the extractor's vocabulary (docs/GRAPH.md). Negated and hedged
memories expect no edge at all.

The extractor was developed against that set, so its score there flatters it. A second
set, bench/graph/heldout.jsonl (60 memories, the same kinds), was written and labelled
afterwards, before the extractor first ran on it, and is kept out of development: read
its score as the honest one.

The real extractor runs over each memory alone (no database, no entity resolution
across memories): the spaCy pipeline of engram_site/providers/nlp.py, then graph/extract/, with the
speaker rule the graph services apply (a leading ``Name:``) and, when the extractor has it,
``graph.extract.stored``: what a bucket that knows no names yet stores (a relative or pet
without a name is an attribute of its owner, not an entity).

Matching rules:

* A name is compared after case folding, collapsing whitespace, "’" read as "'", and
  dropping a leading article or title (the, a, an, Mr, Mrs, Ms, Dr, with or without a
  dot). Nothing else is forgiven: "Alice Chen 's" is not "Alice Chen", "Boston." is
  not "Boston".
* Entities: the extractor's mentions except the speaker placeholders (User,
  Assistant), as (name, type) pairs; a predicted pair is right when the labelled set
  holds the same name with the same type. The "names" columns ignore the type.
  People and pets without a name are no entities: "Lena's dog is a beagle" is labelled
  (Lena, has, dog) and (Lena, dog_is_a, beagle) (docs/GRAPH.md).
* Edges: (subject, predicate, object) triples; the object is an entity name or a
  literal (literals are lower case, the head noun singular: "peanut"). A triple is
  right when all three match. Symmetric predicates (sibling_of, spouse_of, partner_of,
  friend_of, cousin_of, roommate_of, neighbour_of, colleague_of, married_to) match in
  either direction. The first person is "User" (or "Assistant", or the speaker of a
  ``Name:`` prefix).
* Precision = right predictions / predictions; recall = right predictions / labels;
  both micro-averaged over the set, overall and per kind. Duplicates count once.

Names across memories (the section "The set as one bucket"): the rows are unrelated
memories, so nothing in a set says that a "Priya" of one row is the "Priya Natarajan" of
another. What the resolver's rules would join if every row were written into one bucket is
listed instead: each one-word PERSON name the extractor gives, and the one person it would
become by the bucket's rules (graph/services/entities.py) — a first name, nickname or
surname of exactly one full name (graph.extract.partial_name_of), else a short form of
exactly one first name (graph.extract.short_form_people: "Mel" for Melanie). The rules see
the names the extractor gives, as the resolver does; each join is a merge a reader may
judge (a short form that is a name of its own, "Ann" and "Anna", is a false one).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import common

BENCH_DIR = common.BENCH_DIR
sys.path.insert(0, str(common.REPO_ROOT))

SYMMETRIC = {
    "sibling_of", "spouse_of", "partner_of", "friend_of", "cousin_of", "roommate_of", "neighbour_of",
    "colleague_of", "married_to",
}  # fmt: skip
_LEADING = re.compile(r"^(?:(?:the|a|an|mr|mrs|ms|miss|dr|prof)\.?\s+)+")


def norm(name: str) -> str:
    text = " ".join(name.replace("’", "'").casefold().split())
    return _LEADING.sub("", text)


def edge_key(subject: str, predicate: str, obj: str) -> tuple[str, str, str]:
    s, o = norm(subject), norm(obj)
    if predicate in SYMMETRIC and o < s:
        s, o = o, s
    return s, predicate, o


def configure_django() -> None:
    import django
    from django.conf import settings

    settings.configure(ENGRAM_GRAPH_ENABLED=True)
    django.setup()


def run_extractor(rows: list[dict]) -> tuple[list[tuple[set, set]], float, float]:
    """(entities, edges) predicted for each row, and the seconds spent parsing and extracting."""
    from engram_site.providers import nlp
    from graph import extract as extraction

    pipeline = nlp.get_pipeline()
    pipeline("Warm up the pipeline.")
    # The speaker rule of a leading "Name:" (absent from extractors older than it).
    split = getattr(extraction, "split_speaker", None)
    started = time.perf_counter()
    parsed = []
    for row in rows:
        if split is not None:
            speaker, text = split(row["text"], attributed_to=row.get("attributed_to"))
        else:
            speaker, text = extraction.speaker_ref(row.get("attributed_to")), row["text"]
        parsed.append((speaker, pipeline(text)))
    parse_seconds = time.perf_counter() - started
    started = time.perf_counter()
    results = [extraction.extract(doc, speaker=speaker) for speaker, doc in parsed]
    # Unnamed relatives as a bucket that does not know their names stores them (absent from
    # extractors older than it, which named them "sister of User").
    stored = getattr(extraction, "stored", None)
    if stored is not None:
        results = [stored(result) for result in results]
    extract_seconds = time.perf_counter() - started
    out = []
    for result in results:
        entities = {(norm(ref.name), ref.type) for ref in result.mentions if ref.type != "SPEAKER"}
        edges = {
            edge_key(fact.subject.name, fact.predicate, fact.obj.name if fact.obj is not None else fact.literal or "")
            for fact in result.facts
        }
        out.append((entities, edges))
    return out, parse_seconds, extract_seconds


def one_bucket_joins(predictions: list[tuple[set, set]]) -> list[tuple[str, str, str]]:
    """(one-word name, the name it would become, by which rule) for every one-word PERSON name
    the extractor gives, were all rows one bucket (see the docstring)."""
    from graph import extract as extraction

    short_form_people = getattr(extraction, "short_form_people", None)  # absent before short forms
    people = sorted({name for entities, _edges in predictions for name, kind in entities if kind == "PERSON"})
    full_names = [name for name in people if " " in name]
    joins = []
    for word in (name for name in people if " " not in name):
        partial = [full for full in full_names if extraction.partial_name_of(word, full, surname=True)]
        if len(partial) == 1:
            joins.append((word, partial[0], "first name, nickname or surname"))
        elif not partial and short_form_people is not None:
            found = short_form_people(word, [(name.split()[0], " " in name, name) for name in people])
            if len(found) == 1:
                joins.append((word, found[0], "short form"))
    return joins


class Tally:
    def __init__(self) -> None:
        self.right = self.predicted = self.labelled = 0

    def add(self, predicted: set, labelled: set) -> None:
        self.right += len(predicted & labelled)
        self.predicted += len(predicted)
        self.labelled += len(labelled)

    def precision(self) -> float:
        return self.right / self.predicted if self.predicted else 1.0

    def recall(self) -> float:
        return self.right / self.labelled if self.labelled else 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(BENCH_DIR / "graph" / "labelled.jsonl"))
    parser.add_argument("--label", default="", help="suffix of the results file name (e.g. baseline, after)")
    parser.add_argument("--show-errors", action="store_true")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args()

    configure_django()
    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines() if line.strip()]
    predictions, parse_seconds, extract_seconds = run_extractor(rows)

    kinds = ["all", *sorted({r["kind"] for r in rows})]
    tallies = {k: {"entities": Tally(), "names": Tally(), "edges": Tally()} for k in kinds}
    sentences = defaultdict(int)
    errors = []
    for row, (entities, edges) in zip(rows, predictions, strict=True):
        want_entities = {(norm(n), t) for n, t in row["entities"]}
        want_edges = {edge_key(*e) for e in row["edges"]}
        for kind in ("all", row["kind"]):
            sentences[kind] += 1
            tallies[kind]["entities"].add(entities, want_entities)
            tallies[kind]["names"].add({n for n, _ in entities}, {n for n, _ in want_entities})
            tallies[kind]["edges"].add(edges, want_edges)
        if entities != want_entities or edges != want_edges:
            errors.append((row["text"], want_entities - entities, entities - want_entities, want_edges - edges,
                           edges - want_edges))  # fmt: skip

    header = "| kind | memories | entity P | entity R | name P | name R | edge P | edge R |"
    lines = [header, "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for kind in kinds:
        t = tallies[kind]
        lines.append(
            f"| {kind} | {sentences[kind]} | {t['entities'].precision():.2f} | {t['entities'].recall():.2f} "
            f"| {t['names'].precision():.2f} | {t['names'].recall():.2f} "
            f"| {t['edges'].precision():.2f} | {t['edges'].recall():.2f} |"
        )
    table = "\n".join(lines)
    exact = sum(1 for _ in rows) - len(errors)
    timing = (
        f"per memory: parse {1000 * parse_seconds / len(rows):.2f} ms, extract {1000 * extract_seconds / len(rows):.2f}"
        " ms (one at a time, one process)"
    )
    joins = one_bucket_joins(predictions)
    one_word = len({n for entities, _ in predictions for n, kind in entities if kind == "PERSON" and " " not in n})
    by_rule = defaultdict(list)
    for word, full, rule in joins:
        by_rule[rule].append(f"{word} → {full}")
    joined = "\n".join(f"- {rule} ({len(items)}): {', '.join(items)}" for rule, items in sorted(by_rule.items()))
    bucket_section = (
        f"## The set as one bucket\n\n{one_word} one-word PERSON names; {len(joins)} would join a longer name "
        f"if every row were written into one bucket:\n\n{joined or '- none'}\n"
    )
    print(table)
    print(f"\n{exact}/{len(rows)} memories extracted exactly; {timing}")
    print(f"\n{bucket_section}")
    if args.show_errors:
        for text, missed_e, extra_e, missed, extra in errors:
            print(f"\n{text}")
            for label, items in (("missed entity", missed_e), ("extra entity", extra_e), ("missed edge", missed),
                                 ("extra edge", extra)):  # fmt: skip
                for item in sorted(items):
                    print(f"  {label}: {item}")
    if args.no_write:
        return 0
    info = common.machine_info()
    suffix = f"-{args.label}" if args.label else ""
    path = common.RESULTS_DIR / f"graph-extraction-{datetime.now(UTC):%Y-%m-%d}{suffix}.md"
    title = "Graph extraction: precision and recall on the labelled set" + (f" ({args.label})" if args.label else "")
    data = f"{Path(args.data).resolve().relative_to(BENCH_DIR.parent)} ({len(rows)} memories)"
    t = tallies["all"]
    headline = (
        f"{Path(args.data).name} ({len(rows)} memories): entity P {t['entities'].precision():.2f} / R "
        f"{t['entities'].recall():.2f}, edge P {t['edges'].precision():.2f} / R {t['edges'].recall():.2f}; "
        f"{exact} of {len(rows)} exact"
    )
    header = common.report_header(__file__, headline, series=Path(args.data).stem, info=info)
    path.write_text(
        f"{header}\n# {title}\n\n{common.machine_markdown(info)}\n- data: {data}\n\n"
        "Matching rules: see the docstring of bench/graph_extraction.py (names case-folded, a leading article or "
        "title dropped, nothing else forgiven; edges matched on subject, predicate and object, symmetric "
        "predicates in either direction; micro-averaged).\n\n"
        f"{table}\n\n{exact}/{len(rows)} memories extracted exactly; {timing}.\n\n{bucket_section}"
    )
    print(f"\nwrote {path.relative_to(BENCH_DIR.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
