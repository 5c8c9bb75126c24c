"""`imgtxt index` on camera-size JPEGs against decoding them, side by side in one run, with the CPU cost of each
stage of the index path.

    .venv/bin/python bench/index_speed.py [--small 48] [--large 240] [--before main] [--photos-dir DIR]
                                          [--previews] [--backbone efficientnet_lite1] [--stages 48]

Photos: 4000x3000 JPEGs (quality 90, smooth colour fields plus sensor-like noise, ~3.5 MB), generated once
into --photos-dir and reused. Every timed run is a cold process on files already in the page cache.
- decode only: the same files decoded to 256x256 squares with Pillow's draft mode on 2 threads;
- steady state: the marginal rate of `imgtxt index` between a --small and a --large photo cold run,
  (large - small) / (t_large - t_small), which cancels the start-up cost; target >= 0.75x decode only;
- cold start: `imgtxt index` of --small photos vs a cold bare PyTorch-eager EfficientNet-Lite forward on
  as many random images (timm, fp32, channels_last, batch 32, torch import included); target <= 0.8x;
- stages (--stages N photos, one at a time in this process, CPU ms per photo): sha256, decode (the hash kept, as
  the index does; and hashing the bytes again, as it did before), CNN graph (on every core, as the index runs it),
  FNE + projection (numpy with its default BLAS threads, and with one as the index runs it), SQLite writes;
  the ceiling decode / (decode + hash + CNN) beside the measured ratio, and the same with every stage counted.
--previews: the photos carry a 1616x1212 MPF preview, as camera JPEGs do, and `imgtxt index --previews` decodes
  it; decode only stays the draft decode of the main picture (what indexing them costs without the preview).
--backbone efficientnet_lite1: a model with Lite1's FNE (240-px input) instead of the default model's Lite0
  (random projection: same cost, meaningless vectors).
--before REV also times the code of that git revision (its own `imgtxt index`) in the same run.
--also-model DIR (repeatable) also times this tree's `imgtxt index` with that model (e.g. the previous default:
  what a new default model costs per photo, as a ratio from the same run).
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

# fp32: bf16 autocast on a CPU without native bf16 is emulated (one round ran over 10 minutes on such a CPU)
BARE_LITE = """
import time, sys
start = time.perf_counter()
import torch, timm
torch.manual_seed(0)
net = timm.create_model("tf_{name}", pretrained=False).eval().to(memory_format=torch.channels_last)
x = torch.randint(0, 256, ({n}, 3, {size}, {size}), dtype=torch.uint8).float().sub_(127).div_(128)
with torch.inference_mode():
    for s in range(0, {n}, 32):
        net(x[s:s + 32].contiguous(memory_format=torch.channels_last))
"""
CROP = {"efficientnet_lite0": 224, "efficientnet_lite1": 240}


def lite_model(workdir: Path, backbone: str) -> Path:
    """A model with `backbone`'s FNE ('all' layers, one crop) and the default model's 1024-d joint space; its
    weights are random (index speed only)."""
    import json

    from tiny_model import build_tiny_model

    from imgtxt.research.pipeline import FeatureSettings, open_extractor

    extractor = open_extractor(FeatureSettings(backbone=backbone, layer_set="all", crops=1))
    facts = {"backbone_id": extractor.backbone.id, "raw_dim": extractor.dim,
             "baseline_slice": list(extractor.baseline_slice)}
    extractor.close()
    folder = build_tiny_model(workdir / backbone, facts, embed_dim=1024)
    config = json.loads((folder / "model.json").read_text())
    config["features"]["backbone"] = backbone
    (folder / "model.json").write_text(json.dumps(config))
    return folder


def pick_model(arg: str | None, workdir: Path, backbone: str = "efficientnet_lite0") -> Path:
    if arg:
        return Path(arg)
    if backbone != "efficientnet_lite0":
        return lite_model(workdir, backbone)
    from imgtxt.model.modelfile import default_model_dir

    if (default_model_dir() / "model.json").is_file():
        return default_model_dir()
    from tiny_model import backbone_facts, build_tiny_model

    print("(no weights/default: using a tiny model with the real EfficientNet-Lite0 features)", file=sys.stderr)
    return build_tiny_model(workdir / "tiny-model", backbone_facts(), embed_dim=512)


def make_photos(folder: Path, n: int, unique: int = 48, size=(4000, 3000), noise_std: float = 9.0,
                preview: tuple[int, int] | None = None) -> list[Path]:
    """Camera-like 12-MP JPEGs: a smooth colour field per photo plus sensor-like noise (one noise field,
    shifted per photo: JPEG codes each file alone, so this costs the decoder as much as fresh noise).
    Encoding 12 MP takes seconds on a busy machine, so only `unique` photos are encoded; the others are
    byte copies of them with their own JPEG comment segment: a distinct file (its own hash, its own decode,
    the same decode cost), which the indexer cannot recognise as known content.
    preview: also store the picture at this size as an MPF large thumbnail (camera JPEGs)."""
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
        picture = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
        if preview:
            from camera_files import write_mpf_jpeg

            write_mpf_jpeg(tmp, picture, picture.resize(preview, Image.BILINEAR, reducing_gap=3.0))
        else:
            picture.save(tmp, format="JPEG", quality=90)
        os.replace(tmp, path)
    for i, path in enumerate(paths[unique:], start=unique):
        if not path.is_file():
            data = paths[i % unique].read_bytes()
            comment = f"imgtxt bench copy {i}".encode()
            # COM right after SOI: an MPF preview's offset is relative to the MPF header, which moves with it
            segment = b"\xff\xfe" + (len(comment) + 2).to_bytes(2, "big") + comment
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


def stage_costs(photos: list[Path], model_dir: Path, previews: bool, batch: int = 32) -> dict[str, float]:
    """CPU ms per photo of each stage of the index path, one stage at a time in this process (process CPU
    time: the CNN's own threads included). The exported graph must be in the cache already."""
    import tempfile

    from imgtxt.library.photo_work import Work, decode, hash_work
    from imgtxt.library.store import Store
    from imgtxt.model.cnn_runtime import one_blas_thread
    from imgtxt.model.modelfile import TrainedModel

    model = TrainedModel.load(model_dir)
    embedder = model.image_embedder(threads=os.cpu_count() or 1)   # as `imgtxt index` sizes it (indexer.py)
    n, size = len(photos), embedder.resize_size
    ms: dict[str, float] = {}

    def timed_stage(name, function):
        start = time.process_time()
        out = function()
        ms[name] = 1000 * (time.process_time() - start) / n
        return out

    def cnn(squares):
        return np.concatenate([embedder.extractor.raw_features(squares[s:s + batch]) for s in range(0, n, batch)])

    def projection(raw):
        return np.concatenate([model.encode_raw_images(raw[s:s + batch]) for s in range(0, n, batch)])

    # hashed first, then decoded with that hash kept, as `imgtxt index` does (a file unchanged since its hash is
    # not hashed again when decoded: photo_work.read_photo)
    works = timed_stage("hash", lambda: [hash_work(Work(str(p), 0, 0, None)) for p in photos])
    squares = np.stack(timed_stage("decode", lambda: [decode(w, size, previews)[0] for w in works]))
    timed_stage("decode, hashing again", lambda: [decode(Work(w.path, 0, 0, None), size, previews) for w in works])
    if previews:
        timed_stage("decode main picture", lambda: [decode(w, size)[0] for w in works])
    cnn(squares[:batch])  # first inference: compilation and allocations
    raw = timed_stage("CNN", lambda: cnn(squares))
    projection(raw[:batch])
    timed_stage("projection, default BLAS threads", lambda: projection(raw))
    with one_blas_thread():
        vectors = timed_stage("projection, one BLAS thread", lambda: projection(raw))
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp))

        def write():
            for s in range(0, n, batch):  # one transaction per batch, as the indexer commits
                with store.db.atomic():
                    for i in range(s, min(n, s + batch)):
                        store.put_photo(str(photos[i]), 1, 1, f"{i:032x}", 4000, 3000, vectors[i], model.model_id)

        timed_stage("SQLite", write)
        store.close()
    return ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=48)
    parser.add_argument("--large", type=int, default=240)
    parser.add_argument("--before", default=None, help="git revision to time as well (e.g. main)")
    parser.add_argument("--model", default=None)
    parser.add_argument("--also-model", action="append", default=[], help="another model folder to time (repeatable)")
    parser.add_argument("--backbone", default="efficientnet_lite0", choices=sorted(CROP),
                        help="without --model: Lite0 is the default model; Lite1 a speed-equivalent model")
    parser.add_argument("--previews", action="store_true",
                        help="photos with an MPF preview, indexed with `imgtxt index --previews`")
    parser.add_argument("--photos-dir", default=None, help="where the photos are made once and reused")
    parser.add_argument("--repeat", type=int, default=1, help="timed rounds (medians are reported)")
    parser.add_argument("--stages", type=int, default=48, help="photos for the per-stage CPU costs (0: skip)")
    parser.add_argument("--unique", type=int, default=48, help="photos encoded; the others are byte copies of them")
    args = parser.parse_args()
    photos_dir = args.photos_dir or str(Path(tempfile.gettempdir()) /
                                        ("imgtxt-bench-12mp-mpf" if args.previews else "imgtxt-bench-12mp"))

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = pick_model(args.model, tmp, args.backbone)
        t = time.perf_counter()
        photos = make_photos(Path(photos_dir), args.large, args.unique, preview=(1616, 1212) if args.previews else None)
        mb = sum(p.stat().st_size for p in photos) / len(photos) / 1e6
        print(f"{len(photos)} 4000x3000 JPEGs{' with a 1616x1212 MPF preview' if args.previews else ''}, "
              f"{mb:.1f} MB each ({time.perf_counter() - t:.0f} s to make or find)")
        folders = {n: subset(photos, n, tmp / f"photos{n}") for n in (args.small, args.large)}
        for p in photos:
            p.read_bytes()  # page cache: every contender reads from memory

        cache = tmp / "cache"
        base_env = {**os.environ, "IMGTXT_CACHE_DIR": str(cache)}
        flags = ["--previews"] if args.previews else []
        variants = {"this tree": (cli(REPO) + flags, base_env, model)}
        for other in args.also_model:
            variants[f"this tree, model {Path(other).name}"] = (cli(REPO) + flags, base_env, Path(other))
        if args.before:
            variants[f"{args.before} (before)"] = (cli(checkout(args.before, tmp / "before")), base_env, model)
        # One-time work outside the timings: the CNN graph export (and OpenVINO's compile cache).
        warm = subset(photos, 2, tmp / "warm")
        for i, (cmd, env, variant_model) in enumerate(variants.values()):
            timed(cmd + [str(warm), "--model", str(variant_model), "--quiet"], {**env, "IMGTXT_INDEX_DIR": str(tmp / f"warm{i}")})
        bare = BARE_LITE.format(name=args.backbone, n=args.small, size=CROP[args.backbone])

        results: dict[str, list[float]] = {}
        run_id = 0
        for _ in range(args.repeat):
            results.setdefault("decode", []).append(decode_rate(photos))
            print(f"  (decode only: {results['decode'][-1]:.1f} photos/s; load {os.getloadavg()[0]:.1f})", flush=True)
            results.setdefault("bare", []).append(timed([sys.executable, "-c", bare], base_env, "bare"))
            print(f"  (bare {args.backbone}: {results['bare'][-1]:.1f} s; load {os.getloadavg()[0]:.1f})", flush=True)
            for name, (cmd, env, variant_model) in variants.items():
                for n, folder in folders.items():
                    run_id += 1
                    index_env = {**env, "IMGTXT_INDEX_DIR": str(tmp / f"index{run_id}")}
                    results.setdefault(f"{name} {n}", []).append(
                        timed(cmd + [str(folder), "--model", str(variant_model), "--quiet"], index_env, f"{name} {n}"))
                    print(f"  ({name}, {n} photos: {results[f'{name} {n}'][-1]:.1f} s, "
                          f"{CPU_SECONDS[f'{name} {n}'][-1]:.1f} CPU s; load {os.getloadavg()[0]:.1f})", flush=True)
        stages = {}
        if args.stages:
            os.environ["IMGTXT_CACHE_DIR"] = str(cache)   # the graph the warm-up exported
            stages = stage_costs(photos[:args.stages], model, args.previews)
        load = os.getloadavg()

    med = {k: float(np.median(v)) for k, v in results.items()}
    decode = med["decode"]
    print(f"decode only (Pillow draft mode, 2 threads, main picture): {decode:.1f} photos/s")
    print(f"bare PyTorch-eager {args.backbone} fp32, cold, {args.small} images: {med['bare']:.1f} s")
    summary = {"decode_photos_per_s": decode, "bare_cold_s": med["bare"], "load": load, "stages_cpu_ms": stages,
               "backbone": args.backbone, "previews": args.previews}
    for name in variants:
        small, large = med[f"{name} {args.small}"], med[f"{name} {args.large}"]
        steady = (args.large - args.small) / (large - small)
        print(f"{name}: cold {args.small} photos {small:.1f} s, {args.large} photos {large:.1f} s; "
              f"steady state {steady:.1f} photos/s = {steady / decode:.2f}x decode only; "
              f"cold {args.small} = {small / med['bare']:.2f}x the bare forward")
        # The same two ratios in CPU seconds (what a busy machine distorts least): if both saturate the cores,
        # the wall-clock ratios on an idle machine approach these.
        cpu = {k: float(np.median(v)) for k, v in CPU_SECONDS.items()}
        decode_cpu = cpu["decode"] / len(photos)
        marginal_cpu = (cpu[f"{name} {args.large}"] - cpu[f"{name} {args.small}"]) / (args.large - args.small)
        print(f"  in CPU time: decode only {1000 * decode_cpu:.1f} ms/photo, index (marginal) "
              f"{1000 * marginal_cpu:.1f} ms/photo = {decode_cpu / marginal_cpu:.2f}x; cold {args.small} photos "
              f"{cpu[f'{name} {args.small}']:.1f} CPU s vs bare {cpu['bare']:.1f} CPU s = "
              f"{cpu[f'{name} {args.small}'] / cpu['bare']:.2f}x")
        summary[name] = {"cold_small_s": small, "cold_large_s": large, "steady_photos_per_s": steady,
                         "steady_vs_decode": steady / decode, "cold_vs_bare": small / med["bare"],
                         "cpu_decode_ms_per_photo": 1000 * decode_cpu, "cpu_index_ms_per_photo": 1000 * marginal_cpu,
                         "cpu_steady_vs_decode": decode_cpu / marginal_cpu,
                         "cpu_cold_vs_bare": cpu[f"{name} {args.small}"] / cpu["bare"]}
    if stages:
        print(f"CPU ms per photo by stage ({args.stages} photos, one stage at a time): "
              + ", ".join(f"{k} {v:.1f}" for k, v in stages.items()))
        main_decode = stages.get("decode main picture", stages["decode"])
        ceiling = main_decode / (stages["decode"] + stages["hash"] + stages["CNN"])
        summary["ceiling"] = ceiling
        print(f"ceiling decode only / (decode + hash + CNN) = {main_decode:.1f} / "
              f"{stages['decode'] + stages['hash'] + stages['CNN']:.1f} = {ceiling:.2f}x")
        # every stage the index runs per photo: the projection (on one BLAS thread, as the index runs it) and the
        # SQLite writes are CPU the cores spend too
        every = sum(stages[k] for k in ("decode", "hash", "CNN", "projection, one BLAS thread", "SQLite"))
        summary["ceiling_every_stage"] = main_decode / every
        print(f"ceiling with every stage, decode only / (decode + hash + CNN + projection + SQLite) = "
              f"{main_decode:.1f} / {every:.1f} = {main_decode / every:.2f}x")
    print(f"machine: {os.cpu_count()} CPU cores; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
