"""What a plain search (no --after, --before, --in, --near, --like) pays for dates, places and folder words.

    python bench/remembered_search_cost.py --index DIR --data-dir ../shared/data/flickr8k [--queries 50] [--rounds 5]

Runs `Library.search(caption)` for val captions of Flickr8k over an existing index (e.g. the one
bench/duplicate_devset.py builds), each time beside the search as it was before these features (the plain vector
search, copies collapsed, confidence rated: the same code path without reading the query for dates and looking
up its words), interleaved query by query in one warm process, and prints the median of each and their ratio.
Also the import time of the new modules (python -X importtime), which a cold `imgtxt search` pays.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path


def before(lib, text: str, n: int = 10):
    """Library.search as it was: the plain vector search, copies collapsed, confidence rated."""
    from imgtxt.library.photo_library import _close, _distinct
    from imgtxt.library.query import min_score_of, rate, search

    index = lib._open()
    try:
        model = lib._query_model(index)
        score, confidence = min_score_of(model, None)
        return rate(model, _distinct(index, model, lambda want: search(index, model, text, want, score), n, False),
                    confidence)
    finally:
        _close(index, lib)


def import_ms() -> float:
    """Self import time of the modules a plain search now loads besides the old ones."""
    new = ("imgtxt.library.remembered_search", "imgtxt.library.blended_search", "imgtxt.library.query_filters",
           "imgtxt.library.name_words")
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import imgtxt.library.remembered_search"],
                         capture_output=True, text=True, env={**os.environ}).stderr
    total = 0
    for line in out.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[2] in new:
            total += int(parts[0].split(":")[-1])
    return total / 1000


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    import imgtxt

    meta = json.loads((args.data_dir / "dataset_flickr8k.json").read_text())
    captions = [s["raw"] for i in meta["images"] if i["split"] == "val" for s in i["sentences"]]
    random.Random(0).shuffle(captions)
    queries = captions[:args.queries]
    lib = imgtxt.Library(args.index)
    lib.search(queries[0])   # the model loaded, files mapped
    times = {"before": [], "now": []}
    for r in range(args.rounds):
        for q in queries:
            for name in (("before", "now") if r % 2 == 0 else ("now", "before")):
                start = time.perf_counter()
                matches = before(lib, q) if name == "before" else lib.search(q)
                times[name].append(time.perf_counter() - start)
                assert matches
    old, new = statistics.median(times["before"]), statistics.median(times["now"])
    photos = lib.status().photos
    print(f"{photos} photos, {len(queries)} queries x {args.rounds} rounds, warm, interleaved: median search "
          f"{1000 * old:.2f} ms before, {1000 * new:.2f} ms now, ratio {new / old:.3f}; "
          f"new modules' import {import_ms():.1f} ms; load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
