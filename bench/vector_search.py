"""Vector search at 100k and 1M photos: recall@10 against exact search, and query latency in-process.

    .venv/bin/python bench/vector_search.py [--sizes 100000,1000000]
        [--queries 300] [--work DIR] [--model weights/default]

The library: the shipped model's 7,000 real Flickr8k train+val photo vectors plus synthetic ones drawn from a
Gaussian mixture fitted to them (bench/real_vectors.py) up to the size. The queries: real val caption vectors
(what `imgtxt search` sends) and real val photo vectors (`imgtxt similar`). Both search structures are written by
the library's own `vector_build.write_build` into a folder under --work and searched through `VectorIndex`,
the object `imgtxt search` uses (files in the page cache, as for any search after the first).

For each size prints: the build time; exact search over the memory-mapped matrix; the k-means cells with a few
probe settings (the shipped one is marked *). recall@10 = the share of exact search's top 10 that is found.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_vectors import WORK, FittedMixture, caption_vectors, load_model, photo_vectors  # noqa: E402

PROBES = [(8, 0.02), (16, 0.04), (16, 0.06), (16, 0.08), (32, 0.10)]


def exact_top(library: np.ndarray, queries: np.ndarray, k: int = 10, chunk: int = 100_000) -> np.ndarray:
    best_ids = np.zeros((len(queries), 0), np.int64)
    best = np.zeros((len(queries), 0), np.float32)
    for s in range(0, len(library), chunk):
        scores = np.concatenate([best, queries @ library[s:s + chunk].T], axis=1)
        ids = np.concatenate([best_ids, np.broadcast_to(np.arange(s, s + len(library[s:s + chunk])) + 1,
                                                        (len(queries), len(library[s:s + chunk])))], axis=1)
        keep = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        best, best_ids = np.take_along_axis(scores, keep, 1), np.take_along_axis(ids, keep, 1)
    return best_ids


def measure(search, queries: np.ndarray, truth: np.ndarray) -> str:
    """recall@10, wall p50/p90 and CPU p50 (all threads of this process) of search(query) -> ids."""
    times, cpu, recalls = [], [], []
    search(queries[0])
    for q, expected in zip(queries, truth):
        t, c = time.perf_counter(), time.process_time()
        ids = search(q)
        times.append(1000 * (time.perf_counter() - t))
        cpu.append(1000 * (time.process_time() - c))
        recalls.append(len(set(ids[:10].tolist()) & set(expected.tolist())) / 10)
    return (f"recall@10 {np.mean(recalls):.3f}  p50 {statistics.median(times):6.1f} ms  "
            f"p90 {np.percentile(times, 90):6.1f} ms  (CPU p50 {statistics.median(cpu):5.1f} ms)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--queries", type=int, default=300, help="caption queries (plus a third as many photo queries)")
    ap.add_argument("--model", default=None)
    ap.add_argument("--work", type=Path, default=WORK, help=f"working folder, kept between runs for its cached vectors (default: {WORK})")
    args = ap.parse_args()

    import os

    from imgtxt.library import vector_build, vector_index

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
        print(f"{name:>6} photo vectors: mean cosine {sims.mean():.3f}, mean best-match cosine "
              f"{sims.max(axis=1).mean():.3f}, caption->photo best cosine {(captions[:500] @ x.T).max(axis=1).mean():.3f}")
    print(f"queries: {args.queries} val captions + {args.queries // 3} val photos; model {model.model_id}")

    for n in (int(s) for s in args.sizes.split(",")):
        library = np.concatenate([real, mixture.sample(n - len(real), seed=n)])
        truth = exact_top(library, queries)
        folder = args.work / f"vector-search-{n}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        chunks = ((np.arange(s, min(s + 65536, n)) + 1, library[s:s + 65536]) for s in range(0, n, 65536))
        saved, vector_index.EXACT_MAX = vector_index.EXACT_MAX, 0          # build the cells at every size
        t, c = time.perf_counter(), time.process_time()
        record = vector_build.write_build(folder, "bench", chunks, "bench", library.shape[1], n, spherical=True)
        build, build_cpu = time.perf_counter() - t, time.process_time() - c
        vector_index.EXACT_MAX = saved
        index = vector_index.VectorIndex(folder, record)
        print(f"\n{n:,} photos: {record.cells} cells of ~{n // record.cells}; build {build:.1f} s "
              f"({build_cpu:.1f} s CPU); files {record.bytes / 1e9:.2f} GB; "
              f"shipped structure at this size: {'exact' if n <= vector_index.EXACT_MAX else 'cells'}")
        line = measure(lambda q: vector_index._top(index.ids, vector_index.dot_scorer(q)(index.vectors), 10)[0],
                       queries, truth)
        print(f"  exact (mmap matrix):          {line}")
        shipped = vector_index.MIN_PROBE, vector_index.PROBE_FRACTION
        for min_probe, fraction in PROBES:
            vector_index.MIN_PROBE, vector_index.PROBE_FRACTION = min_probe, fraction
            probe = max(min_probe, int(np.ceil(fraction * record.cells)))
            line = measure(lambda q: index.search(q, 10, vector_index.dot_scorer(q))[0], queries, truth)
            mark = "*" if (min_probe, fraction) == shipped else " "
            print(f" {mark}cells, probe max({min_probe}, {fraction:.0%}) = {probe:>3}: {line}")
        vector_index.MIN_PROBE, vector_index.PROBE_FRACTION = shipped
        del index
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\nmachine: {os.cpu_count()} CPU cores; load average {os.getloadavg()[0]:.1f} "
          f"(1 min), {os.getloadavg()[1]:.1f} (5 min)")


if __name__ == "__main__":
    main()
