"""Warm queries through `imgtxt.Library` (one process, one thread) beside a cold `imgtxt search`, at 1k and 100k photos.

    .venv/bin/python bench/warm_search.py [--sizes 1000,100000] [--queries 200] [--cold-runs 10]
    .venv/bin/python bench/warm_search.py --before main      # the same loops with the code of git revision main
    .venv/bin/python bench/warm_search.py --keep "$TMPDIR/warm"   # build the indexes once, rerun on the same files
    .venv/bin/python bench/warm_search.py --sizes 100000 --earlier-trees 10   # beside a build of 10 Annoy trees
    .venv/bin/python bench/warm_search.py --sizes 100000 --results 24   # as many results as the web page shows

For each size: a synthetic index (random unit vectors in the model's space, written with the library's own Store and
vector builder, as bench/search_latency.py does), then in fresh interpreters, each variant (this checkout, and
--before REV extracted with `git archive`) in alternating order:
  - warm, new text: one Library, one search first (model and index loaded), then --queries distinct sentences, each
    searched once (the query vector cache never hits): wall-clock and CPU milliseconds per query, p50 and p90;
  - warm, repeated text: the same Library searching the first 10 of those sentences again, round after round;
  - the text encoder alone on the new sentences (the model's numpy encoder, uncached, one BLAS thread for both
    variants): the floor of a new query;
  - cold: `imgtxt search` as a new process, median of --cold-runs, and a cold `python -c 'import numpy'` beside it;
  - with --before: for how many of the new sentences both variants return the same 10 photos in the same order;
  - with --earlier-trees T: this checkout also searches a second index of each size whose Annoy files were built
    with T trees (as an earlier version built them; searched with the search_k of such a build), in turn with
    the first: what the tree count and its search_k change in a whole warm query.
Wall time is what a user waits for; CPU time (all of the process's threads: BLAS threads that spin count) says the
same with less of the machine's load in it (other programs on a busy machine take the cores, not this
process's CPU seconds).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from index_speed import REPO, pick_model  # noqa: E402
from search_latency import RUN_CLI, checkout, fake_index, timed  # noqa: E402

SUBJECTS = ["a dog", "two children", "a man in a red shirt", "a woman", "a black cat", "a group of people",
            "a little girl", "a brown horse", "an old car", "a surfer"]
ACTIONS = ["running on", "sitting on", "playing in", "walking along", "jumping over", "standing near",
           "riding through", "lying on", "looking at", "climbing"]
PLACES = ["the beach", "a snowy field", "the grass", "a busy street", "a wooden bench", "the water",
          "a rocky hill", "the park", "a red wall", "the sand"]


def sentences(count: int) -> list[str]:
    """`count` distinct short queries, the length of what people type (5-9 words)."""
    out = [f"{s} {a} {p}" for p in PLACES for a in ACTIONS for s in SUBJECTS]
    return out[:: max(1, len(out) // count)][:count]


# Runs in a fresh interpreter with the code under test first on the path; prints one JSON line.
WARM = """
import json, os, sys, time
if os.environ.get("IMGTXT_BENCH_CODE"):
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, os.environ["IMGTXT_BENCH_CODE"])
from imgtxt import Library
index_dir, queries, n = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
lib = Library(index_dir)
lib.search("a photo")
top = []
def timed(texts):
    wall, cpu = [], []
    for text in texts:
        w, c = time.perf_counter(), time.process_time()
        found = lib.search(text, n)
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
        assert len(found) == n
        top.append([m.path for m in found])
    return wall, cpu
new = timed(queries)
new_top = top[:len(queries)]
repeated = timed(queries[:10] * 10)
model = lib.model
encode = getattr(model, "_encode_query", None) or model.encode_query
enc = []
from threadpoolctl import threadpool_limits
with threadpool_limits(limits=1, user_api="blas"):   # as a search runs it (the earlier code: on its own BLAS threads)
    for text in queries:
        c = time.process_time()
        encode([text])
        enc.append(time.process_time() - c)
print(json.dumps({"new": new, "repeated": repeated, "encoder_cpu": enc, "top": new_top}))
"""


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--cold-runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2, help="warm runs per variant, alternating")
    parser.add_argument("--model", default=None)
    parser.add_argument("--before", default=None, help="git revision to compare with (e.g. main)")
    parser.add_argument("--keep", type=Path, default=None, help="build the indexes here and reuse them")
    parser.add_argument("--results", type=int, default=10,
                        help="results per search (the web page shows 24; `imgtxt search -n`)")
    parser.add_argument("--earlier-trees", type=int, default=None,
                        help="also search an index built with this many Annoy trees (the earlier default: 10)")
    args = parser.parse_args()

    from imgtxt.library import vector_index
    from imgtxt.model.modelfile import TrainedModel

    queries = sentences(args.queries)
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPU cores")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = TrainedModel.load(pick_model(args.model, tmp))
        variants = [("this checkout", {**os.environ, "IMGTXT_BENCH_CODE": str(REPO)}, "")]
        if args.before:
            code = checkout(args.before, tmp / "before")
            variants.append((args.before, {**os.environ, "IMGTXT_BENCH_CODE": str(code)}, ""))
        if args.earlier_trees:
            variants.append((f"{args.earlier_trees}-tree build", variants[0][1], f"-t{args.earlier_trees}"))
        for n in (int(s) for s in args.sizes.split(",")):
            index_dir = (args.keep or tmp) / f"index-{n}"
            for _, _, suffix in variants:
                if not (Path(f"{index_dir}{suffix}") / "index.db").is_file():
                    trees = vector_index.N_TREES
                    vector_index.N_TREES = args.earlier_trees if suffix else trees   # (the same vectors: seeded)
                    fake_index(Path(f"{index_dir}{suffix}"), model, n)
                    vector_index.N_TREES = trees
            results: dict[str, dict[str, list[float]]] = {}
            for _ in range(args.rounds):
                for name, env, suffix in variants:
                    out = subprocess.run([sys.executable, "-c", WARM, f"{index_dir}{suffix}", json.dumps(queries),
                                          str(args.results)],
                                         check=True, capture_output=True, text=True, env=env).stdout
                    got = json.loads(out.splitlines()[-1])
                    mine = results.setdefault(name, {})
                    for key in ("new", "repeated"):
                        for part, values in zip(("wall", "cpu"), got[key]):
                            mine.setdefault(f"{key} {part}", []).extend(values)
                    mine.setdefault("encoder cpu", []).extend(got["encoder_cpu"])
                    mine.setdefault("top", []).append(got["top"])
            cold: dict[str, list[float]] = {"import numpy": []}
            def cli(suffix):
                return [sys.executable, "-c", RUN_CLI, "search", queries[0], "--index", f"{index_dir}{suffix}",
                        "-n", str(args.results)]
            for name, env, suffix in variants:
                timed(cli(suffix), env)   # the OS file cache warm, as a second search finds it
            for _ in range(args.cold_runs):
                cold["import numpy"].append(timed([sys.executable, "-c", "import numpy"])[0])
                for name, env, suffix in variants:
                    cold.setdefault(name, []).append(timed(cli(suffix), env)[0])
            base = statistics.median(cold["import numpy"])
            print(f"{n:>7} photos: cold `python -c 'import numpy'` median {base * 1e3:.0f} ms")
            for name, _, _ in variants:
                r, c = results[name], statistics.median(cold[name])
                print(f"{n:>7} photos, {name}: cold `imgtxt search` median {c * 1e3:.0f} ms ({c / base:.2f}x import "
                      f"numpy, {args.cold_runs} runs)")
                for key in ("new", "repeated"):
                    w, u = r[f"{key} wall"], r[f"{key} cpu"]
                    print(f"{n:>7} photos, {name}: warm Library.search, {key} text: p50 {pct(w, .5):.1f} ms, "
                          f"p90 {pct(w, .9):.1f} ms wall; CPU p50 {pct(u, .5):.1f} ms, p90 {pct(u, .9):.1f} ms "
                          f"({len(w)} queries)")
                e = r["encoder cpu"]
                print(f"{n:>7} photos, {name}: text encoder alone: CPU p50 {pct(e, .5):.1f} ms, p90 {pct(e, .9):.1f} ms")
            if args.before:
                mine, old = results["this checkout"], results[args.before]
                for key in ("new wall", "new cpu", "repeated wall", "repeated cpu", "encoder cpu"):
                    print(f"{n:>7} photos: {key} p50, this checkout / {args.before}: "
                          f"{pct(mine[key], .5) / pct(old[key], .5):.2f}x")
                same = sum(a == b for a, b in zip(mine["top"][0], old["top"][0]))
                print(f"{n:>7} photos: the same {args.results} photos in the same order as {args.before} for {same} "
                      f"of {len(queries)} new-text queries")
                print(f"{n:>7} photos: cold search median, this checkout / {args.before}: "
                      f"{statistics.median(cold['this checkout']) / statistics.median(cold[args.before]):.2f}x")
            if args.earlier_trees:
                mine, old = results["this checkout"], results[f"{args.earlier_trees}-tree build"]
                for key in ("new wall", "new cpu", "repeated wall", "repeated cpu"):
                    print(f"{n:>7} photos: {key} p50 and p90, this checkout's build / the {args.earlier_trees}-tree "
                          f"build: {pct(mine[key], .5) / pct(old[key], .5):.2f}x, "
                          f"{pct(mine[key], .9) / pct(old[key], .9):.2f}x")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
