"""Seconds for a full Flickr8k val evaluation from cached features (numpy text encoder + ranking), and what computing
the photos' features costs on each runtime `imgtxt eval` offers.

    .venv/bin/python bench/eval_speed.py [--data-dir ../shared/data/flickr8k] [--model weights/default]
    .venv/bin/python bench/eval_speed.py --runtimes --photos 200     # index path vs torch, features of 200 photos

Without --runtimes: run `imgtxt eval flickr8k --data-dir DIR` once first so the CNN features are cached; this times
the rest. With --runtimes: the first --photos val photos' raw features, computed from the JPEGs with an empty cache,
through the CNN `imgtxt index` runs (`--runtime index`, the default: the model's exported graph on OpenVINO) and
through torch (`--runtime torch`), alternating for --rounds rounds; wall and CPU seconds (this process, all
threads) and photos/s of each, and their ratio. A whole-split time scales with the photos (the captions' and the
ranking's share is the first mode's figure).
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path


def runtimes(model, data_dir: str, photos: int, rounds: int) -> None:
    from imgtxt.research.datasets import Split, load_split
    from imgtxt.research.evaluate import index_features
    from imgtxt.research.pipeline import FeatureSettings, raw_split_features

    val = load_split("flickr8k", data_dir, "val")
    part = Split("flickr8k", "val", val.image_paths[:photos], val.captions[:5 * photos])
    f = model.features
    settings = FeatureSettings(f["backbone"], f["layer_set"], f["crops"], f["precision"])
    compute = {"index": lambda: index_features(model, part, quiet=True),
               "torch": lambda: raw_split_features(part, settings, quiet=True)[0]}
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in compute}
    for _ in range(rounds):
        for name, run in compute.items():
            with tempfile.TemporaryDirectory() as cache:
                os.environ["IMGTXT_CACHE_DIR"] = cache   # nothing cached: every photo decoded and run
                wall, cpu = time.perf_counter(), time.process_time()
                raw = run()
                times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
                assert raw is not None and len(raw) == photos, name
    medians = {name: [sorted(t[i] for t in got)[len(got) // 2] for i in (0, 1)] for name, got in times.items()}
    for name, (wall, cpu) in medians.items():
        print(f"features of {photos} Flickr8k val photos, --runtime {name}: wall {wall:.1f} s = {photos / wall:.1f} "
              f"photos/s, CPU {cpu:.1f} s (median of {rounds}; loading the CNN included)")
    (iw, ic), (tw, tc) = medians["index"], medians["torch"]
    print(f"index / torch: wall {iw / tw:.2f}x, CPU {ic / tc:.2f}x; load average {os.getloadavg()[0]:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"))
    ap.add_argument("--model", default=None)
    ap.add_argument("--runtimes", action="store_true")
    ap.add_argument("--photos", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.research.evaluate import evaluate_model

    model = TrainedModel.load(args.model)
    if args.runtimes:
        runtimes(model, args.data_dir, args.photos, args.rounds)
        return
    evaluate_model(model, "flickr8k", args.data_dir, "val", quiet=True)  # make sure features are cached
    times = []
    for _ in range(3):
        start = time.perf_counter()
        result = evaluate_model(model, "flickr8k", args.data_dir, "val", quiet=True)
        times.append(time.perf_counter() - start)
    print(f"full Flickr8k val eval (1000 images, 5000 captions) from cached features: "
          f"median {sorted(times)[1]:.2f} s over 3 runs (rsum {result['rsum']:.1f})")


if __name__ == "__main__":
    main()
