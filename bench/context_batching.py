"""Memories and their context texts: one model call, or one call each?

    HF_HUB_OFFLINE=1 .venv/bin/python bench/context_batching.py --sizes 1,2,4,8,16,32,36,48,64,128 --repeat 5

A write of ``k`` memories with sequence context embeds ``k`` memory texts and (about) ``k``
context texts, which are about three times longer. Sent in one call, the runtime sorts them by
length and cuts model batches of 64, so up to a batch of memories is padded to the length of the
contexts sharing its batch; sent in two calls, nothing is padded across the kinds, at the price
of one more call. This script times both on the same texts with the server's runtime
(``engram_site.providers.embedding.embed_texts``, in this process with the server's thread settings): for each
``k``, memory texts of consecutive corpus rows and their contexts (one or two predecessors + the
memory, as ``memories.services`` joins them), fresh rows for every pass and form, the forms
interleaved. Reported: the median milliseconds of ``--repeat`` passes per form.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import common
import inproc
import loader

sys.path.insert(0, str(common.REPO_ROOT))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1,2,4,8,16,32,36,48,64,128", help="memories per write (comma-separated)")
    p.add_argument("--repeat", type=int, default=5, help="passes per size and form (medians are reported)")
    p.add_argument("--corpus", type=Path, default=loader.DEFAULT_CORPUS)
    p.add_argument("--out", type=Path, help="report path (default bench/results/context-batching-<date>.md)")
    return p.parse_args()


def main() -> int:
    args = parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if min(sizes) < 1 or args.repeat < 1:
        raise SystemExit("--sizes and --repeat must be positive")
    env, _ = inproc.child_env()  # Django settings without a database: only the model runs here
    os.environ.update(env)
    import django

    django.setup()
    import numpy as np

    from engram_site.providers import embedding
    from memories.services import CONTEXT_PREDECESSORS, join_context

    need = 2 * args.repeat * max(sizes) + CONTEXT_PREDECESSORS
    contents = [row["content"] for row in loader.read_rows(args.corpus, need)]

    def texts(start: int, k: int) -> tuple[list[str], list[str]]:
        memories = contents[start + CONTEXT_PREDECESSORS : start + CONTEXT_PREDECESSORS + k]
        contexts = [
            join_context("\n".join(contents[start + i : start + i + CONTEXT_PREDECESSORS]), memory)
            for i, memory in enumerate(memories)
        ]
        return memories, contexts

    embedding.embed_texts(contents[:64])  # load and warm the model
    embedding.embed_texts([join_context(contents[0], contents[1])] * 16)
    table = []
    changes: list[str] = []  # k: two calls against one, for the header
    for k in sizes:
        timings: dict[str, list[float]] = {"one call": [], "two calls": []}  # ms
        for rep in range(args.repeat):
            for index, form in enumerate(timings):
                memories, contexts = texts((2 * rep + index) * k, k)
                started = time.perf_counter()
                if form == "one call":
                    vectors = embedding.embed_texts(memories + contexts)
                else:
                    vectors = np.vstack([embedding.embed_texts(memories), embedding.embed_texts(contexts)])
                timings[form].append((time.perf_counter() - started) * 1000.0)
                assert vectors.shape[0] == 2 * k
        one, two = common.median(timings["one call"]), common.median(timings["two calls"])
        common.log(f"{k} memories + contexts: one call {one:.1f} ms, two calls {two:.1f} ms")
        table.append([str(k), f"{one:.1f}", f"{two:.1f}", f"{100 * (two - one) / one:+.0f}%"])
        changes.append(f"{k}: {100 * (two - one) / one:+.0f}%")
    lines = [
        "# Embedding memories with their contexts: one call or two",
        "",
        common.machine_markdown(common.machine_info()),
        f"- runtime: {embedding.runtime()}, texts from the first rows of `{args.corpus.name}`; "
        f"{args.repeat} passes per size and form, fresh texts each",
        "",
        "```",
        common.command_line(),
        "```",
        "",
        "## Milliseconds to embed k memories and their k context texts (medians)",
        "",
        common.markdown_table(["k", "one call", "two calls", "two vs one"], table, align="rrrr"),
        "",
    ]
    header = common.report_header(
        __file__, "time of two model calls against one, by k memories + contexts: " + ", ".join(changes)
    )
    common.write_report("\n".join(lines), args.out or common.default_report_path("context-batching"), header=header)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
