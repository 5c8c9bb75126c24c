"""Cold-process `imgtxt search` latency at 1k and 100k indexed vectors, and the vector index build time.

    .venv/bin/python bench/search_latency.py [--runs 20] [--sizes 1000,100000] [--model weights/default]

The vectors are synthetic (random unit vectors in the model's joint space) written straight into an index
with the library's own Store and vector index builder, so only the query path is measured: process start, imports,
model load, text encoding, vector search, SQLite path lookup, printing.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from index_speed import REPO, pick_model  # noqa: E402


def fake_index(index_dir: Path, model, n: int) -> float:
    """Write n synthetic photos into an index; returns the vector index build time in seconds."""
    from imgtxt import vector_index
    from imgtxt.store import Store, encode_vector, now_iso

    dim = model.config["joint"]["embed_dim"]
    store = Store(index_dir)
    rng = np.random.default_rng(n)
    with store.db.atomic():
        for start in range(0, n, 10_000):
            vectors = rng.normal(size=(min(10_000, n - start), dim)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            store.db["photos"].insert_all(
                ({"path": f"/photos/{start + i:07}.jpg", "size": 1, "mtime_ns": 1, "hash": f"{start + i:x}",
                  "width": 4000, "height": 3000, "embedding": encode_vector(v), "model_id": model.model_id,
                  "indexed_at": now_iso()} for i, v in enumerate(vectors)), batch_size=1000)
    t = time.perf_counter()
    count = vector_index.sync(store, model.model_id, dim, model.similarity_kind).live
    build = time.perf_counter() - t
    store.set_meta(model_id=model.model_id, model_folder=str(Path(model.folder).resolve()),
                   similarity=model.similarity_kind, embed_dim=dim, last_run=now_iso(), photos=count)
    store.close()
    return build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--model", default=None)
    parser.add_argument("--query", default="a dog running on the beach")
    args = parser.parse_args()

    from imgtxt.modelfile import TrainedModel

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = TrainedModel.load(pick_model(args.model, tmp))
        print(f"model {model.model_id}: joint space {model.config['joint']['embed_dim']}-d, "
              f"{model.similarity_kind} similarity")
        for n in (int(s) for s in args.sizes.split(",")):
            index_dir = tmp / f"index-{n}"
            build = fake_index(index_dir, model, n)
            cmd = [str(REPO / ".venv" / "bin" / "imgtxt"), "search", args.query, "--index", str(index_dir)]
            subprocess.run(cmd, check=True, capture_output=True)  # warm the OS file cache, as a second search would
            times = []
            for _ in range(args.runs):
                t = time.perf_counter()
                out = subprocess.run(cmd, check=True, capture_output=True, text=True)
                times.append(time.perf_counter() - t)
            assert len(out.stdout.splitlines()) == 10, out.stdout
            print(f"{n:>7} vectors: cold `imgtxt search` median {statistics.median(times):.3f} s "
                  f"(min {min(times):.3f}, max {max(times):.3f}, {args.runs} runs); vector index build {build:.2f} s")
        print("  command: imgtxt search", repr(args.query), "--index DIR")
        print(f"machine: {os.cpu_count()} CPU cores; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
