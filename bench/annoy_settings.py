"""Annoy's settings at one library size, side by side in one run: trees, search_k and the candidates rescored.

    OMP_NUM_THREADS=1 .venv/bin/python bench/annoy_settings.py [--size 100000] [--trees 10,20,30,40]
        [--search-k 10000,15000,20000,30000] [--candidates 300] [--projected 64,128] [--rounds 3] [--queries 300]
        [--work DIR] [--want 24 --baseline 50,60000,300]

The library and the queries are bench/vector_search.py's (the shipped model's 7,000 real Flickr8k train+val photo
vectors plus vectors drawn from a mixture fitted to them; 300 val caption queries and 100 val photo queries,
recall@10 against exact search). One Annoy build per tree count and projection width (--projected: the PCA
dimensions Annoy's items keep, vector_index.PROJECTED_DIM by default), written by the library's own
`vector_build.write_build` and searched through `VectorIndex` (the object `imgtxt search` uses), its build time
(wall and CPU) and size on disk recorded. Every (trees, search_k, candidates) of the grid, the shipped one
(trees_for(size), search_k, candidates) and the --baseline (the earlier default) are then searched with all
queries, one thread, the settings in turn round after round (so a change in the machine's load falls on all of
them alike): recall@10, p50/p90 of wall and CPU milliseconds per query, and the distinct candidates Annoy scored
(what search_k costs: with more trees one item is found in more of them). Each row is printed with its ratios to
the baseline's; with --json, one JSON object a line.

--want W: each search asks for W results (the web page shows 24) and recall@W is counted against exact search's
top W; --search-k values are then the search_k of a W-result search (the shipped one, vector_index.search_k:
20,000 x sqrt(ceil(W / 10)) at 100k), and the candidates rescored grow as the product's do (30 a result).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_vectors import WORK, FittedMixture, caption_vectors, load_model, photo_vectors  # noqa: E402
from vector_search import exact_top, timed  # noqa: E402


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def build(folder: Path, library: np.ndarray, trees: int, projected: int):
    from imgtxt.library import vector_build, vector_index

    n = len(library)
    saved = vector_index.N_TREES, vector_index.PROJECTED_DIM
    vector_index.N_TREES, vector_index.PROJECTED_DIM = trees, projected
    chunks = ((np.arange(s, min(s + 65536, n)) + 1, library[s:s + 65536]) for s in range(0, n, 65536))
    try:
        record, wall, cpu = timed(lambda: vector_build.write_build(folder, f"trees-{trees}-{projected}", chunks,
                                                                   "bench", library.shape[1], n, kind="annoy-pca"))
    finally:
        vector_index.N_TREES, vector_index.PROJECTED_DIM = saved
    assert record.trees == trees and record.projected == min(projected, library.shape[1])
    disk = record.ann_bytes + vector_index.projection_bytes(record.dim, record.projected)
    return vector_index.VectorIndex(folder, record), {"build_s": wall, "build_cpu_s": cpu, "ann_bytes": disk,
                                                      "vec_bytes": record.bytes}


def searcher(index, k: int, rescored: int, want: int = 10):
    """search(query) -> the ids of `want` results with search_k k (for those `want` results) and `rescored`
    candidates rescored per 10 results, through VectorIndex.search."""
    from imgtxt.library import vector_index

    def search(query: np.ndarray) -> np.ndarray:
        saved = vector_index.search_k, vector_index.candidates
        vector_index.search_k = lambda asked, count, trees=0: k
        vector_index.candidates = lambda asked: max(rescored, rescored * asked // 10)
        try:
            return index.search(query, want, vector_index.dot_scorer(query))[0]
        finally:
            vector_index.search_k, vector_index.candidates = saved
    return search


def distinct_candidates(index, queries: np.ndarray, k: int) -> float:
    """Mean items Annoy computes a distance for at search_k k (asking for all of them returns each once)."""
    counts = [len(index.annoy.get_nns_by_vector((q @ index.basis).tolist(), k, search_k=k)) for q in queries]
    return float(np.mean(counts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--trees", default="10,20,30,40")
    ap.add_argument("--search-k", default="10000,15000,20000,30000")
    ap.add_argument("--candidates", default="300", help="candidates rescored on the full vectors, comma-separated")
    ap.add_argument("--projected", default="", help="PCA widths of Annoy's items, comma-separated (default: the "
                    "shipped PROJECTED_DIM)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", default="10,30000,300", help="trees,search_k,rescored[,projected] the ratios are "
                    "to (the earlier default; projected: PROJECTED_DIM when left out)")
    ap.add_argument("--queries", type=int, default=300, help="caption queries (plus a third as many photo queries)")
    ap.add_argument("--want", type=int, default=10, help="results per search; recall@want (default 10)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--model", default=None)
    ap.add_argument("--work", type=Path, default=WORK)
    args = ap.parse_args()

    from imgtxt.library import vector_index

    base = tuple(int(v) for v in args.baseline.split(","))
    base = base if len(base) == 4 else (*base, vector_index.PROJECTED_DIM)
    want = args.want
    shipped = (vector_index.trees_for(args.size), vector_index.search_k(want, args.size), vector_index.CANDIDATES,
               vector_index.PROJECTED_DIM)
    grid = itertools.product(*([int(v) for v in s.split(",") if v] or [vector_index.PROJECTED_DIM]
                               for s in (args.trees, args.search_k, args.candidates, args.projected)))
    settings = [base, *sorted({shipped, *grid} - {base})]
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPU cores", file=sys.stderr)

    model = load_model(args.model)
    real = np.concatenate([photo_vectors(model, args.work, "train"), photo_vectors(model, args.work, "val")])
    rng = np.random.default_rng(0)   # the same library and queries as bench/vector_search.py
    captions = caption_vectors(model, args.work, "val")
    queries = np.concatenate([captions[rng.choice(len(captions), args.queries, replace=False)],
                              real[-1000:][rng.choice(1000, args.queries // 3, replace=False)]])
    n = args.size
    library = np.concatenate([real, FittedMixture(real).sample(n - len(real), seed=n)])
    truth = exact_top(library, queries, want)
    folder = args.work / f"annoy-settings-{n}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    try:
        built = {(t, p): build(folder, library, t, p) for t, p in sorted({(s[0], s[3]) for s in settings})}
        searches = {s: searcher(built[s[0], s[3]][0], s[1], s[2], want) for s in settings}
        for search in searches.values():
            search(queries[0])   # pages mapped
        wall = {s: [] for s in settings}
        cpu = {s: [] for s in settings}
        found = {}
        for _ in range(args.rounds):
            for s, search in searches.items():
                got = []
                for q in queries:
                    w, c = time.perf_counter(), time.process_time()
                    ids = search(q)
                    wall[s].append(1e3 * (time.perf_counter() - w))
                    cpu[s].append(1e3 * (time.process_time() - c))
                    got.append(ids.tolist())
                found[s] = got
        rows = []
        for s in settings:
            recall = np.mean([len(set(g[:want]) & set(t.tolist())) / want for g, t in zip(found[s], truth)])
            rows.append({"size": n, "trees": s[0], "search_k": s[1], "rescored": s[2], "projected": s[3],
                         "shipped": s == shipped,
                         "baseline": s == base, "want": want,
                         "recall_at_10" if want == 10 else f"recall_at_{want}": round(float(recall), 4),
                         "distinct_candidates": round(distinct_candidates(built[s[0], s[3]][0], queries[:100],
                                                                          s[1])),
                         "p50_ms": pct(wall[s], 50), "p90_ms": pct(wall[s], 90),
                         "cpu_p50_ms": pct(cpu[s], 50), "cpu_p90_ms": pct(cpu[s], 90), **built[s[0], s[3]][1]})
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    base = rows[0]   # the baseline's
    for r in rows:
        r.update(load_1min=round(os.getloadavg()[0], 1), cores=os.cpu_count())
        if args.json:
            print(json.dumps(r), flush=True)
            continue
        print(f"{r['trees']:>3} trees, PCA {r['projected']:>3}, search_k {r['search_k']:>6,}, best {r['rescored']:>3} "
              f"rescored: "
              f"recall@{want} {r['recall_at_10' if want == 10 else f'recall_at_{want}']:.3f}  "
              f"{r['distinct_candidates']:>6,} distinct candidates  "
              f"p50/p90 {r['p50_ms']:.2f}/{r['p90_ms']:.2f} ms wall ({r['p50_ms'] / base['p50_ms']:.2f}x/"
              f"{r['p90_ms'] / base['p90_ms']:.2f}x), CPU {r['cpu_p50_ms']:.2f}/{r['cpu_p90_ms']:.2f} ms "
              f"({r['cpu_p50_ms'] / base['cpu_p50_ms']:.2f}x/{r['cpu_p90_ms'] / base['cpu_p90_ms']:.2f}x)  "
              f"build {r['build_s']:.1f} s wall, {r['build_cpu_s']:.1f} s CPU ({r['build_s'] / base['build_s']:.2f}x)"
              f"  .ann+.proj {r['ann_bytes'] / 1e6:.0f} MB ({r['ann_bytes'] / base['ann_bytes']:.2f}x)"
              + ("  *baseline" if r["baseline"] else "") + ("  *shipped" if r["shipped"] else ""), flush=True)
    print(f"{n:,} photos; .vec {base['vec_bytes'] / 1e6:.0f} MB whatever the setting; {len(queries)} queries x "
          f"{args.rounds} rounds; load average after: {os.getloadavg()[0]:.2f} (1 min), {os.getloadavg()[1]:.2f} "
          f"(5 min)", file=sys.stderr)


if __name__ == "__main__":
    main()
