"""Peak memory of `imgtxt index` as the number of photos doubles, this checkout beside an earlier revision, and
beside itself at other `--batch-size` values.

    .venv/bin/python bench/index_memory.py [--counts 32,64,128,256] [--megapixels 2] [--before 1a78527]
        [--batch-sizes 32,1024] [--runtime torch]

Each run is a cold `imgtxt index` process (the default batch size and workers) of a fresh index over the first N of
the photos (bench/index_speed.py's camera-like JPEGs: 48 encoded, the rest distinct byte copies), with the CNN
graph's compile cache warmed by a first run of 4 photos; the process reports its own peak resident memory
(getrusage's ru_maxrss) and CPU seconds, and its wall seconds are timed. With --before REV the same runs use that
revision's code (extracted with `git archive`), alternating with this checkout's. With --batch-sizes every count
is indexed at each batch size in turn (the ratios to the first size are printed); --runtime sets IMGTXT_CNN_RUNTIME
(torch: the fallback when no CNN graph runs, whose activations grow with the photos per CNN call).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from index_speed import REPO, make_photos, subset  # noqa: E402
from search_latency import checkout  # noqa: E402

RUN = """
import atexit, resource, sys
def report(usage=resource.getrusage):
    r = usage(resource.RUSAGE_SELF)
    sys.stderr.write(f"MAXRSS_KB {r.ru_maxrss} CPU_S {r.ru_utime + r.ru_stime}\\n")
atexit.register(report)
sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in type(f).__module__]
sys.path.insert(0, sys.argv.pop(1))
from imgtxt.cli.main import app
app()
"""


def index_run(code: Path, folder: Path, index_dir: Path, cache: Path, model: str | None,
              batch_size: int = 32, runtime: str | None = None) -> tuple[float, float, float]:
    env = {**os.environ, "IMGTXT_CACHE_DIR": str(cache), **({"IMGTXT_CNN_RUNTIME": runtime} if runtime else {})}
    cmd = [sys.executable, "-c", RUN, str(code), "index", str(folder), "--index", str(index_dir), "-q",
           "--batch-size", str(batch_size)]
    start = time.perf_counter()
    out = subprocess.run(cmd + (["--model", model] if model else []), env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"imgtxt index failed:\n{out.stderr[-2000:]}")
    fields = next(line.split() for line in out.stderr.splitlines() if line.startswith("MAXRSS_KB"))
    return int(fields[1]) / 1024, time.perf_counter() - start, float(fields[3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="32,64,128,256")
    ap.add_argument("--megapixels", type=float, default=2.0)
    ap.add_argument("--before", default=None)
    ap.add_argument("--model", default=None)
    ap.add_argument("--batch-sizes", default="32")
    ap.add_argument("--runtime", default=None, help="IMGTXT_CNN_RUNTIME for every run (torch, openvino, ...)")
    args = ap.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    if args.model is None:   # the same model folder for every variant (an extracted revision has no weights)
        from imgtxt.model.modelfile import default_model_dir

        args.model = str(default_model_dir())
    width = int((args.megapixels * 1e6 * 4 / 3) ** 0.5)
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPU cores; "
          f"CNN runtime {args.runtime or 'default'}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        photos = make_photos(tmp / "photos", max(counts), size=(width, width * 3 // 4))
        variants = [("this checkout", REPO)] + ([(args.before, checkout(args.before, tmp / "before"))]
                                               if args.before else [])
        for i, (name, code) in enumerate(variants):   # the compile cache, as any run after the first finds it
            index_run(code, subset(photos, 4, tmp / f"warm-{i}"), tmp / f"warm-index-{i}", tmp / f"cache-{i}",
                      args.model, runtime=args.runtime)
        peaks: dict[tuple[str, int], list[float]] = {}
        cpus: dict[tuple[str, int], list[float]] = {}
        for n in counts:
            folder = subset(photos, n, tmp / f"photos-{n}")
            for batch in batch_sizes:
                for i, (name, code) in enumerate(variants):
                    peak, wall, cpu = index_run(code, folder, tmp / f"index-{n}-{batch}-{i}", tmp / f"cache-{i}",
                                                args.model, batch, args.runtime)
                    peaks.setdefault((name, batch), []).append(peak)
                    cpus.setdefault((name, batch), []).append(cpu)
                    print(f"{n:>5} photos of {width}x{width * 3 // 4}, --batch-size {batch}, {name}: peak "
                          f"{peak:.0f} MB, {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
        for batch in batch_sizes:
            if args.before:
                for what, got in (("peak", peaks), ("CPU", cpus)):
                    print(f"{what} at --batch-size {batch}, this checkout / {args.before}: " + ", ".join(
                        f"{n}: {a / b:.2f}x" for n, a, b in zip(counts, got["this checkout", batch],
                                                               got[args.before, batch])))
            if batch != batch_sizes[0]:
                for name, _ in variants:
                    print(f"peak, --batch-size {batch} / {batch_sizes[0]}, {name}: " + ", ".join(
                        f"{n}: {a / b:.2f}x" for n, a, b in zip(counts, peaks[name, batch],
                                                               peaks[name, batch_sizes[0]])))
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
