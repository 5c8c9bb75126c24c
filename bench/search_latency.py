"""Cold-process `imgtxt search` latency at 1k and 100k indexed vectors, and the vector index build time.

    .venv/bin/python bench/search_latency.py [--runs 20] [--sizes 1000,100000] [--model weights/default]
    .venv/bin/python bench/search_latency.py --sizes 1000 --before dae7875 --before-model OLD_MODEL_DIR
    .venv/bin/python bench/search_latency.py --sizes 1000000 --keep "$TMPDIR/latency"   # build once, rerun to measure

With --before, the same searches also run with the code of git revision REV (extracted with `git archive`
into a temporary folder and imported instead of this checkout) on its own model, interleaved run by run with this
checkout's, and every median is printed as a ratio to a cold `python -c 'import numpy'` timed in the same loop.
The index is written by this checkout (float16 vectors, .vec files): REV must read the same index format
(revisions with Annoy files do not).

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
    from imgtxt.library import vector_build
    from imgtxt.library.store import Store, encode_vector, now_iso

    dim = model.vector_dim   # the joint space plus the ConSE part and the hubness coordinate
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
    count = vector_build.sync(store, model.model_id, dim, model.similarity_kind).live
    build = time.perf_counter() - t
    store.set_meta(model_id=model.model_id, model_folder=str(Path(model.folder).resolve()),
                   similarity=model.similarity_kind, embed_dim=dim, last_run=now_iso(), photos=count)
    store.close()
    return build


# The editable install's import hook would win over PYTHONPATH: drop it when another checkout is to be run.
RUN_CLI = ("import os, sys\n"
           "if os.environ.get('IMGTXT_BENCH_CODE'):\n"
           "    sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
           "    sys.path.insert(0, os.environ['IMGTXT_BENCH_CODE'])\n"
           "from imgtxt.cli.main import app; app()")


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, str]:
    t = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return time.perf_counter() - t, out.stdout


def checkout(rev: str, folder: Path) -> Path:
    """The package of git revision `rev`, extracted (no worktree, the repository is left alone)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "imgtxt"], check=True, capture_output=True)
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--model", default=None)
    parser.add_argument("--before", default=None, help="git revision to compare with (e.g. main)")
    parser.add_argument("--before-model", default=None, help="model folder for the --before code")
    parser.add_argument("--query", default="a dog running on the beach")
    parser.add_argument("--keep", type=Path, default=None,
                        help="build the indexes under this folder and reuse them on the next run (a 1M build takes "
                             "minutes; a rerun measures again on the same files)")
    args = parser.parse_args()

    from imgtxt.model.modelfile import TrainedModel

    python = str(REPO / ".venv" / "bin" / "python")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        variants = [("this checkout", TrainedModel.load(pick_model(args.model, tmp)), None)]
        if args.before:
            old_code = checkout(args.before, tmp / "before")
            env = {**os.environ, "IMGTXT_BENCH_CODE": str(old_code)}
            variants.append((f"{args.before}", TrainedModel.load(args.before_model or pick_model(None, tmp)), env))
        for name, model, _ in variants:
            print(f"{name}: model {model.model_id}: {model.vector_dim}-d vectors, "
                  f"{model.similarity_kind} similarity, text encoder "
                  f"{model.config.get('text', {'kind': 'gru'})['kind']}")
        for n in (int(s) for s in args.sizes.split(",")):
            cmds = []
            for name, model, env in variants:
                index_dir = (args.keep or tmp) / f"index-{n}-{len(cmds)}"
                if (index_dir / "index.db").is_file() and args.keep:
                    build = float("nan")   # reused
                else:
                    build = fake_index(index_dir, model, n)
                cmd = [python, "-c", RUN_CLI, "search", args.query, "--index", str(index_dir)]
                cmds.append((name, cmd, env, build))
                _, out = timed(cmd, env)  # warm the OS file cache, as a second search would
                assert len(out.splitlines()) == 10, out
            numpy_cmd = [python, "-c", "import numpy"]
            times: dict[str, list[float]] = {"import numpy": []}
            for _ in range(args.runs):  # interleaved: load changes hit every variant alike
                times["import numpy"].append(timed(numpy_cmd)[0])
                for name, cmd, env, _ in cmds:
                    times.setdefault(name, []).append(timed(cmd, env)[0])
            base = statistics.median(times["import numpy"])
            print(f"{n:>7} vectors: cold `python -c 'import numpy'` median {base:.3f} s")
            for name, cmd, env, build in cmds:
                t = times[name]
                print(f"{n:>7} vectors: cold `imgtxt search` ({name}) median {statistics.median(t):.3f} s = "
                      f"{statistics.median(t) / base:.2f}x import numpy (min {min(t):.3f}, max {max(t):.3f}, "
                      f"{args.runs} runs); vector index build " + ("reused" if build != build else f"{build:.2f} s"))
        print("  command: imgtxt search", repr(args.query), "--index DIR")
        print(f"machine: {os.cpu_count()} CPU cores; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
