"""`imgtxt index` on camera-size JPEGs against the two floors of issue 11, side by side in one run.

    .venv/bin/python bench/index_speed.py [--small 48] [--large 240] [--before main] [--photos-dir DIR]

Photos: 4000x3000 JPEGs (quality 90, smooth colour fields plus sensor-like noise, ~3.5 MB), generated once
into --photos-dir and reused. Every timed run is a cold process on files already in the page cache.
- decode only: the same files decoded to 256x256 squares with Pillow's draft mode on 2 threads;
- steady state: the marginal rate of `imgtxt index` between a --small and a --large photo cold run,
  (large - small) / (t_large - t_small), which cancels the start-up cost; target >= 0.75x decode only;
- cold start: `imgtxt index` of --small photos vs a cold bare PyTorch-eager EfficientNet-Lite0 forward on
  as many random images (timm, bf16 autocast, channels_last, batch 32, torch import included); target <= 0.8x.
--before REV also times the code of that git revision (its own `imgtxt index`) in the same run.
The CNN graph export happens once, before the timed runs (the first `imgtxt index` of a model does it).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

BARE_LITE0 = """
import time, sys
start = time.perf_counter()
import torch, timm
torch.manual_seed(0)
net = timm.create_model("tf_efficientnet_lite0", pretrained=False).eval().to(memory_format=torch.channels_last)
x = torch.randint(0, 256, ({n}, 3, 224, 224), dtype=torch.uint8).float().sub_(127).div_(128)
with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
    for s in range(0, {n}, 32):
        net(x[s:s + 32].contiguous(memory_format=torch.channels_last))
"""


def pick_model(arg: str | None, workdir: Path) -> Path:
    if arg:
        return Path(arg)
    from imgtxt.model.modelfile import default_model_dir

    if (default_model_dir() / "model.json").is_file():
        return default_model_dir()
    from tiny_model import backbone_facts, build_tiny_model

    print("(no weights/default: using a tiny model with the real EfficientNet-Lite0 features)", file=sys.stderr)
    return build_tiny_model(workdir / "tiny-model", backbone_facts(), embed_dim=512)


def make_photos(folder: Path, n: int, unique: int = 48, size=(4000, 3000), noise_std: float = 9.0) -> list[Path]:
    """Camera-like 12-MP JPEGs: a smooth colour field per photo plus sensor-like noise (one noise field,
    shifted per photo: JPEG codes each file alone, so this costs the decoder as much as fresh noise).
    Encoding 12 MP takes seconds on a busy machine, so only `unique` photos are encoded; the others are
    byte copies of them with their own JPEG comment segment: a distinct file (its own hash, its own decode,
    the same decode cost), which the indexer cannot recognise as known content."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"IMG_{i:04}.jpg" for i in range(n)]
    rng = np.random.default_rng(0)
    noise = None
    for i, path in enumerate(paths[:unique]):
        if path.is_file():
            continue
        if noise is None:
            noise = noise_std * rng.standard_normal((size[1], size[0], 3), dtype=np.float32)
        base = Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)).resize(size, Image.BICUBIC)
        shift = (int(rng.integers(size[1])), int(rng.integers(size[0])))
        pixels = np.asarray(base, np.float32) + np.roll(noise, shift, axis=(0, 1))
        tmp = path.with_suffix(".tmp")
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(tmp, format="JPEG", quality=90)
        os.replace(tmp, path)
    for i, path in enumerate(paths[unique:], start=unique):
        if not path.is_file():
            data = paths[i % unique].read_bytes()
            comment = f"imgtxt bench copy {i}".encode()
            segment = b"\xff\xfe" + (len(comment) + 2).to_bytes(2, "big") + comment  # COM, right after SOI
            path.write_bytes(data[:2] + segment + data[2:])
    return paths


def subset(photos: list[Path], n: int, folder: Path) -> Path:
    """A folder of symlinks to the first n photos (the scan follows links; no copies)."""
    folder.mkdir(parents=True, exist_ok=True)
    for p in photos[:n]:
        (folder / p.name).symlink_to(p)
    return folder


CPU_SECONDS: dict[str, list[float]] = {}   # CPU time (user + sys) of each timed run: robust to other load


def _cpu(who) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def timed(cmd: list[str], env: dict, name: str = "") -> float:
    start, cpu = time.perf_counter(), _cpu(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    CPU_SECONDS.setdefault(name, []).append(_cpu(resource.RUSAGE_CHILDREN) - cpu)
    if out.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    return seconds


def decode_rate(photos: list[Path]) -> float:
    from imgtxt.model.images import iter_squares

    start, cpu = time.perf_counter(), _cpu(resource.RUSAGE_SELF)
    for _, square in iter_squares(photos, 256, workers=2):
        assert not isinstance(square, Exception), square
    CPU_SECONDS.setdefault("decode", []).append(_cpu(resource.RUSAGE_SELF) - cpu)
    return len(photos) / (time.perf_counter() - start)


def checkout(rev: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "imgtxt"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def cli(root: Path) -> list[str]:
    """`imgtxt index` from the code under root (an editable install's import hook must not pick ours)."""
    code = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in type(f).__module__]; "
            f"sys.path.insert(0, {str(root)!r}); from imgtxt.cli.main import app; app()")
    return [sys.executable, "-c", code, "index"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=48)
    parser.add_argument("--large", type=int, default=240)
    parser.add_argument("--before", default=None, help="git revision to time as well (e.g. main)")
    parser.add_argument("--model", default=None)
    parser.add_argument("--photos-dir", default=str(Path(tempfile.gettempdir()) / "imgtxt-bench-12mp"))
    parser.add_argument("--repeat", type=int, default=1, help="timed rounds (medians are reported)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = pick_model(args.model, tmp)
        t = time.perf_counter()
        photos = make_photos(Path(args.photos_dir), args.large)
        mb = sum(p.stat().st_size for p in photos) / len(photos) / 1e6
        print(f"{len(photos)} 4000x3000 JPEGs, {mb:.1f} MB each ({time.perf_counter() - t:.0f} s to make or find)")
        folders = {n: subset(photos, n, tmp / f"photos{n}") for n in (args.small, args.large)}
        for p in photos:
            p.read_bytes()  # page cache: every contender reads from memory

        cache = tmp / "cache"
        base_env = {**os.environ, "IMGTXT_CACHE_DIR": str(cache)}
        variants = {"this tree": (cli(REPO), base_env)}
        if args.before:
            variants[f"{args.before} (before)"] = (cli(checkout(args.before, tmp / "before")), base_env)
        # One-time work outside the timings: the CNN graph export (and OpenVINO's compile cache).
        warm = subset(photos, 2, tmp / "warm")
        for i, (cmd, env) in enumerate(variants.values()):
            timed(cmd + [str(warm), "--model", str(model), "--quiet"], {**env, "IMGTXT_INDEX_DIR": str(tmp / f"warm{i}")})

        results: dict[str, list[float]] = {}
        run_id = 0
        for _ in range(args.repeat):
            results.setdefault("decode", []).append(decode_rate(photos))
            print(f"  (decode only: {results['decode'][-1]:.1f} photos/s; load {os.getloadavg()[0]:.1f})", flush=True)
            results.setdefault("bare", []).append(
                timed([sys.executable, "-c", BARE_LITE0.format(n=args.small)], base_env, "bare"))
            print(f"  (bare Lite0: {results['bare'][-1]:.1f} s; load {os.getloadavg()[0]:.1f})", flush=True)
            for name, (cmd, env) in variants.items():
                for n, folder in folders.items():
                    run_id += 1
                    index_env = {**env, "IMGTXT_INDEX_DIR": str(tmp / f"index{run_id}")}
                    results.setdefault(f"{name} {n}", []).append(
                        timed(cmd + [str(folder), "--model", str(model), "--quiet"], index_env, f"{name} {n}"))
                    print(f"  ({name}, {n} photos: {results[f'{name} {n}'][-1]:.1f} s, "
                          f"{CPU_SECONDS[f'{name} {n}'][-1]:.1f} CPU s; load {os.getloadavg()[0]:.1f})", flush=True)
        load = os.getloadavg()

    med = {k: float(np.median(v)) for k, v in results.items()}
    decode = med["decode"]
    print(f"decode only (Pillow draft mode, 2 threads): {decode:.1f} photos/s")
    print(f"bare PyTorch-eager Lite0, cold, {args.small} images: {med['bare']:.1f} s")
    summary = {"decode_photos_per_s": decode, "bare_cold_s": med["bare"], "load": load}
    for name in variants:
        small, large = med[f"{name} {args.small}"], med[f"{name} {args.large}"]
        steady = (args.large - args.small) / (large - small)
        print(f"{name}: cold {args.small} photos {small:.1f} s, {args.large} photos {large:.1f} s; "
              f"steady state {steady:.1f} photos/s = {steady / decode:.2f}x decode only; "
              f"cold {args.small} = {small / med['bare']:.2f}x the bare Lite0 forward")
        # The same two ratios in CPU seconds (what a busy machine distorts least): if both saturate the cores,
        # the wall-clock ratios on an idle machine approach these.
        cpu = {k: float(np.median(v)) for k, v in CPU_SECONDS.items()}
        decode_cpu = cpu["decode"] / len(photos)
        marginal_cpu = (cpu[f"{name} {args.large}"] - cpu[f"{name} {args.small}"]) / (args.large - args.small)
        print(f"  in CPU time: decode only {1000 * decode_cpu:.1f} ms/photo, index (marginal) "
              f"{1000 * marginal_cpu:.1f} ms/photo = {decode_cpu / marginal_cpu:.2f}x; cold {args.small} photos "
              f"{cpu[f'{name} {args.small}']:.1f} CPU s vs bare Lite0 {cpu['bare']:.1f} CPU s = "
              f"{cpu[f'{name} {args.small}'] / cpu['bare']:.2f}x")
        summary[name] = {"cold_small_s": small, "cold_large_s": large, "steady_photos_per_s": steady,
                         "steady_vs_decode": steady / decode, "cold_vs_bare": small / med["bare"],
                         "cpu_decode_ms_per_photo": 1000 * decode_cpu, "cpu_index_ms_per_photo": 1000 * marginal_cpu,
                         "cpu_steady_vs_decode": decode_cpu / marginal_cpu,
                         "cpu_cold_vs_bare": cpu[f"{name} {args.small}"] / cpu["bare"]}
    print(f"machine: {os.cpu_count()} CPU cores; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
