"""Vector search at 100k and 1M photos: recall@10 against exact search, query latency in-process, build time.

    OMP_NUM_THREADS=1 .venv/bin/python bench/vector_search.py [--sizes 100000,1000000] [--json]
        [--compare] [--search-k 10000,30000] [--trees 10,20] [--projected 64,256] [--candidates 100]
        [--queries 300] [--work DIR] [--model DIR]

The library: the shipped model's 7,000 real Flickr8k train+val photo vectors plus synthetic ones drawn from a
Gaussian mixture fitted to them (bench/real_vectors.py) up to the size. The queries: real val caption vectors
(what `imgtxt search` sends) and real val photo vectors (`imgtxt similar`). The Annoy index is written by the
library's own `vector_build.write_build` into a folder under --work and searched through `VectorIndex`, the
object `imgtxt search` uses (files in the page cache, as for any search after the first).

For each size: the shipped settings (trees_for(size), SEARCH_K, PROJECTED_DIM); recall@200 with -n 200 (search_k
grows with it); with --search-k / --trees / --projected, other settings (the Annoy index over a PCA projection
of that many dimensions, candidates rescored on the full vectors); with --candidates, other numbers of Annoy's
best candidates rescored (CANDIDATES, at the shipped search_k); with --compare, exact search over the mapped matrix and, when
installed (the `bench` extra), FAISS IVFFlat (inner product, ~1,024 vectors a list, nprobe 16) and hnswlib
(M 16, ef_construction 200, ef 128). Queries run single-threaded. recall@10 = the share of exact search's top 10
that is found. With --json, one JSON object a line per row; the shipped row has "shipped": true.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_vectors import WORK, FittedMixture, caption_vectors, load_model, photo_vectors  # noqa: E402


def exact_top(library: np.ndarray, queries: np.ndarray, k: int = 10, chunk: int = 100_000) -> np.ndarray:
    """Ids (row + 1) of the k best rows of each query, best first."""
    best_ids = np.zeros((len(queries), 0), np.int64)
    best = np.zeros((len(queries), 0), np.float32)
    for s in range(0, len(library), chunk):
        part = library[s:s + chunk]
        scores = np.concatenate([best, queries @ part.T], axis=1)
        ids = np.concatenate([best_ids, np.broadcast_to(np.arange(s, s + len(part)) + 1,
                                                        (len(queries), len(part)))], axis=1)
        keep = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        best, best_ids = np.take_along_axis(scores, keep, 1), np.take_along_axis(ids, keep, 1)
    order = np.argsort(-best, axis=1, kind="stable")
    return np.take_along_axis(best_ids, order, 1)


def measure(search, queries: np.ndarray, truth: np.ndarray, k: int = 10) -> dict:
    """recall@k, wall p50/p90 and CPU p50 (all threads of this process) of search(query) -> ids (best first)."""
    times, cpu, recalls = [], [], []
    search(queries[0])
    for q, expected in zip(queries, truth):
        t, c = time.perf_counter(), time.process_time()
        ids = np.asarray(search(q))
        times.append(1000 * (time.perf_counter() - t))
        cpu.append(1000 * (time.process_time() - c))
        recalls.append(len(set(ids[:k].tolist()) & set(expected[:k].tolist())) / k)
    return {f"recall_at_{k}": round(float(np.mean(recalls)), 4), "p50_ms": round(statistics.median(times), 2),
            "p90_ms": round(float(np.percentile(times, 90)), 2), "cpu_p50_ms": round(statistics.median(cpu), 2)}


def timed(build):
    t, c = time.perf_counter(), time.process_time()
    value = build()
    return value, round(time.perf_counter() - t, 1), round(time.process_time() - c, 1)


def annoy_rows(args, folder: Path, library: np.ndarray, queries, truth, truth200, trees: int, projected: int):
    from imgtxt.library import vector_build, vector_index

    n = len(library)
    shipped = (vector_index.trees_for(n), vector_index.PROJECTED_DIM)
    shipped_k = vector_index.SEARCH_K
    saved = vector_index.N_TREES, vector_index.PROJECTED_DIM
    vector_index.N_TREES = trees
    vector_index.PROJECTED_DIM = projected
    chunks = ((np.arange(s, min(s + 65536, n)) + 1, library[s:s + 65536]) for s in range(0, n, 65536))
    record, build_s, build_cpu = timed(lambda: vector_build.write_build(
        folder, f"bench-{trees}-{projected}", chunks, "bench", library.shape[1], n, kind="annoy-pca"))
    vector_index.N_TREES, vector_index.PROJECTED_DIM = saved
    index = vector_index.VectorIndex(folder, record)
    shipped_fraction, earlier_k = vector_index.SEARCH_K_FRACTION, vector_index.EARLIER_SEARCH_K
    for k in sorted({shipped_k, *args.search_k}):
        vector_index.SEARCH_K = vector_index.EARLIER_SEARCH_K = k   # whatever the tree count
        # an asked-for search_k is measured as it is: the fraction of the build (150k at 1M) would override it
        vector_index.SEARCH_K_FRACTION = shipped_fraction if k == shipped_k else 0.0
        row = {"engine": "annoy", "size": n,
               "setting": f"PCA {projected}, {trees} trees, search_k {vector_index.search_k(10, n)}",
               "trees": trees, "projected_dim": projected, "search_k": vector_index.search_k(10, n),
               **measure(lambda q: index.search(q, 10, vector_index.dot_scorer(q))[0], queries, truth),
               "build_s": build_s, "build_cpu_s": build_cpu,
               "disk_bytes": record.bytes + record.ann_bytes + vector_index.projection_bytes(record.dim, projected),
               "shipped": (trees, projected) == shipped and k == shipped_k}
        if row["shipped"]:
            wide = measure(lambda q: index.search(q, 200, vector_index.dot_scorer(q))[0], queries[:100],
                           truth200[:100], k=200)
            row.update(recall_at_200=wide["recall_at_200"], p50_ms_at_200=wide["p50_ms"])
        vector_index.SEARCH_K, vector_index.SEARCH_K_FRACTION = shipped_k, shipped_fraction
        vector_index.EARLIER_SEARCH_K = earlier_k
        yield row
    shipped_candidates = vector_index.CANDIDATES, vector_index.CANDIDATES_PER_RESULT
    vector_index.EARLIER_SEARCH_K = vector_index.SEARCH_K   # at the shipped search_k, whatever the tree count
    for c in args.candidates:   # c for 10 results (both constants: the larger of them counts)
        vector_index.CANDIDATES, vector_index.CANDIDATES_PER_RESULT = c, max(1, c // 10)
        yield {"engine": "annoy", "size": n, "setting": f"PCA {projected}, {trees} trees, search_k "
               f"{vector_index.search_k(10, n)}, best {c} rescored", "trees": trees, "projected_dim": projected,
               "search_k": vector_index.search_k(10, n), "candidates": c,
               **measure(lambda q: index.search(q, 10, vector_index.dot_scorer(q))[0], queries, truth),
               "build_s": build_s, "build_cpu_s": build_cpu, "shipped": False,
               "disk_bytes": record.bytes + record.ann_bytes + vector_index.projection_bytes(record.dim, projected)}
    vector_index.CANDIDATES, vector_index.CANDIDATES_PER_RESULT = shipped_candidates
    vector_index.EARLIER_SEARCH_K = earlier_k


def compare_rows(folder: Path, library: np.ndarray, queries, truth):
    from imgtxt.library import vector_build, vector_index

    n, dim = library.shape
    chunks = [(np.arange(n) + 1, library)]
    record, build_s, build_cpu = timed(lambda: vector_build.write_build(folder, "exact", iter(chunks), "bench",
                                                                        dim, n, kind="exact"))
    index = vector_index.VectorIndex(folder, record)
    yield {"engine": "exact", "size": n, "setting": "every vector (mapped float32)",
           **measure(lambda q: index.search(q, 10, vector_index.dot_scorer(q))[0], queries, truth),
           "build_s": build_s, "build_cpu_s": build_cpu, "disk_bytes": record.bytes}
    try:
        import faiss
    except ImportError:
        faiss = None
    if faiss is not None:
        lists = max(1, round(n / 1024))
        quantizer = faiss.IndexFlatIP(dim)
        ivf = faiss.IndexIVFFlat(quantizer, dim, lists, faiss.METRIC_INNER_PRODUCT)

        def build_ivf():
            sample = library[np.random.default_rng(0).choice(n, min(n, 64 * lists), replace=False)]
            ivf.train(sample)
            ivf.add(library)
        _, build_s, build_cpu = timed(build_ivf)
        faiss.omp_set_num_threads(1)
        ivf.nprobe = 16
        faiss.write_index(ivf, str(folder / "ivf.faiss"))
        yield {"engine": "faiss-ivfflat", "size": n, "setting": f"{lists} lists, nprobe 16",
               **measure(lambda q: ivf.search(q[None], 10)[1][0] + 1, queries, truth),
               "build_s": build_s, "build_cpu_s": build_cpu, "disk_bytes": os.path.getsize(folder / "ivf.faiss")}
        del ivf, quantizer
    try:
        import hnswlib
    except ImportError:
        hnswlib = None
    if hnswlib is not None:
        hnsw = hnswlib.Index(space="ip", dim=dim)

        def build_hnsw():
            hnsw.init_index(max_elements=n, M=16, ef_construction=200, random_seed=0)
            hnsw.add_items(library, np.arange(n) + 1)
        _, build_s, build_cpu = timed(build_hnsw)
        hnsw.set_ef(128)
        hnsw.set_num_threads(1)
        hnsw.save_index(str(folder / "hnsw.bin"))
        yield {"engine": "hnswlib", "size": n, "setting": "M 16, ef 128",
               **measure(lambda q: hnsw.knn_query(q[None], 10)[0][0], queries, truth),
               "build_s": build_s, "build_cpu_s": build_cpu, "disk_bytes": os.path.getsize(folder / "hnsw.bin")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--queries", type=int, default=300, help="caption queries (plus a third as many photo queries)")
    ap.add_argument("--json", action="store_true", help="one JSON object a line per row")
    ap.add_argument("--compare", action="store_true", help="add exact, FAISS IVF and hnswlib rows")
    ap.add_argument("--search-k", default="", help="other SEARCH_K values to measure, comma-separated")
    ap.add_argument("--trees", default="", help="other tree counts to build and measure, comma-separated")
    ap.add_argument("--projected", default="", help="other PCA widths of the Annoy index, comma-separated")
    ap.add_argument("--candidates", default="", help="other numbers of candidates rescored, comma-separated")
    ap.add_argument("--model", default=None)
    ap.add_argument("--work", type=Path, default=WORK,
                    help=f"working folder, kept between runs for its cached vectors (default: {WORK})")
    args = ap.parse_args()
    args.search_k = [int(k) for k in args.search_k.split(",") if k]
    args.candidates = [int(c) for c in args.candidates.split(",") if c]
    say = (lambda *a, **k: print(*a, file=sys.stderr, **k)) if args.json else print

    from imgtxt.library import vector_index

    model = load_model(args.model)
    real = np.concatenate([photo_vectors(model, args.work, "train"), photo_vectors(model, args.work, "val")])
    rng = np.random.default_rng(0)
    captions = caption_vectors(model, args.work, "val")
    queries = np.concatenate([captions[rng.choice(len(captions), args.queries, replace=False)],
                              real[-1000:][rng.choice(1000, args.queries // 3, replace=False)]])
    mixture = FittedMixture(real)
    fake = mixture.sample(len(real), seed=1)
    for name, x in (("real", real), ("fitted", fake)):
        sims = x[:2000] @ x[2000:].T
        say(f"{name:>6} photo vectors: mean cosine {sims.mean():.3f}, mean best-match cosine "
            f"{sims.max(axis=1).mean():.3f}, caption->photo best cosine {(captions[:500] @ x.T).max(axis=1).mean():.3f}")
    say(f"queries: {args.queries} val captions + {args.queries // 3} val photos; model {model.model_id} "
        f"({real.shape[1]}-d)")

    for n in (int(s) for s in args.sizes.split(",")):
        library = np.concatenate([real, mixture.sample(n - len(real), seed=n)])
        truth200 = exact_top(library, queries, 200)
        truth = truth200[:, :10]
        folder = args.work / f"vector-search-{n}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        settings = itertools.product(
            sorted({vector_index.trees_for(n), *(int(t) for t in args.trees.split(",") if t)}),
            sorted({vector_index.PROJECTED_DIM, *(int(p) for p in args.projected.split(",") if p)}))
        rows = (row for trees, projected in settings
                for row in annoy_rows(args, folder, library, queries, truth, truth200, trees, projected))
        for row in itertools.chain(rows, compare_rows(folder, library, queries, truth) if args.compare else []):
            row.update(load_1min=round(os.getloadavg()[0], 1), cores=os.cpu_count())
            if args.json:
                print(json.dumps(row), flush=True)
            else:
                print(f"{n:>9,} {row['engine']:>14} {row['setting']:<34} recall@10 {row['recall_at_10']:.3f}  "
                      f"p50 {row['p50_ms']:6.1f} ms (CPU {row['cpu_p50_ms']:5.1f})  build {row['build_s']:6.1f} s "
                      f"(CPU {row['build_cpu_s']:6.1f})  {row['disk_bytes'] / 1e6:7.0f} MB"
                      + (f"  -n 200: recall@200 {row['recall_at_200']:.3f}, p50 {row['p50_ms_at_200']:.1f} ms"
                         if "recall_at_200" in row else "") + ("  *shipped" if row.get("shipped") else ""),
                      flush=True)
        shutil.rmtree(folder, ignore_errors=True)
    say(f"machine: {os.cpu_count()} CPU cores; load average {os.getloadavg()[0]:.1f} (1 min), "
        f"{os.getloadavg()[1]:.1f} (5 min)")


if __name__ == "__main__":
    main()
