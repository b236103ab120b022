"""The embedding model on torch and on ONNX Runtime, side by side: same vectors? how fast?

    HF_HUB_OFFLINE=1 .venv/bin/python bench/embedding_runtime.py --rows 2000 --queries 300 --repeat 3

Both runtimes run in this one process, with the threads a server process uses
(``ENGRAM_EMBEDDING_THREADS``, default min(2, CPUs)), on the same texts: the memory texts of the
first ``--rows`` rows of the corpus, their sequence-context texts (one or two predecessors +
the memory, as ``memories.services`` builds them), and ``--queries`` generated questions.

* **Equivalence**: the largest difference of any vector component and the smallest cosine
  between the two runtimes' vectors of every text; and, for each question, the overlap of the
  top 10 memories by cosine when both the memories and the question are embedded by one runtime
  or the other (1.0 = the same ten).
* **Speed**: one question at a time (``encode([text])``, what a search does: p50/p95 ms) and
  batches (calls of 1,000 texts, batches of 64, what a write does: texts/s), each the median of
  ``--repeat`` passes, the runtimes interleaved.

The ONNX graph is exported (and verified) into ``--cache`` if it is not there yet, exactly as
the server does (``engram_site/providers/onnx_encoder.py``).

``--int8`` adds a third runtime, not one the server offers: the exported graph with its weights
quantised to int8 (ONNX Runtime's dynamic quantisation, per output channel). Besides the
comparisons above it reports the case a faster *question* embedding would meet in a server whose
memories were embedded at full precision: the question embedded by the int8 graph, the memories
by torch, against both embedded by torch.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import common
import ingest_throughput
import inproc
import loader
import numpy as np

sys.path.insert(0, str(common.REPO_ROOT))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=2000, help="corpus rows whose texts are embedded (default 2000)")
    p.add_argument("--queries", type=int, default=300, help="questions embedded one at a time (default 300)")
    p.add_argument("--repeat", type=int, default=3, help="passes per measurement (medians are reported)")
    p.add_argument("--corpus", type=Path, default=loader.DEFAULT_CORPUS)
    p.add_argument("--cache", type=Path, help="folder of the ONNX export (default: a temporary one)")
    p.add_argument("--int8", action="store_true", help="also time and compare the graph with int8 weights")
    p.add_argument("--out", type=Path, help="report path (default bench/results/embedding-runtime-<date>.md)")
    return p.parse_args()


def main() -> int:
    args = parse_args()
    # Django settings without a database (nothing here queries one), like inproc's model-only tasks.
    env, _ = inproc.child_env()
    os.environ.update(env)
    import django

    django.setup()
    from engram_site.providers import embedding, onnx_encoder

    threads = embedding._threads()
    import torch

    torch.set_num_threads(threads)
    from sentence_transformers import SentenceTransformer

    model_dir = Path(embedding._model_path())
    cache = args.cache or Path(tempfile.mkdtemp(prefix="engram-onnx-"))
    started = time.perf_counter()
    models = {
        "torch": SentenceTransformer(str(model_dir), device="cpu"),
        "onnx": onnx_encoder.exported_model(model_dir, cache, threads, name=embedding.MODEL_NAME),
    }
    if args.int8:
        models["onnx-int8"] = int8_encoder(models["onnx"], model_dir, threads)
    common.log(f"models ready in {time.perf_counter() - started:.1f}s (ONNX graph in {cache})")

    rows = loader.read_rows(args.corpus, args.rows)
    server_texts = ingest_throughput.ceiling_texts(rows, len(rows))
    texts = {"memory": server_texts["content"], "context": server_texts["context"]}
    pool, _ = loader.query_pool(args.corpus, args.rows)
    questions = [q["query"] for q in pool[: args.queries]]

    def encode(name, batch, batch_size=64):
        return np.asarray(
            models[name].encode(batch, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False),
            dtype=np.float32,
        )

    # Equivalence.
    vectors = {name: {kind: encode(name, t) for kind, t in texts.items()} for name in models}
    query_vectors = {name: np.vstack([encode(name, [q]) for q in questions]) for name in models}
    others = [name for name in models if name != "torch"]
    equivalence = []
    for name in others:
        for kind in ("memory", "context"):
            a, b = vectors["torch"][kind], vectors[name][kind]
            equivalence.append([name, f"{kind} texts", len(a), f"{np.abs(a - b).max():.1e}", _cosines(a, b)])
        a, b = query_vectors["torch"], query_vectors[name]
        equivalence.append([name, "questions (one at a time)", len(a), f"{np.abs(a - b).max():.1e}", _cosines(a, b)])

    def top10(memories, question):
        return set(np.argsort(-(memories @ question))[:10].tolist())

    reference = [top10(vectors["torch"]["memory"], q) for q in query_vectors["torch"]]
    overlaps = {}  # (question runtime, memory runtime) -> overlap with torch/torch per question
    for name in others:
        for memory_runtime in dict.fromkeys((name, "torch")):
            overlaps[(name, memory_runtime)] = [
                len(top10(vectors[memory_runtime]["memory"], q) & ref) / 10
                for q, ref in zip(query_vectors[name], reference, strict=True)
            ]

    # Speed, runtimes interleaved pass by pass.
    single: dict[str, list[float]] = {name: [] for name in models}
    single_p95: dict[str, list[float]] = {name: [] for name in models}
    batch: dict[tuple[str, str], list[float]] = {}
    for name in models:  # warm the one-text path
        encode(name, ["warm up"])
    for rep in range(args.repeat):
        for name in models:
            ms = []
            for q in questions:
                t0 = time.perf_counter()
                encode(name, [q])
                ms.append((time.perf_counter() - t0) * 1000)
            single[name].append(common.percentile(ms, 50))
            single_p95[name].append(common.percentile(ms, 95))
            for kind, kind_texts in texts.items():
                t0 = time.perf_counter()
                for i in range(0, len(kind_texts), 1000):
                    encode(name, kind_texts[i : i + 1000])
                batch.setdefault((name, kind), []).append(len(kind_texts) / (time.perf_counter() - t0))
            common.log(f"pass {rep + 1} {name}: question p50 {single[name][-1]:.1f} ms")

    info = common.machine_info()
    import onnxruntime

    lines = [
        "# Embedding runtime: torch and ONNX Runtime",
        "",
        common.machine_markdown(info),
        f"- model: {embedding.MODEL_NAME} from `{model_dir}`; threads per call: {threads}; "
        f"torch {torch.__version__}, onnxruntime {onnxruntime.__version__}",
        f"- texts: the first {args.rows} rows of `{args.corpus.name}` ({len(texts['context'])} of them with a "
        f"context text), {len(questions)} generated questions; {args.repeat} passes, runtimes interleaved",
        "",
        "```",
        common.command_line(),
        "```",
        "",
        "## Same vectors?",
        "",
        "Each runtime against torch:",
        "",
        common.markdown_table(["runtime", "texts", "n", "max abs difference", "cosine: min / median"], equivalence),
        "",
        f"Top-10 memories by cosine for each of {len(questions)} questions, against the ten found with "
        f"memories and question embedded by torch (1.0 = the same ten):",
        "",
        common.markdown_table(
            ["question embedded by", "memories embedded by", "mean overlap", "minimum"],
            [[q, m, f"{np.mean(v):.4f}", f"{min(v):.1f}"] for (q, m), v in overlaps.items()],
        ),
        "",
        "## Speed (medians of the passes)",
        "",
    ]
    speed = [
        [
            name,
            f"{common.median(single[name]):.2f}",
            f"{common.median(single_p95[name]):.2f}",
            f"{common.median(batch[(name, 'memory')]):.1f}",
            f"{common.median(batch[(name, 'context')]):.1f}",
        ]
        for name in models
    ]
    lines += [
        common.markdown_table(
            ["runtime", "question p50 ms", "question p95 ms", "memory texts/s", "context texts/s"], speed
        ),
        "",
        "Raw passes: "
        + "; ".join(
            f"{name}: question p50 {', '.join(f'{v:.2f}' for v in single[name])} ms, memory "
            f"{', '.join(f'{v:.0f}' for v in batch[(name, 'memory')])}/s, context "
            f"{', '.join(f'{v:.0f}' for v in batch[(name, 'context')])}/s"
            for name in models
        ),
        "",
    ]
    headline = "; ".join(
        f"{name}: question p50 {common.median(single[name]):.2f} ms, {common.median(batch[(name, 'memory')]):.1f} "
        f"memory texts/s, {common.median(batch[(name, 'context')]):.1f} context texts/s"
        for name in models
    )
    header = common.report_header(__file__, headline, series="int8" if args.int8 else "", info=info)
    common.write_report("\n".join(lines), args.out or common.default_report_path("embedding-runtime"), header=header)
    return 0


def _cosines(a: np.ndarray, b: np.ndarray) -> str:
    cosines = (a * b).sum(1)
    return f"{cosines.min():.7f} / {np.median(cosines):.7f}"


def int8_encoder(onnx_model, model_dir: Path, threads: int):
    """The exported graph with int8 weights (dynamic quantisation, one scale per output
    channel), beside the full-precision file."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from engram_site.providers import onnx_encoder

    target = onnx_model.path.with_name(onnx_model.path.stem + "-int8.onnx")
    if not target.exists():
        quantize_dynamic(str(onnx_model.path), str(target), weight_type=QuantType.QInt8, per_channel=True)
    return onnx_encoder.OnnxSentenceEncoder(target, model_dir, threads)


if __name__ == "__main__":
    sys.exit(main())
