"""`imgtxt index --ray local` against the plain single-process `imgtxt index` of the same folder, in one run.

    .venv/bin/python bench/ray_index.py [--photos 144] [--repeat 2] [--photos-dir DIR]    # needs '.[ray]'

The photos are bench/index_speed.py's 12-MP camera-like JPEGs (made once, reused from --photos-dir). Every timed
run is a cold process with a fresh index folder, files in the page cache; the two modes alternate. Printed per
mode: wall seconds (median), photos/s, and the CPU seconds of the imgtxt process and the children it waited for
(Ray's worker processes are the raylet's children: their CPU is not all counted, so compare wall time).
Also timed alone: a cold `ray.init(); ray.shutdown()`, the fixed cost a Ray run pays before embedding anything.
On one machine Ray can only add overhead (the same cores, plus serialisation and start-up); the figure says
how much, which is what a cluster has to win back.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from index_speed import CPU_SECONDS, REPO, cli, make_photos, pick_model, subset, timed  # noqa: E402

RAY_START = ("import ray; ray.init(num_cpus={cpus}, include_dashboard=False, log_to_driver=False); "
             "ray.shutdown()")


def indexed(index_dir: Path, env: dict) -> int:
    out = subprocess.run([*cli(REPO)[:-1], "status", "--json", "--index", str(index_dir)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["photos"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--photos", type=int, default=144)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--model", default=None)
    parser.add_argument("--photos-dir", default=str(Path(tempfile.gettempdir()) / "imgtxt-bench-12mp"))
    args = parser.parse_args()
    try:
        import ray  # noqa: F401
    except ImportError:
        raise SystemExit("ray is not installed: pip install -e '.[ray]'") from None

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = pick_model(args.model, tmp)
        photos = make_photos(Path(args.photos_dir), args.photos)
        folder = subset(photos, args.photos, tmp / "photos")
        for p in photos:
            p.read_bytes()
        env = {**os.environ, "IMGTXT_CACHE_DIR": str(tmp / "cache")}
        base = cli(REPO) + [str(folder), "--model", str(model), "--quiet"]
        modes = {"single process": [], "--ray local": ["--ray", "local"]}
        # One-time work outside the timings: the CNN graph export and OpenVINO's compile cache.
        timed(cli(REPO) + [str(subset(photos, 2, tmp / "warm")), "--model", str(model), "-q"],
              {**env, "IMGTXT_INDEX_DIR": str(tmp / "warm-index")})

        wall: dict[str, list[float]] = {}
        for r in range(args.repeat):
            wall.setdefault("ray start", []).append(
                timed([sys.executable, "-c", RAY_START.format(cpus=os.cpu_count())], env, "ray start"))
            for name, extra in modes.items():
                index_dir = tmp / f"index-{r}-{len(extra)}"
                wall.setdefault(name, []).append(timed(base + extra, {**env, "IMGTXT_INDEX_DIR": str(index_dir)}, name))
                count = indexed(index_dir, env)
                if count != args.photos:
                    raise SystemExit(f"{name}: indexed {count} of {args.photos} photos")
                print(f"  ({name}: {wall[name][-1]:.1f} s, {CPU_SECONDS[name][-1]:.1f} CPU s counted; "
                      f"load {os.getloadavg()[0]:.1f})", flush=True)

    med = {k: float(np.median(v)) for k, v in wall.items()}
    cpu = {k: float(np.median(v)) for k, v in CPU_SECONDS.items()}
    print(f"{args.photos} 12-MP photos, {os.cpu_count()} CPUs, median of {args.repeat}; load {os.getloadavg()[0]:.1f}")
    print(f"cold ray.init + shutdown: {med['ray start']:.1f} s")
    for name in modes:
        print(f"{name:>15}: {med[name]:6.1f} s wall = {args.photos / med[name]:5.1f} photos/s "
              f"({cpu[name]:.1f} CPU s counted)")
    print(f"--ray local / single process, wall: {med['--ray local'] / med['single process']:.2f}x")


if __name__ == "__main__":
    main()
