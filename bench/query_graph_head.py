"""A warm new-text search with the query graph running MiniLM's pooling and the trained head, against the graph of
the layers alone (pooling and head in numpy, as before), in one process, the two ways taking turns query by query.

    OMP_NUM_THREADS=1 .venv/bin/python bench/query_graph_head.py [--size 100000] [--queries 600] [--keep DIR]

Both graphs are compiled first; then each new sentence is searched through `imgtxt.Library` with one graph or the
other, alternating, so the machine's load and the caches that Annoy and SQLite empty between queries fall on both
alike (separate processes, as bench/warm_search.py --before runs them, differ from each other by more than this
change). Each sentence is searched once, by one way; then 50 of them both ways, to compare what they return. The
index is bench/warm_search.py's synthetic one. Prints wall p50/p90 of each way, their ratio, and
whether both ways returned the same photos in the same order.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from index_speed import pick_model  # noqa: E402
from search_latency import fake_index  # noqa: E402
from warm_search import pct, sentences  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=600, help="new sentences (distinct: the cache never hits)")
    parser.add_argument("--model", default=None)
    parser.add_argument("--keep", type=Path, default=None, help="build the index here and reuse it")
    args = parser.parse_args()

    from imgtxt import Library
    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.model.text_encoders import minilm, minilm_graph

    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPU cores")
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = pick_model(args.model, Path(tmp))
        index_dir = (args.keep or Path(tmp)) / f"index-{args.size}"
        if not (index_dir / "index.db").is_file():
            fake_index(index_dir, TrainedModel.load(model_dir), args.size)
        texts = sentences(args.queries + 1)   # distinct: each searched once, by one way (no cache shared)
        lib = Library(index_dir, model=model_dir)
        lib.search(texts[0])
        text = lib.model.text
        if not isinstance(text, minilm.Runtime):
            raise SystemExit("query_graph_head: the model's text encoder is not MiniLM")
        lib.search(texts[0] + " .")          # the second sentence starts the product's graph
        text.query_graph.wait()
        if text.query_graph.compiled is None:
            raise SystemExit(f"query_graph_head: the query graph could not be built ({text.query_graph.failure})")
        ways = {"graph with pooling and head": text.query_graph,
                "graph of the layers alone": minilm_graph.QueryGraph(text.tensors, minilm.PREFIX, text.config)}
        ways["graph of the layers alone"].wait()
        names = list(ways)
        wall = {name: [] for name in ways}
        for i, sentence in enumerate(texts[1:]):
            name = names[i % 2]
            text.query_graph = ways[name]
            start = time.perf_counter()
            lib.search(sentence)
            wall[name].append(time.perf_counter() - start)
        top = {name: [] for name in ways}
        for sentence in texts[1:51]:          # the same sentences both ways, new text each time (a suffix)
            for name in names:
                text.query_graph = ways[name]
                top[name].append([m.path for m in lib.search(sentence + " " * (1 + names.index(name)) + "!")])
        text.query_graph = ways[names[0]]
    a, b = wall.values()
    for name, values in wall.items():
        print(f"{args.size:>7} photos, {name}: warm new text p50 {pct(values, .5):.2f} ms, p90 {pct(values, .9):.2f} "
              f"ms wall ({len(values)} queries)")
    print(f"{args.size:>7} photos: p50 with pooling and head in the graph / without: "
          f"{statistics.median(a) / statistics.median(b):.2f}x")
    same = sum(x == y for x, y in zip(*top.values()))
    print(f"{args.size:>7} photos: the same photos in the same order both ways for {same} of {len(top[names[0]])} "
          f"sentences")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
