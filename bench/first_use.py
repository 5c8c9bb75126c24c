"""A user's first minutes with an installed imgtxt: `index` of examples/, a cold `search`, the first `caption`
against a second one, each a fresh process, from a folder outside the checkout.

    python bench/first_use.py --imgtxt WHEEL_VENV/bin/imgtxt [--runs 5]

Each run gets a fresh index folder and a fresh cache folder (IMGTXT_INDEX_DIR, IMGTXT_CACHE_DIR; so OpenVINO
compiles the CNN again) and a copy of examples/ in a temporary folder, which is also the working folder:
    1. `imgtxt index PHOTOS -q`
    2. `imgtxt search a cat -n 3`
    3. `imgtxt caption PHOTOS/coffee.jpg` (first: an indexed photo, so its stored vector; the bank's vectors are
       read from the model, not embedded)
    4. the same again (second)
    5. `imgtxt caption` of a copy of coffee.jpg that is not indexed, with another fresh index and cache folder
       (the CNN is compiled and run: a user's first caption before any `index`)
    6. the same again (OpenVINO's compiled CNN now comes from the cache folder)
Wall seconds per step and run, then the median of each, are printed; the user + system CPU of the processes is
printed beside each median. `--imgtxt` defaults to the `imgtxt` next to this Python.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STEPS = ["index", "cold search", "first caption", "second caption", "first caption, not indexed",
         "second caption, not indexed"]


def timed(args: list, env: dict, cwd: Path) -> tuple[float, float]:
    """(wall seconds, user + system CPU seconds) of one process that must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run([str(a) for a in args], env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, args))}: exit {result.returncode}: {result.stderr.strip()[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def one_run(imgtxt: Path, work: Path) -> list[tuple[float, float]]:
    photos = work / "photos"
    shutil.copytree(REPO / "examples", photos)
    loose = work / "loose"
    loose.mkdir()
    shutil.copy2(photos / "coffee.jpg", loose / "not-indexed.jpg")
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMGTXT_") and k != "PYTHONPATH"}
    env.update(IMGTXT_INDEX_DIR=str(work / "index"), IMGTXT_CACHE_DIR=str(work / "cache"))
    fresh = {**env, "IMGTXT_INDEX_DIR": str(work / "index2"), "IMGTXT_CACHE_DIR": str(work / "cache2")}
    return [timed([imgtxt, "index", photos, "-q"], env, work),
            timed([imgtxt, "search", "a", "cat", "-n", "3"], env, work),
            timed([imgtxt, "caption", photos / "coffee.jpg"], env, work),
            timed([imgtxt, "caption", photos / "coffee.jpg"], env, work),
            timed([imgtxt, "caption", loose / "not-indexed.jpg"], fresh, work),
            timed([imgtxt, "caption", loose / "not-indexed.jpg"], fresh, work)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--imgtxt", type=Path, default=Path(sys.executable).with_name("imgtxt"))
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    args.imgtxt = args.imgtxt.absolute()   # each step runs in its own temporary folder
    if not args.imgtxt.is_file():
        raise SystemExit(f"no imgtxt at {args.imgtxt}: pass --imgtxt VENV/bin/imgtxt")
    rows = []
    for run in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory(prefix="imgtxt-first-use-") as work:
            row = one_run(args.imgtxt, Path(work))
        rows.append(row)
        print(f"run {run}: " + ", ".join(f"{step} {wall:.2f} s" for step, (wall, _) in zip(STEPS, row)), flush=True)
    print(f"median of {args.runs} (wall, user + system CPU):")
    for i, step in enumerate(STEPS):
        print(f"  {step:28} {statistics.median(r[i][0] for r in rows):6.2f} s wall"
              f"  {statistics.median(r[i][1] for r in rows):6.2f} s CPU")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
