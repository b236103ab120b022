"""Accuracy of the scope/topic classifier on a small hand-labelled set.

    ./engram bench classify_accuracy.py                  # the local classifier (default)
    ./engram bench classify_accuracy.py --classifier llm # ENGRAM_LLM_BASE_URL / _MODEL / _API_KEY
    ./engram bench classify_accuracy.py --show-errors

The set (bench/classify/labelled.jsonl, 153 memories over 17 topics, 93 specific /
60 general) was written apart from the classifier's prototypes in
maintenance/data/classifier.toml, so the number is not a training-set score. Labels follow
the definitions in that module: *general* = a preference, habit, tendency or
opinion; *specific* = anything about a concrete person, thing, event, date or plan.

No database is needed: only the embedding model (and the LLM endpoint, if chosen).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def configure_django() -> None:
    import django
    from django.conf import settings

    settings.configure(
        ENGRAM_EMBEDDINGS_ENABLED=True,
        ENGRAM_CLASSIFIER=os.environ.get("ENGRAM_CLASSIFIER", "local"),
        ENGRAM_LLM_BASE_URL=os.environ.get("ENGRAM_LLM_BASE_URL", ""),
        ENGRAM_LLM_API_KEY=os.environ.get("ENGRAM_LLM_API_KEY", ""),
        ENGRAM_LLM_MODEL=os.environ.get("ENGRAM_LLM_MODEL", ""),
        ENGRAM_LLM_TIMEOUT=float(os.environ.get("ENGRAM_LLM_TIMEOUT") or 30),
    )
    django.setup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--classifier", default="local", choices=["local", "llm"])
    parser.add_argument("--data", default=str(BENCH_DIR / "classify" / "labelled.jsonl"))
    parser.add_argument("--show-errors", action="store_true", help="print every misclassified memory")
    parser.add_argument("--json", help="also write the report to this file")
    args = parser.parse_args()

    configure_django()
    from maintenance.classifier import ClassifyInput, get_classifier

    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines() if line.strip()]
    classifier = get_classifier(args.classifier)
    if args.classifier == "llm" and classifier.name.startswith("local"):
        print("the LLM is not configured (ENGRAM_LLM_BASE_URL, ENGRAM_LLM_MODEL)", file=sys.stderr)
        return 2
    # Warm up (the local classifier embeds its prototypes once per process).
    classifier.classify([ClassifyInput(content="warm up")])
    started = time.perf_counter()
    results = classifier.classify([ClassifyInput(content=r["content"]) for r in rows])
    elapsed = time.perf_counter() - started

    scope_ok = sum(r["scope"] == c.scope for r, c in zip(rows, results, strict=True))
    topic_ok = sum(r["topic"] == c.topic for r, c in zip(rows, results, strict=True))
    both_ok = sum(r["scope"] == c.scope and r["topic"] == c.topic for r, c in zip(rows, results, strict=True))
    n = len(rows)
    per_topic = Counter(r["topic"] for r in rows)
    topic_hits = Counter(r["topic"] for r, c in zip(rows, results, strict=True) if r["topic"] == c.topic)
    scope_confusion = Counter((r["scope"], c.scope) for r, c in zip(rows, results, strict=True))
    topic_errors = Counter((r["topic"], c.topic) for r, c in zip(rows, results, strict=True) if r["topic"] != c.topic)
    fallbacks = sum(not c.by.startswith("llm") for c in results) if args.classifier == "llm" else 0

    report = {
        "classifier": classifier.name,
        "memories": n,
        "scope_accuracy": round(scope_ok / n, 3),
        "topic_accuracy": round(topic_ok / n, 3),
        "both_accuracy": round(both_ok / n, 3),
        "majority_scope_baseline": round(max(Counter(r["scope"] for r in rows).values()) / n, 3),
        "scope_confusion": {f"{gold}->{got}": count for (gold, got), count in sorted(scope_confusion.items())},
        "topic_recall": {t: round(topic_hits[t] / per_topic[t], 2) for t in sorted(per_topic)},
        "most_common_topic_errors": [f"{gold}->{got} x{k}" for (gold, got), k in topic_errors.most_common(8)],
        "ms_per_memory": round(1000 * elapsed / n, 2),
        "llm_fallbacks": fallbacks,
    }
    print(f"classifier        {report['classifier']}")
    print(f"memories          {n}")
    print(
        f"scope accuracy    {report['scope_accuracy']:.1%}  (majority class: {report['majority_scope_baseline']:.1%})"
    )
    print(f"topic accuracy    {report['topic_accuracy']:.1%}  ({len(per_topic)} topics + 'other')")
    print(f"both correct      {report['both_accuracy']:.1%}")
    print(f"scope confusion   {report['scope_confusion']}")
    print(f"topic recall      {report['topic_recall']}")
    print(f"topic errors      {', '.join(report['most_common_topic_errors'])}")
    print(f"speed             {report['ms_per_memory']} ms/memory")
    if args.show_errors:
        for r, c in zip(rows, results, strict=True):
            if r["scope"] != c.scope or r["topic"] != c.topic:
                print(f"  gold {r['scope']:8} {r['topic']:13} got {c.scope:8} {c.topic:13} | {r['content']}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
