"""Feedback that changes the ranking, measured: rate half of the questions, then ask paraphrases.

On our conversational set and a LoCoMo-format file (the same buckets and protocols as
``eval_three.py``), in one server:

1. every question is asked as written and as a **paraphrase** (:func:`paraphrase`), with feedback
   turned off (``feedback_weight`` and ``feedback_demotion`` 0: nothing is read, the ranking
   of a bucket without ratings) — the *before* figures;
2. half of each set's questions (chosen by a seeded shuffle) are **rated** through
   ``POST /api/v1/memories/{id}/feedback`` with the question as written: every evidence memory
   ``useful``, the best-ranked hit that is not evidence ``irrelevant``;
3. every question is asked again, as written and as a paraphrase, with the server's defaults
   (or ``--variant`` rankings) — the *after* figures.

The rated half's paraphrases are the questions feedback should help (an agent asking again in
other words); the untouched half must not lose. The ratings are given as agent
``feedback-bench``, and an erasure of that agent (``POST /api/v1/erasure``) clears an earlier
run's before anything is rated, so a kept home (``--home``, ``--reuse``) can run again.

Paraphrases are made without a model and without quoting any data set: a deterministic rewrite
of the question — question words swapped for others meaning the same ("when" -> "at what
time"), words replaced from a small hand-written list of synonyms (:data:`SYNONYMS`), auxiliary
and other stop words dropped, and the question-word phrase moved to the end
("Caroline visit the support group, at what time?").

    python bench/feedback_eval.py --locomo ../shared/eval/locomo-dev/locomo-dev5.json --home /tmp/fb
    python bench/feedback_eval.py --locomo PATH --home /tmp/fb --reuse --variant strong='{"feedback_weight": 1}'

``--learn`` then runs the learning job (memories.services.ranking_learning, docs/RETRIEVAL.md
"Learned weights") on the sets' buckets and asks every question again: the ``+learned`` rows are
the same rankings on top of what each bucket learned from the ratings just given.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

import common
import eval_retrieval as er
import eval_three as e3

AGENT = "feedback-bench"
OFF = {"feedback_weight": 0, "feedback_demotion": 0}

# Question words and the phrases that replace them (first match wins; longest first).
QUESTION_WORDS = [
    ("how many", "what number of"),
    ("how long", "for what length of time"),
    ("how often", "how frequently"),
    ("how did", "in what way did"),
    ("how does", "in what way does"),
    ("how do", "in what way do"),
    ("what kind of", "which type of"),
    ("what type of", "which kind of"),
    ("when", "at what time"),
    ("where", "in what place"),
    ("who", "which person"),
    ("whom", "which person"),
    ("why", "for what reason"),
    ("what", "which"),
    ("which", "what"),
]
# A small hand-written list of everyday synonyms (whole words, lower case).
SYNONYMS = {
    "buy": "purchase", "bought": "purchased", "get": "obtain", "got": "obtained", "go": "travel",
    "went": "travelled", "like": "enjoy", "likes": "enjoys", "liked": "enjoyed", "love": "adore",
    "loves": "adores", "start": "begin", "started": "began", "job": "occupation", "work": "job",
    "works": "is employed", "car": "vehicle", "house": "home", "home": "house", "kids": "children",
    "children": "kids", "friend": "pal", "friends": "pals", "favorite": "preferred",
    "favourite": "preferred", "big": "large", "small": "little", "happy": "glad", "think": "believe",
    "thinks": "believes", "make": "create", "made": "created", "help": "assist", "helped": "assisted",
    "trip": "journey", "move": "relocate", "moved": "relocated", "live": "reside",
    "lives": "resides", "lived": "resided", "pet": "animal", "pets": "animals", "dog": "puppy",
    "book": "novel", "books": "novels", "picture": "photo", "painting": "artwork", "paint": "draw",
    "painted": "drew", "plan": "intend", "plans": "intends", "planning": "intending",
    "recently": "lately", "visit": "see", "visited": "saw", "learn": "find out", "learned": "found out",
    "talk": "speak", "talked": "spoke", "meet": "see", "met": "saw", "name": "called",
    "gift": "present", "present": "gift", "event": "occasion", "career": "profession",
    "hobby": "pastime", "hobbies": "pastimes", "sport": "game", "play": "perform", "plays": "performs",
    "played": "performed", "feel": "sense", "felt": "sensed", "says": "states", "said": "stated",
    "tell": "inform", "told": "informed", "use": "employ", "used": "employed", "eat": "consume",
    "ate": "consumed", "drink": "sip", "cook": "prepare", "cooked": "prepared", "family": "relatives",
    "mother": "mom", "mom": "mother", "father": "dad", "dad": "father", "wife": "spouse",
    "husband": "spouse", "girlfriend": "partner", "boyfriend": "partner", "birthday": "bday",
}  # fmt: skip
STOP_WORDS = {
    "a", "an", "the", "did", "does", "do", "is", "are", "was", "were", "has", "have", "had", "be",
    "been", "of", "to", "that", "this", "there", "it", "its", "any", "some", "ever",
}  # fmt: skip


def paraphrase(question: str) -> str:
    """The question reworded deterministically (see the module's docstring)."""
    text = question.strip().rstrip("?").strip()
    lower = text.lower()
    lead = ""
    for phrase, replacement in QUESTION_WORDS:
        if lower == phrase or lower.startswith(phrase + " "):
            lead, text = replacement, text[len(phrase) :].strip()
            break
    words = []
    for word in re.findall(r"[\w'’-]+|[^\w\s]", text):
        key = word.lower()
        if key in STOP_WORDS:
            continue
        swapped = SYNONYMS.get(key)
        words.append(swapped if swapped else word)
    body = " ".join(words).replace(" ,", ",").strip()
    if not body:
        return question
    return f"{body}, {lead}?" if lead else f"{body}?"


def _questions(s: e3.EvalSet) -> list[dict]:
    return list(s.data.questions)


def _ask(client, conv, question: dict, query: str, ranking: dict, now: str | None) -> tuple[list[str], Any]:
    resp = client.search(conv.bucket_id, query, limit=20, ranking=ranking, now=now)
    return [str(h["id"]) for h in resp.data["results"]], resp


def _record(conv, question: dict, ids: list[str], resp, *, half: str, form: str, phase: str, variant: str) -> dict:
    ranked = er.expand_to_turns(ids, conv.memory_turns)
    return {
        "set": None, "question_id": question["id"], "half": half, "form": form, "phase": phase,
        "variant": variant, "scores": er.score_question(ranked, question["evidence"]),
        "latency_ms": resp.elapsed * 1000.0,
    }  # fmt: skip


def _after(
    client, s: e3.EvalSet, written: dict, questions: list[dict], rated: set, variant: str, ranking: dict
) -> list:
    common.log(f"{s.key}: after ({variant})")
    records = []
    for q in questions:
        conv = written[q["conversation_id"]]
        half = "rated" if q["id"] in rated else "untouched"
        for form, query in (("asked", q["question"]), ("paraphrase", paraphrase(q["question"]))):
            ids, resp = _ask(client, conv, q, query, ranking, q.get("asked_at"))
            records.append(_record(conv, q, ids, resp, half=half, form=form, phase="after", variant=variant))
    return records


def learned_of(client, conv) -> dict | None:
    """What the bucket's ranking learned and uses (a search's explain names it), or None."""
    resp = client.search(conv.bucket_id, "anything", limit=1, explain=True)
    hits = resp.data["results"]
    return hits[0]["explain"].get("learned_ranking") if hits else None


def run_set(
    client, s: e3.EvalSet, written: dict, variants: list[er.Variant], seed: int, learn=None
) -> tuple[list[dict], dict]:
    questions = _questions(s)
    order = list(range(len(questions)))
    random.Random(seed).shuffle(order)
    rated = {questions[i]["id"] for i in order[: len(order) // 2]}
    records: list[dict] = []
    top_hits: dict[str, list[str]] = {}
    common.log(f"{s.key}: {len(questions)} questions, {len(rated)} to rate; before (feedback off)")
    for q in questions:
        conv = written[q["conversation_id"]]
        half = "rated" if q["id"] in rated else "untouched"
        for form, query in (("asked", q["question"]), ("paraphrase", paraphrase(q["question"]))):
            ids, resp = _ask(client, conv, q, query, OFF, q.get("asked_at"))
            if form == "asked":
                top_hits[q["id"]] = ids
            records.append(_record(conv, q, ids, resp, half=half, form=form, phase="before", variant="off"))
    given = {"useful": 0, "irrelevant": 0, "questions": 0}
    for q in questions:
        if q["id"] not in rated:
            continue
        conv = written[q["conversation_id"]]
        evidence = set(q["evidence"])
        useful = list(dict.fromkeys(conv.turn_memory[t] for t in q["evidence"] if t in conv.turn_memory))
        wrong = next(
            (m for m in top_hits[q["id"]] if m not in useful and not evidence & set(conv.memory_turns.get(m, ()))),
            None,
        )
        for memory_id, signal in [*((m, "useful") for m in useful), *([(wrong, "irrelevant")] if wrong else [])]:
            client.request(
                "POST", f"/api/v1/memories/{memory_id}/feedback",
                {"signal": signal, "query": q["question"], "agent_id": AGENT}, expect=201,
            )  # fmt: skip
            given[signal] += 1
        given["questions"] += 1
    common.log(f"{s.key}: rated {given}")
    for variant in variants:
        records += _after(client, s, written, questions, rated, variant.name, variant.ranking)
    if learn is not None:
        # The learning job over the set's buckets, then the same questions again: the variant's
        # ranking now sits on what each bucket learned (where it beat its defaults on held-back ratings).
        learn([conv.bucket_id for conv in written.values()])
        given["learned"] = {conv_id: learned_of(client, conv) for conv_id, conv in written.items()}
        for variant in variants:
            records += _after(client, s, written, questions, rated, f"{variant.name}+learned", variant.ranking)
    for r in records:
        r["set"] = s.key
    return records, given


def _pct(values: list[float], p: float) -> str:
    return f"{common.percentile(values, p):.1f}"


def _mean(records: list[dict], metric: str = "r@10") -> float:
    return sum(r["scores"][metric] for r in records) / len(records) if records else 0.0


def summary(records: list[dict], s: str, variant: str) -> list[list[Any]]:
    rows = []
    for half, form in (
        ("rated", "paraphrase"),
        ("untouched", "asked"),
        ("untouched", "paraphrase"),
        ("rated", "asked"),
    ):
        before = [r for r in records if (r["set"], r["half"], r["form"], r["phase"]) == (s, half, form, "before")]
        after = [
            r for r in records
            if (r["set"], r["half"], r["form"], r["phase"], r["variant"]) == (s, half, form, "after", variant)
        ]  # fmt: skip
        b, a = _mean(before), _mean(after)
        rows.append([
            e3.TITLES[s], variant, f"{half} half, {'paraphrased' if form == 'paraphrase' else 'as written'}",
            len(before), f"{b:.3f}", f"{a:.3f}", f"{a - b:+.3f}", f"{_mean(before, 'mrr'):.3f}",
            f"{_mean(after, 'mrr'):.3f}",
        ])  # fmt: skip
    return rows


def _learned_lines(given: dict[str, dict]) -> list[str]:
    """Per set, what each bucket learned (the settings its searches use), or that it kept its defaults."""
    lines = []
    for key, per_set in given.items():
        learned = per_set.get("learned") or {}
        used = {conv: found for conv, found in learned.items() if found}
        parts = [
            f"{conv}: `{json.dumps(found['settings'], sort_keys=True)}` (held-back score "
            f"{found['held_back_score']['defaults']:.3f} -> {found['held_back_score']['learned']:.3f})"
            for conv, found in sorted(used.items())
        ]  # fmt: skip
        lines.append(
            f"- learned ({e3.TITLES[key]}): {len(used)} of {len(learned)} buckets use learned settings"
            + (": " + "; ".join(parts) if parts else " (the others kept their defaults or had too few ratings)")
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="ours,locomo", help="comma-separated, from ours,locomo")
    parser.add_argument("--locomo", type=Path, help="a LoCoMo-format JSON file (needed for the locomo set)")
    parser.add_argument("--dataset", type=Path, default=er.DEFAULT_DATASET, help="our conversational set")
    parser.add_argument("--distractors", type=Path, default=common.BENCH_DIR / "data" / "corpus-100k.jsonl")
    parser.add_argument("--distractors-per-bucket", type=int, default=500)
    parser.add_argument("--long", type=Path, default=e3.el.DEFAULT_DATASET)
    parser.add_argument("--seed", type=int, default=1, help="which half of each set is rated")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=JSON",
                        help="ranking overrides of the after searches (default: the server's defaults)")  # fmt: skip
    parser.add_argument("--reuse", action="store_true", help=f"reuse the buckets recorded in $HOME/{e3.MAPPING}")
    parser.add_argument("--out", type=Path, help="report path (default bench/results/feedback-eval-<date>.md)")
    parser.add_argument("--series", default="paraphrases", help="the report's series (bench/results_table.py)")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--paraphrases", action="store_true", help="print each question's paraphrase and exit")
    learn_help = (
        "after the ratings, run the learning job (manage.py learn_ranking) on the sets' buckets and ask "
        "everything again (variants '<name>+learned'); needs a private server"
    )
    parser.add_argument("--learn", action="store_true", help=learn_help)
    parser.add_argument("--learn-min-ratings", type=int, default=30, help="the job's minimum of ratings per bucket")
    common.add_server_args(parser)
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.sets.split(",") if n.strip()]
    if not names or set(names) - {"ours", "locomo"}:
        parser.error("--sets takes ours and/or locomo")
    sets = e3.load_sets(args, names)
    if args.paraphrases:
        for s in sets:
            for q in _questions(s):
                print(json.dumps({"set": s.key, "id": q["id"], "paraphrase": paraphrase(q["question"])}))
        return 0
    variants = er.parse_variants(None, args.variant)
    machine, command = common.machine_info(), common.command_line()
    records: list[dict] = []
    given: dict[str, dict] = {}
    with common.server_from_args(args, tenant="eval-three" if args.reuse or args.home else None) as target:
        mapping = target.home / e3.MAPPING if target.home else None
        with target.client() as client:
            saved = e3._load(mapping) if args.reuse and mapping and mapping.exists() else {}
            written = {}
            for s in sets:
                if s.key in saved:
                    written[s.key] = saved[s.key]
                    common.log(f"reusing the {s.key} buckets in {mapping}")
                else:
                    written[s.key] = s.ingest(client)
                    if mapping:
                        e3._save(mapping, {**saved, **written})
            if saved:
                # The buckets' turn -> memory maps are not saved: rebuilt from memory_turns.
                for per_set in written.values():
                    for conv in per_set.values():
                        if not conv.turn_memory:
                            conv.turn_memory = {t: m for m, turns in conv.memory_turns.items() for t in turns}
            # An earlier run's ratings (kept home) go first: the agent's erasure deletes them.
            client.request("POST", "/api/v1/erasure", {"agent_id": AGENT}, expect=200)
            learn = None
            if args.learn:
                if target.private is None:
                    raise SystemExit("--learn needs a private server (it runs manage.py in the server's ENGRAM_HOME)")

                def learn(bucket_ids: list[str]) -> None:
                    flags = [part for bucket_id in bucket_ids for part in ("--bucket", str(bucket_id))]
                    out = common.manage(
                        "learn_ranking", *flags, "--min-ratings", str(args.learn_min_ratings), "--no-progress",
                        env=target.private.env(), timeout=7200,
                    ).stdout  # fmt: skip
                    common.log(f"learn_ranking: {out.strip().splitlines()[-1] if out.strip() else '(no output)'}")

            for s in sets:
                found, given[s.key] = run_set(client, s, written[s.key], variants, args.seed, learn)
                records += found
        description = target.describe()
    shown = [v.name for v in variants] + ([f"{v.name}+learned" for v in variants] if args.learn else [])
    rows = [row for s in sets for name in shown for row in summary(records, s.key, name)]
    table = common.markdown_table(
        ["set", "after", "questions", "n", "r@10 before", "r@10 after", "change", "MRR before", "MRR after"],
        rows, "lllrrrrrr",
    )  # fmt: skip
    latency = {
        phase: [r["latency_ms"] for r in records if r["phase"] == phase] for phase in ("before", "after")
    }  # fmt: skip
    headline_parts = []
    for s in sets:
        first = summary(records, s.key, variants[0].name)
        headline_parts.append(f"{e3.TITLES[s.key]} paraphrase r@10 {first[0][4]} -> {first[0][5]}, "
                              f"untouched {first[1][4]} -> {first[1][5]}")  # fmt: skip
    lines = [
        f"# Feedback: rated questions asked again in other words ({machine['date'][:10]})",
        "",
        common.machine_markdown(machine),
        f"- server: {description}",
        f"- command: `{command}`",
        *(f"- {s.describe}" for s in sets),
        f"- ratings given (agent `{AGENT}`): "
        + "; ".join(
            f"{e3.TITLES[k]}: {v['questions']} questions, {v['useful']} useful, {v['irrelevant']} irrelevant"
            for k, v in given.items()
        ),  # fmt: skip
        "- before: feedback off (`feedback_weight` and `feedback_demotion` 0: the ranking without ratings); "
        "after: the variant's ranking (defaults unless given)"
        + (
            "; `+learned`: the same after the learning job (`manage.py learn_ranking --min-ratings "
            f"{args.learn_min_ratings}`) ran on the sets' buckets"
            if args.learn
            else ""
        ),
        *(_learned_lines(given) if args.learn else []),
        "- paraphrase: a deterministic rewrite, no model (question words swapped, a hand-written synonym list, "
        "stop words dropped, the question phrase moved to the end): bench/feedback_eval.py `paraphrase`",
        f"- latency, every search through HTTP: before p50 {_pct(latency['before'], 50)} / "
        f"p95 {_pct(latency['before'], 95)} ms, after p50 {_pct(latency['after'], 50)} / "
        f"p95 {_pct(latency['after'], 95)} ms (not a latency benchmark: the machine is shared)",
        "",
        table,
        "",
        *(
            f"- `{v.name}`: `{json.dumps(v.ranking, sort_keys=True) if v.ranking else 'server defaults'}`"
            for v in variants
        ),  # fmt: skip
    ]
    header = common.report_header(
        __file__, "; ".join(headline_parts), series=args.series, info=machine, command=command
    )
    common.publish_report("\n".join(lines), out=args.out, name="feedback-eval", no_write=args.no_write, header=header)
    if args.json_out:
        args.json_out.write_text(json.dumps(records), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
