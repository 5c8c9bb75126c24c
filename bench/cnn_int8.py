"""Would an int8 CNN keep the shipped model's quality, and how much faster is it? (a measurement, not a feature)

    pip install nncf
    .venv/bin/python bench/cnn_int8.py [--data-dir ../shared/data/flickr8k]
        [--calibration 300]

The exported graph `imgtxt index` runs (Lite0 + FNE means) is quantized to int8 with OpenVINO's post-training
quantization (NNCF, --calibration Flickr8k *train* images, "mixed" preset), then compared with the fp32 graph on
the 1,000 val images: raw max abs diff, discretized FNE agreement, the shipped model's val rsum on each, and the
CNN's seconds (wall and CPU of this process) on 2 threads, batch 32, the two interleaved over --rounds rounds.
Needs the cached torch fp32 val features (`imgtxt features flickr8k --precision fp32`) for the reference rsum.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def squares_of(paths) -> np.ndarray:
    from imgtxt.model.images import ImageError, iter_squares

    out = []
    for path, square in iter_squares(paths, 256):
        if isinstance(square, ImageError):
            raise SystemExit(f"{path}: {square}")
        out.append(square)
    return np.stack(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"))
    ap.add_argument("--model", default=None)
    ap.add_argument("--calibration", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    try:
        import nncf
        import openvino as ov
    except ImportError:
        raise SystemExit("needs openvino and nncf: pip install nncf") from None

    from imgtxt.model.cnn_export import export_for_model
    from imgtxt.model.fne import full_network_embedding
    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.research.datasets import CAPTIONS_PER_IMAGE, load_split
    from imgtxt.research.feature_cache import FeatureSpec, cached_features
    from imgtxt.research.metrics import evaluate_scores

    model = TrainedModel.load(args.model)
    f = model.features
    val = load_split("flickr8k", args.data_dir, "val")
    train = load_split("flickr8k", args.data_dir, "train")
    torch_raw = cached_features("flickr8k", val, FeatureSpec(f["backbone_id"], f["layer_set"], f["crops"], "fp32"))
    if torch_raw is None:
        raise SystemExit("no cached fp32 val features: run `imgtxt features flickr8k --precision fp32` first")
    torch_raw = np.asarray(torch_raw)
    val_squares = squares_of(val.image_paths)
    rng = np.random.default_rng(0)
    calibration = squares_of([train.image_paths[i] for i in rng.choice(len(train), args.calibration, replace=False)])
    captions = model.encode_text(val.captions)

    def rsum(raw) -> float:
        return evaluate_scores(model.scores(model.encode_raw_images(raw), captions), CAPTIONS_PER_IMAGE)["rsum"]

    core = ov.Core()
    with tempfile.TemporaryDirectory() as tmp:
        graph = export_for_model(model, Path(tmp) / "cnn.onnx")
        fp32_model = core.read_model(str(graph))
        t = time.perf_counter()
        batches = [calibration[s:s + 32] for s in range(0, len(calibration), 32)]
        int8_model = nncf.quantize(fp32_model, nncf.Dataset(batches), subset_size=len(calibration),
                                   preset=nncf.QuantizationPreset.MIXED)
        print(f"quantized on {len(calibration)} train images in {time.perf_counter() - t:.0f} s")
        config = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 2, "PERFORMANCE_HINT": "LATENCY"}
        requests = {"fp32": core.compile_model(fp32_model, "CPU", config).create_infer_request(),
                    "int8": core.compile_model(int8_model, "CPU", config).create_infer_request()}

        raws, wall, cpu = {}, {k: [] for k in requests}, {k: [] for k in requests}
        for _ in range(args.rounds):
            for name, request in requests.items():
                start, c = time.perf_counter(), time.process_time()
                raws[name] = np.concatenate([request.infer({0: val_squares[s:s + 32]})[0].copy()
                                             for s in range(0, len(val_squares), 32)]).astype(np.float32)
                wall[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - c)

    print(f"{len(val)} val images, 2 threads, batch 32, median of {args.rounds}; load {os.getloadavg()[0]:.1f}")
    print(f"  torch fp32 (cached): rsum {rsum(torch_raw):.2f}")
    reference = full_network_embedding(torch_raw, model.stats)
    for name, raw in raws.items():
        disc = full_network_embedding(raw, model.stats)
        print(f"  openvino {name}: {np.median(wall[name]):.1f} s wall, {np.median(cpu[name]):.1f} s CPU "
              f"({1000 * np.median(cpu[name]) / len(val):.1f} ms CPU per image); raw max abs diff "
              f"{np.abs(raw - torch_raw).max():.2e}; discretized FNE {100 * np.mean(disc == reference):.2f}% "
              f"identical, {100 * np.mean(np.abs(disc.astype(int) - reference) == 2):.3f}% flipped sign; "
              f"val rsum {rsum(raw):.2f}")
    print(f"int8 / fp32 CPU: {np.median(cpu['int8']) / np.median(cpu['fp32']):.2f}x")


if __name__ == "__main__":
    main()
