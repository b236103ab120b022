"""CPU per memory of each follow-up stage (enrichment and passages, graph, keys, classification, the
near-duplicate/contradiction/link checks), as a worker runs them, and what they produce.

    ./engram bench stage_cpu.py --compare before=/tmp/engram-before --repeat 2
    ./engram bench stage_cpu.py --short 400 --turns 400 --long 150 --no-write

CPU time, not wall time: on a shared machine wall times move with the neighbours' load, CPU
seconds much less. The unit is CPU seconds per 1,000 memories.

What it does, step by step, in a child process importing Engram from a source tree (``--compare
LABEL=DIR``: another checkout, e.g. ``git archive`` of an older commit; then this tree, "this"),
on the embedded PostgreSQL of ``--home`` (migrated here):

1. Writes three fresh buckets through the write gateway (``memories_ingest``), as agents would:
   ``--short`` rows of ``--corpus`` (short facts, the rows bench/steady_ingest.py writes), in
   batches of 50; ``--turns`` turns of our conversational set (bench/eval/conversations.json,
   LoCoMo-shaped user and assistant turns), one session a batch, ``sequence`` on; ``--long``
   messages of our long working-session set (bench/eval/long/sessions.json, a message cut at the
   API's 20,000 characters as eval_long.py does), one session a batch, ``sequence`` on. Publishing
   to the broker is switched off in this process (the write's follow-up still notes its
   memories on the checks' list); the write's own CPU is measured too.
2. Runs each stage to completion on each bucket, in the order a quiet worker would finish them,
   with the same calls and batch sizes as the stage's task step (memories/tasks.py,
   graph/tasks.py, maintenance/tasks.py): enrich (the columns still missing, then the passages
   of long memories), graph, keys, classify, compare. Per stage and bucket: the process's CPU
   seconds (every thread: the model's too), the CPU seconds of this process's PostgreSQL backend,
   and those of the whole PostgreSQL server (autovacuum and the WAL writer included, and anything
   else using that server: keep it private), and the wall time.
3. Dumps what the stages produced, keyed by content (the ids differ between runs): entities,
   mentions and edges, key documents (text, lemmas, vector), passages, labels, metadata and links
   (ids replaced by their memory's content), near-duplicate and conflict candidates. Then deletes
   the buckets.

The variants alternate per repeat, so a load that comes and goes falls on each of them alike.
The report gives, per stage, the medians of CPU seconds per 1,000 memories of each variant, and
whether each variant produced the same as the first (vectors compared within a tolerance, since
a batch's padding moves the last bits of a float).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import common

BENCH_DIR, REPO_ROOT = common.BENCH_DIR, common.REPO_ROOT
TENANT = "stage-cpu"
# The checks and classification need only the embedding; they run before the graph here, so
# what they produce does not depend on the graph's run (its supersession marks): see differences().
STAGES = ("ingest", "enrich", "classify", "compare", "graph", "keys")
PARTS = ("labels", "links", "duplicates", "conflicts", "passages", "entities", "mentions", "edges", "superseded",
         "key texts", "keys of the same text")  # fmt: skip
KINDS = ("short", "turns", "long")
VECTOR_TOLERANCE = 1e-4


def log(msg: str) -> None:
    print(f"[stage_cpu] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------


def datasets(*, corpus: Path, short: int, turns: int, long: int) -> dict[str, list[list[dict]]]:
    """Per kind, the write batches (lists of memory dicts) and whether they are sequences."""
    out: dict[str, list[list[dict]]] = {}
    rows = []
    with open(corpus) as handle:
        for line in handle:
            if len(rows) >= short:
                break
            rows.append(json.loads(line))
    out["short"] = [rows[i : i + 50] for i in range(0, len(rows), 50)]
    batches, written = [], 0
    for conversation in json.loads((BENCH_DIR / "eval" / "conversations.json").read_text())["conversations"]:
        for session in conversation["sessions"]:
            start = datetime.fromisoformat(session["started_at"].replace("Z", "+00:00"))
            batch = [
                {
                    "content": t["content"],
                    "attributed_to": t["role"],
                    "created_at": (start + timedelta(minutes=i + 1)).isoformat(),
                }
                for i, t in enumerate(session["turns"][: turns - written])
            ]
            if batch:
                batches.append(batch)
                written += len(batch)
    out["turns"] = batches
    sys.path.insert(0, str(BENCH_DIR))
    from eval_long import ROLE_PREFIX, split_content

    batches, written = [], 0
    for conversation in json.loads((BENCH_DIR / "eval" / "long" / "sessions.json").read_text())["conversations"]:
        for session in conversation["sessions"]:
            batch = []
            for i, message in enumerate(session["messages"]):
                if written + len(batch) >= long:
                    break
                start = datetime.fromisoformat(session["date"].replace("Z", "+00:00"))
                for part in split_content(message["content"], prefix=ROLE_PREFIX[message["role"]]):
                    batch.append({"content": part, "attributed_to": message["role"],
                                  "created_at": (start + timedelta(minutes=i + 1)).isoformat()})  # fmt: skip
            if batch:
                batches.append(batch)
                written += len(batch)
    out["long"] = batches
    return out


# --------------------------------------------------------------------------------------------
# Child side: runs with Engram imported from ``--tree``.
# --------------------------------------------------------------------------------------------


def _django(tree: Path) -> None:
    sys.path.insert(0, str(tree))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "engram_site.settings")
    import django

    django.setup()


class Meter:
    """Process CPU, this connection's backend CPU, the whole PostgreSQL server's CPU, wall."""

    def __init__(self) -> None:
        from django.db import connection

        with connection.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            self.backend = cur.fetchone()[0]

    def now(self) -> tuple[float, float, float, float]:
        return (
            time.process_time(),
            common.process_cpu_seconds(self.backend) or 0.0,
            common.server_cpu_seconds(self.backend) or 0.0,
            time.perf_counter(),
        )

    @staticmethod
    def since(start: tuple, end: tuple) -> dict:
        return {
            name: round(b - a, 4)
            for name, a, b in zip(("process", "backend", "server", "wall"), start, end, strict=True)
        }


def _warm() -> None:
    from engram_site.providers import embedding, lemmatizer, nlp
    from maintenance.classifier import get_classifier

    embedding.embed_texts(["warm up the embedding model", "and its buffers"] * 8)
    embedding.count_tokens(["warm up the tokenizer"])
    lemmatizer.lemmatize_many(["warm up the lemmatizer"])
    nlp.get_pipeline()("Warm up the pipeline, Priya said.")
    get_classifier()


def _ingest(bucket, batches: list[list[dict]], sequence: bool) -> int:
    from memories.services import MemoryInput, memories_ingest

    written = 0
    for batch in batches:
        items = []
        for row in batch:
            fields = {k: v for k, v in row.items() if k in MemoryInput.__dataclass_fields__}
            if fields.get("created_at"):
                fields["created_at"] = datetime.fromisoformat(fields["created_at"].replace("Z", "+00:00"))
            items.append(MemoryInput(**fields))
        memories_ingest(bucket=bucket, items=items, sequence=sequence)
        written += len(items)
    return written


def _stage_runs(bucket) -> dict:
    """One callable per stage: one step of the stage's task on ``bucket`` (without publishing),
    returning whether more may be pending."""
    from django.conf import settings

    import graph.tasks as graph_tasks
    import maintenance.tasks as maintenance_tasks
    import memories.tasks as memory_tasks
    from graph.services import extraction
    from maintenance.services import classification, comparisons
    from memories.services.enrichment import memories_enrich_pending
    from memories.services.keys import memory_keys_build
    from memories.services.passages import memory_passages_build

    def enrich() -> bool:
        size = settings.ENGRAM_ENRICH_BATCH_SIZE
        report = memories_enrich_pending(batch_size=size, bucket=bucket)
        per = memory_tasks.PASSAGES_PER_STEP
        passages = memory_passages_build(bucket=bucket, limit=per)
        return (report.scanned == size and report.failed < report.scanned) or (
            passages.scanned == per and passages.failed < passages.scanned
        )

    def graph() -> bool:
        report = extraction.graph_extract_pending(limit=graph_tasks.GRAPH_PER_STEP, bucket=bucket)
        return report.selected == graph_tasks.GRAPH_PER_STEP

    def keys() -> bool:
        report = memory_keys_build(bucket=bucket, limit=memory_tasks.KEYS_PER_STEP)
        return report.scanned == memory_tasks.KEYS_PER_STEP and report.built > 0

    def classify() -> bool:
        counts = classification.memories_classify(bucket=bucket, limit=maintenance_tasks.CLASSIFY_PER_STEP)
        return counts["scanned"] == maintenance_tasks.CLASSIFY_PER_STEP

    def compare() -> bool:
        _counts, more = comparisons.comparisons_step(bucket=bucket, limit=maintenance_tasks.COMPARE_PER_STEP)
        return more

    return {"enrich": enrich, "graph": graph, "keys": keys, "classify": classify, "compare": compare}


def _json(value):
    """A JSONB column as an object (the cursor may answer its text)."""
    return json.loads(value) if isinstance(value, str) else value


def _sorted_lists(value):
    """Lists sorted (recursively): their order followed the random uuids (links, pairs)."""
    if isinstance(value, dict):
        return {k: _sorted_lists(v) for k, v in value.items()}
    if isinstance(value, list):
        return sorted((_sorted_lists(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    return value


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _dump(bucket) -> dict:
    """What the stages produced in ``bucket``, by content (memory ids replaced by contents)."""
    from django.db import connection

    def q(sql: str) -> list[tuple]:
        with connection.cursor() as cur:
            cur.execute(sql, [bucket.pk])
            return cur.fetchall()

    names = {str(i): c for i, c in q("SELECT id, content FROM memories WHERE bucket_id = %s")}
    names |= {str(i): f"entity:{n}" for i, n in q("SELECT id, name FROM graph_entities WHERE bucket_id = %s")}

    def sub(value, *, sort: bool = False) -> object:
        text = json.dumps(value, sort_keys=True, default=str)
        value = json.loads(_UUID.sub(lambda m: json.dumps(names.get(m.group(0), "?"))[1:-1], text))
        return _sorted_lists(value) if sort else value

    def vec(v) -> list | None:
        return None if v is None else [round(float(x), 6) for x in v]

    memories = {
        content: sub(
            {"scope": scope, "topic": topic, "metadata": _json(metadata), "links": _json(links), "superseded_by": sup},
            sort=True,
        )
        for content, scope, topic, metadata, links, sup in q(
            "SELECT content, classified_scope, classified_topic, metadata, linked_memory_ids, superseded_by"
            " FROM memories WHERE bucket_id = %s"
        )
    }
    from pgvector.psycopg import register_vector  # noqa: F401 (the vectors come back as text otherwise)

    def parse(v):
        if v is None or isinstance(v, list):
            return v
        if isinstance(v, str):
            return [float(x) for x in v.strip("[]").split(",")]
        return list(v)

    keys = {
        content: {"text": text, "lemmatized": lemmas, "version": version, "stale": stale, "vector": vec(parse(v))}
        for content, text, lemmas, version, stale, v in q(
            "SELECT m.content, k.text, k.lemmatized, k.version, k.stale, k.embedding::text FROM memory_keys k"
            " JOIN memories m ON m.id = k.memory_id WHERE k.bucket_id = %s"
        )
    }
    passages: dict[str, list] = {}
    for content, ordinal, start, end, v in q(
        "SELECT m.content, p.ordinal, p.char_start, p.char_end, p.embedding::text FROM memory_passages p"
        " JOIN memories m ON m.id = p.memory_id WHERE p.bucket_id = %s ORDER BY m.content, p.ordinal"
    ):
        passages.setdefault(content, []).append({"span": [ordinal, start, end], "vector": vec(parse(v))})

    def rows(values) -> list:
        return sorted(values, key=lambda r: json.dumps(r, sort_keys=True))

    entities = rows(
        sub(list(r))
        for r in q(
            "SELECT name, normalized_name, type, aliases, mention_count FROM graph_entities WHERE bucket_id = %s"
        )
    )
    mentions = rows(
        sub([str(m), str(e)]) for m, e in q("SELECT memory_id, entity_id FROM graph_mentions WHERE bucket_id = %s")
    )
    edges = rows(
        sub([str(s), p, str(o) if o else None, lit, fk, str(vf), str(vt) if vt else None, round(c, 6), str(src)])
        for s, p, o, lit, fk, vf, vt, c, src in q(
            "SELECT subject_id, predicate, object_entity_id, object_literal, functional_key, valid_from, valid_to,"
            " confidence, source_memory_id FROM graph_edges WHERE bucket_id = %s"
        )
    )  # fmt: skip
    duplicates = rows(
        [*sorted(sub([str(a), str(b)])), round(s, 4), st]
        for a, b, s, st in q(
            "SELECT memory_a_id, memory_b_id, similarity, status FROM duplicate_candidates WHERE bucket_id = %s"
        )
    )
    conflicts = rows(
        [*sorted(sub([str(a), str(b)])), code, reason, round(score, 4), None if s is None else round(s, 4)]
        for a, b, code, reason, score, s in q(
            "SELECT memory_a_id, memory_b_id, code, reason, score, similarity FROM conflict_candidates"
            " WHERE bucket_id = %s"
        )
    )
    return {
        "memories": memories, "keys": keys, "passages": passages, "entities": entities, "mentions": mentions,
        "edges": edges, "duplicates": duplicates, "conflicts": conflicts,
    }  # fmt: skip


def child_measure(request: dict) -> dict:
    from django.core.management import call_command
    from django.db import connection

    from engram_site.scoping import scopes_disabled
    from memories import hooks
    from memories.services.buckets import bucket_create
    from tenants.models import Bucket, Tenant

    if request.get("migrate"):
        call_command("migrate", verbosity=0)
    hooks._suspended_until = float("inf")  # no messages to a broker: the stages are run here
    _warm()
    meter = Meter()
    tag = f"{request['label']}-{int(time.time())}"
    results: dict = {"stages": {}, "counts": {}, "load": [os.getloadavg()[0]]}
    dumps = {}
    with scopes_disabled():
        tenant, _ = Tenant.objects.get_or_create(slug=TENANT, defaults={"name": TENANT})
        for old in Bucket.objects.filter(tenant=tenant):  # an interrupted run's
            with connection.cursor() as cur:
                cur.execute("DELETE FROM buckets WHERE id = %s", [old.pk])
        buckets = {}
        for kind, batches in request["data"].items():
            bucket = bucket_create(tenant=tenant, name=f"{kind}-{tag}")
            buckets[kind] = bucket
            start = meter.now()
            results["counts"][kind] = _ingest(bucket, batches, sequence=kind != "short")
            results["stages"].setdefault("ingest", {})[kind] = Meter.since(start, meter.now())
        with connection.cursor() as cur:  # the planner sees the new rows, as the write path's check would
            cur.execute("ANALYZE memories")
        for stage in STAGES[1:]:
            for kind, bucket in buckets.items():
                step = _stage_runs(bucket)[stage]
                profile = stage in (request.get("profile") or "").split(",")
                if profile:
                    import cProfile

                    profiler = cProfile.Profile(time.process_time)  # CPU, not wall: the machine is shared
                    profiler.enable()
                start = meter.now()
                steps = 1
                while step():
                    steps += 1
                took = Meter.since(start, meter.now())
                if profile:
                    profiler.disable()
                    profiler.dump_stats(f"{request['profile_out']}.{stage}.{kind}")
                took["steps"] = steps
                results["stages"].setdefault(stage, {})[kind] = took
                log(f"{request['label']}: {stage} {kind}: {took}")
            results["load"].append(os.getloadavg()[0])
        for kind, bucket in buckets.items():
            dumps[kind] = _dump(bucket)
            with connection.cursor() as cur:
                cur.execute("DELETE FROM buckets WHERE id = %s", [bucket.pk])
    Path(request["dump"]).write_text(json.dumps(dumps, sort_keys=True))
    return results


CHILD_TASKS = {"measure": child_measure}


# --------------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------------


def run_child(task: str, tree: Path, request: dict, home: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        req, res = Path(tmp) / "request.json", Path(tmp) / "result.json"
        req.write_text(json.dumps(request))
        env = {**os.environ, "ENGRAM_HOME": str(home), "PYTHONPATH": str(tree), "ENGRAM_EMBEDDED_PG_KEEP": "1",
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
        script = str(Path(__file__).resolve())
        command = [sys.executable, script, "--child", task, "--tree", str(tree), str(req), str(res)]
        subprocess.run(command, env=env, check=True, cwd=str(tree))
        return json.loads(res.read_text())


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return len(a) == len(b) and max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0) <= VECTOR_TOLERANCE


def differences(a: dict, b: dict) -> dict[str, int]:
    """How many items of each part (PARTS) differ between dumps ``a`` and ``b``, over the kinds
    (vectors within VECTOR_TOLERANCE count as equal). A memory's labels (scope, topic, who
    labelled), its links (``linked_memory_ids`` and their kinds) and whether a memory is
    superseded (the graph's) are counted apart; a key document's text holds the graph's facts,
    so keys are counted twice: those whose text differs, and, among those of the same text, those
    whose lemmas or vector differ (what the key stage itself computes and stores)."""
    counts = dict.fromkeys(PARTS, 0)

    def memory_parts(m: dict) -> dict:
        meta = m["metadata"] or {}
        meta = json.loads(meta) if isinstance(meta, str) else meta  # the cursor may answer the text
        return {
            "labels": [m["scope"], m["topic"], meta.get("classified_by")],
            "links": [m["links"], meta.get("_engram_links")],
            "superseded": m["superseded_by"],
        }

    for kind in a:
        x, y = a[kind], b.get(kind, {})
        for content in set(x["memories"]) | set(y["memories"]):
            p1, p2 = (memory_parts(d["memories"][content]) if content in d["memories"] else {} for d in (x, y))
            for part in ("labels", "links", "superseded"):
                counts[part] += p1.get(part) != p2.get(part)
        for part in ("entities", "mentions", "edges", "duplicates", "conflicts"):
            rows1 = {json.dumps(r) for r in x[part]}
            rows2 = {json.dumps(r) for r in y.get(part, [])}
            counts[part] += len(rows1 ^ rows2)
        for content in set(x["keys"]) | set(y["keys"]):
            k1, k2 = x["keys"].get(content), y["keys"].get(content)
            if k1 is None or k2 is None or k1["text"] != k2["text"]:
                counts["key texts"] += 1
            elif any(k1[f] != k2[f] for f in ("lemmatized", "version", "stale")) or not _close(
                k1["vector"], k2["vector"]
            ):
                counts["keys of the same text"] += 1
        for content in set(x["passages"]) | set(y["passages"]):
            p1, p2 = x["passages"].get(content, []), y["passages"].get(content, [])
            if [p["span"] for p in p1] != [p["span"] for p in p2] or not all(
                _close(u["vector"], v["vector"]) for u, v in zip(p1, p2, strict=False)
            ):
                counts["passages"] += 1
    return counts


def summary(dump: dict) -> str:
    parts = []
    for kind, d in dump.items():
        labelled = sum(1 for m in d["memories"].values() if m["scope"])
        linked = sum(1 for m in d["memories"].values() if m["links"])
        parts.append(
            f"{kind}: {len(d['memories'])} memories, {labelled} labelled, {len(d['entities'])} entities, "
            f"{len(d['edges'])} edges, {len(d['keys'])} keys, {sum(len(p) for p in d['passages'].values())} passages, "
            f"{len(d['duplicates'])} near-duplicate pairs, {len(d['conflicts'])} conflicts, {linked} memories linked"
        )
    return "; ".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", default=str(Path(tempfile.gettempdir()) / "engram-stage-cpu"))
    parser.add_argument("--corpus", type=Path, default=BENCH_DIR / "data" / "corpus-100k.jsonl")
    parser.add_argument("--short", type=int, default=400, help="short facts from --corpus")
    parser.add_argument("--turns", type=int, default=400, help="conversational turns")
    parser.add_argument("--long", type=int, default=150, help="long messages (a part of a cut message counts)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--compare", action="append", default=[], metavar="LABEL=DIR",
                        help="another source tree measured alternately with this one")  # fmt: skip
    parser.add_argument(
        "--profile", help="cProfile these stages (comma-separated; this tree): --profile-out.STAGE.KIND"
    )
    parser.add_argument("--profile-out", default=str(Path(tempfile.gettempdir()) / "stage-cpu.prof"))
    parser.add_argument("--dumps", help="keep what each run produced (JSON) in this directory")
    parser.add_argument("--skip-this", action="store_true", help="measure only the --compare trees")
    parser.add_argument("--label", default="")
    parser.add_argument("--note", default="")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--child", choices=sorted(CHILD_TASKS), help=argparse.SUPPRESS)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    parser.add_argument("paths", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        _django(Path(args.tree))
        request_path, result_path = args.paths
        result = CHILD_TASKS[args.child](json.loads(Path(request_path).read_text()))
        Path(result_path).write_text(json.dumps(result))
        return 0

    home = Path(args.home)
    home.mkdir(parents=True, exist_ok=True)
    data = datasets(corpus=args.corpus, short=args.short, turns=args.turns, long=args.long)
    variants = [tuple(item.split("=", 1)) for item in args.compare]
    if not args.skip_this:
        variants.append(("this", str(REPO_ROOT)))
    runs: dict[str, list[dict]] = {label: [] for label, _ in variants}
    dumps: dict[str, list[dict]] = {}
    first = True
    for repeat in range(args.repeat):
        for label, tree in variants:
            with tempfile.NamedTemporaryFile(suffix=".json") as dump:
                request = {
                    "data": data,
                    "label": label,
                    "dump": dump.name,
                    "migrate": first,
                    "profile": args.profile if label == "this" else None,
                    "profile_out": args.profile_out,
                }
                first = False
                result = run_child("measure", Path(tree), request, home)
                dumps.setdefault(label, []).append(json.loads(Path(dump.name).read_text()))
                if args.dumps:
                    Path(args.dumps).mkdir(parents=True, exist_ok=True)
                    (Path(args.dumps) / f"{label}-{repeat + 1}.json").write_text(Path(dump.name).read_text())
            runs[label].append(result)
            log(f"repeat {repeat + 1} {label}: load {result['load']}")

    counts = runs[variants[-1][0]][0]["counts"]
    total = sum(counts.values())

    def per_k(label: str, stage: str, what: str, kind: str | None = None) -> float:
        values = []
        for r in runs[label]:
            kinds = [kind] if kind else list(r["stages"][stage])
            seconds = sum(r["stages"][stage][k][what] for k in kinds)
            n = sum(r["counts"][k] for k in kinds)
            values.append(1000 * seconds / n)
        return statistics.median(values)

    labels = [label for label, _ in variants]
    lines = [
        "CPU seconds per 1,000 memories (median of the repeats): the worker's process / its PostgreSQL backend / "
        "the whole PostgreSQL server",
        "",
        "| stage | " + " | ".join(f"{label}: process | {label}: backend | {label}: server" for label in labels) + " |",
        "|---|" + "---:|" * (3 * len(labels)),
    ]
    for stage in STAGES:
        cells = []
        for label in labels:
            cells += [f"{per_k(label, stage, w):.2f}" for w in ("process", "backend", "server")]
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    cells = [
        f"{sum(per_k(label, s, w) for s in STAGES[1:]):.2f}"
        for label in labels
        for w in ("process", "backend", "server")
    ]
    lines.append("| **follow-up stages** | " + " | ".join(cells) + " |")
    lines += ["", "Per kind of memory (process + backend CPU s per 1,000 memories of that kind):", ""]
    lines.append("| stage | " + " | ".join(f"{label}: {kind}" for label in labels for kind in KINDS) + " |")
    lines.append("|---|" + "---:|" * (len(labels) * len(KINDS)))
    for stage in STAGES:
        cells = [
            f"{per_k(label, stage, 'process', kind) + per_k(label, stage, 'backend', kind):.2f}"
            for label in labels
            for kind in KINDS
        ]
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    loads = {label: [round(x, 1) for r in runs[label] for x in (r["load"][0], r["load"][-1])] for label in labels}
    lines += ["", "Load average (1 min) at the start and end of each run: "
              + "; ".join(f"{label} {loads[label]}" for label in labels), ""]  # fmt: skip
    reference = labels[0]
    lines += ["What the stages produced:", "", f"- {reference}, first run: {summary(dumps[reference][0])}"]
    pairs = [(f"{label} run {i + 1}", dump) for label in labels for i, dump in enumerate(dumps[label])][1:]
    lines += [
        "",
        f"Items that differ from {reference} run 1 (a pair, an edge, an entity, a mention: in one run and not "
        "the other counts 1 each side):",
        "",
        "| run | " + " | ".join(PARTS) + " |",
        "|---|" + "---:|" * len(PARTS),
    ]
    for name, dump in pairs:
        diff = differences(dumps[reference][0], dump)
        lines.append(f"| {name} | " + " | ".join(str(diff[p]) for p in PARTS) + " |")
    table = "\n".join(lines)
    print(table)
    if args.no_write:
        return 0
    info = common.machine_info()
    suffix = f"-{args.label}" if args.label else ""
    path = common.RESULTS_DIR / f"stage-cpu-{datetime.now(UTC):%Y-%m-%d}{suffix}.md"
    follow = {
        label: sum(per_k(label, s, "process") + per_k(label, s, "backend") for s in STAGES[1:]) for label in labels
    }
    headline = (
        f"{total} memories: follow-up stages "
        + ", ".join(f"{label} {follow[label]:.1f}" for label in labels)
        + " CPU s per 1,000 memories (worker process + its PostgreSQL backend)"
    )
    header = common.report_header(__file__, headline, series=args.label or "default", info=info)
    trees = "\n".join(f"  - {label}: {tree}" for label, tree in variants)
    path.write_text(
        f"{header}\n# CPU per memory of the follow-up stages{f' ({args.label})' if args.label else ''}\n\n"
        f"{common.machine_markdown(info)}\n- data: {counts} (short facts of {args.corpus.name}, turns of "
        f"bench/eval/conversations.json, messages of bench/eval/long/sessions.json)\n- variants:\n{trees}\n"
        f"{f'- note: {args.note}' if args.note else ''}\n\n{table}\n"
    )
    print(f"\nwrote {path.relative_to(BENCH_DIR.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
