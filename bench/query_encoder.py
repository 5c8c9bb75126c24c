"""Where a new query's text encoding goes: the MiniLM int8 products against their block size, a float32 copy, and
the cast against the product itself, side by side in one process (one BLAS thread, as a search runs it).

    OMP_NUM_THREADS=1 .venv/bin/python bench/query_encoder.py [--model weights/default] [--queries 200] [--rounds 2]

Variants, each timed over the same new sentences (CPU ms a query, p50 / p90), in turn for --rounds rounds:
  - the kept int8 column blocks at several block sizes (elements per block; the shipped INT8_BLOCK_ELEMENTS among
    them), each cast into one reused float32 buffer before its product;
  - a float32 copy of every matrix (no cast, 4x the bytes read a query);
  - the encoder's largest vector difference from the shipped way (float32 rounding is ~1e-7).
Then the two halves of the shipped way apart, on random int8 blocks of the same shape: the casts alone and the
products alone, for as many blocks as a query of 10 tokens runs through MiniLM's 36 matrices.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from warm_search import sentences

from imgtxt.model import tensor_file
from imgtxt.model.modelfile import TrainedModel, default_model_dir


def percentiles(values: list[float]) -> tuple[float, float]:
    values = sorted(values)
    return values[len(values) // 2] * 1e3, values[int(len(values) * 0.9)] * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    model = TrainedModel.load(Path(args.model) if args.model else default_model_dir())
    text = model.text
    tokens = [text.tokenize(q) for q in sentences(args.queries)]
    for t in tokens[:3]:   # the matrices keep their int8 column blocks from their second call, as in a Library
        text.encode_with_sentence([t])
    matrices = list(text._matrices.values())
    reference = np.vstack([text.encode_with_sentence([t])[0] for t in tokens])

    def blocks_of(elements: int):
        def use():
            for dense in matrices:
                q, step = dense.matrix, max(1, elements // dense.matrix.shape[1])
                dense._blocks = [np.ascontiguousarray(q[s:s + step].T) for s in range(0, q.shape[0], step)]
        return use

    float32 = {id(d): (d.matrix.astype(np.float32) * d.scale[:, None]).T.copy() for d in matrices}
    shipped_call = tensor_file.Dense.__call__

    def float32_call(self, x):
        kept = float32.get(id(self))
        return np.asarray(x, np.float32) @ kept if kept is not None else shipped_call(self, x)

    shipped = tensor_file.INT8_BLOCK_ELEMENTS
    variants = {f"int8 blocks of {e:,}{' (shipped)' if e == shipped else ''}": (blocks_of(e), shipped_call)
                for e in (shipped // 4, shipped // 2, shipped, shipped * 4, 10 ** 9)}
    variants["float32 copy of every matrix"] = (blocks_of(shipped), float32_call)
    times: dict[str, list[float]] = {name: [] for name in variants}
    diff: dict[str, float] = {}
    for _ in range(args.rounds):
        for name, (prepare, call) in variants.items():
            prepare()
            tensor_file.Dense.__call__ = call
            try:
                for t in tokens:
                    start = time.process_time()
                    text.encode_with_sentence([t])
                    times[name].append(time.process_time() - start)
                out = np.vstack([text.encode_with_sentence([t])[0] for t in tokens])
                diff[name] = float(np.abs(out - reference).max())
            finally:
                tensor_file.Dense.__call__ = shipped_call
    blocks_of(shipped)()

    # the shipped way's two halves, on blocks of its shape: 10 tokens through (in x width) blocks
    rng = np.random.default_rng(0)
    shapes = []
    for dense in matrices:
        rows, width = dense.matrix.shape[0], max(1, shipped // dense.matrix.shape[1])
        shapes += [(dense.matrix.shape[1], min(width, rows - s)) for s in range(0, rows, width)]
    buffers = {shape: np.empty(shape, np.float32) for shape in set(shapes)}   # one reused buffer, as the shipped way
    work = [((rng.standard_normal(shape) * 40).astype(np.int8), buffers[shape],
             rng.standard_normal((10, shape[0])).astype(np.float32)) for shape in shapes]
    halves = {"casts": [], "products": []}
    for _ in range(args.rounds * 20):
        start = time.process_time()
        for q, buffer, _x in work:
            np.copyto(buffer, q, casting="unsafe")
        halves["casts"].append(time.process_time() - start)
        start = time.process_time()
        for _q, buffer, x in work:
            x @ buffer
        halves["products"].append(time.process_time() - start)

    rows = {name: {"p50_ms": percentiles(v)[0], "p90_ms": percentiles(v)[1], "max_diff": diff[name]}
            for name, v in times.items()}
    halves_ms = {name: percentiles(v)[0] for name, v in halves.items()}
    load = os.getloadavg()
    if args.json:
        print(json.dumps({"variants": rows, "halves_ms": halves_ms, "blocks": len(shapes), "load": load}))
        return
    for name, row in rows.items():
        print(f"{name}: CPU p50 {row['p50_ms']:.2f} ms, p90 {row['p90_ms']:.2f} ms "
              f"(largest difference from the shipped way {row['max_diff']:.1e})")
    flops = sum(2 * 10 * a * b for a, b in shapes)
    print(f"the shipped way's {len(shapes)} blocks a 10-token query, apart: casts {halves_ms['casts']:.2f} ms, "
          f"products {halves_ms['products']:.2f} ms ({flops / halves_ms['products'] / 1e6:.0f} GFLOP/s)")
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")


if __name__ == "__main__":
    main()
