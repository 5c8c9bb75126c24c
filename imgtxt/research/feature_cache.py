"""Raw FNE features of a dataset split, computed once and cached on disk, resumable.

Layout: <cache root>/<dataset>/<key>/<split>.npy (float32 memmap, one row per image) with
<split>.json recording how many rows are done. The key hashes everything that changes the
numbers (backbone and its weights file, layer set, crops, precision), so a different setting can
never pick up stale rows. An interrupted run resumes from the last flushed batch.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

CACHE_ENV = "IMGTXT_CACHE_DIR"
PIPED_EVERY = 30.0   # seconds between progress lines where stderr is not a terminal (a pipe, a log file)


def cache_root() -> Path:
    from imgtxt.paths import cache_dir

    return cache_dir()


@dataclass(frozen=True)
class FeatureSpec:
    backbone_id: str      # name@weights-file-hash
    layer_set: str
    crops: int
    precision: str
    runtime: str = "torch"   # "openvino": the exported graph (agrees with torch fp32 to ~1e-4, not bit for bit)
    view: str = ""           # a training view (views.py); "" = the photo as indexed

    @property
    def key(self) -> str:
        # torch keys stay what they were before runtimes existed, so existing caches keep matching
        parts = [self.backbone_id, self.layer_set, self.crops, self.precision]
        parts += [self.runtime] if self.runtime != "torch" else []
        parts += [self.view] if self.view else []
        digest = hashlib.sha1(json.dumps(parts).encode()).hexdigest()[:10]
        name = self.backbone_id.split("@")[0]
        runtime = f"-{self.runtime}" if self.runtime != "torch" else ""
        view = f"-{self.view}" if self.view else ""
        return f"{name}-{self.layer_set}-{self.crops}crop-{self.precision}{runtime}{view}-{digest}"


def _paths_digest(paths) -> str:
    return hashlib.sha1("\n".join(str(Path(p).name) for p in paths).encode()).hexdigest()[:16]


def cached_features(dataset: str, split, spec: FeatureSpec, root: Path | None = None) -> np.ndarray | None:
    """The finished features of a split, or None when they are not (all) computed yet."""
    folder = (root or cache_root()) / dataset / spec.key
    meta_path = folder / f"{split.name}.json"
    if not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text())
    if meta.get("done") != len(split) or meta.get("images") != _paths_digest(split.image_paths):
        return None
    return np.load(folder / f"{split.name}.npy", mmap_mode="r")


def compute_features(dataset: str, split, extractor, spec: FeatureSpec, root: Path | None = None,
                     batch_size: int = 32, quiet: bool = False) -> np.ndarray:
    """Compute (or finish computing) the raw features of every image in `split`."""
    from tqdm import tqdm

    from imgtxt.model.images import ImageError, iter_squares

    folder = (root or cache_root()) / dataset / spec.key
    folder.mkdir(parents=True, exist_ok=True)
    data_path, meta_path = folder / f"{split.name}.npy", folder / f"{split.name}.json"
    digest = _paths_digest(split.image_paths)
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    n, dim = len(split), extractor.dim
    if meta.get("images") == digest and data_path.is_file() and meta.get("dim") == dim:
        rows = np.load(data_path, mmap_mode="r+")
        done = int(meta.get("done", 0))
    else:
        rows = np.lib.format.open_memmap(data_path, mode="w+", dtype=np.float32, shape=(n, dim))
        done = 0
    meta = {"spec": dict(spec.__dict__), "images": digest, "dim": dim, "done": done,
            "layers": list(zip(extractor.layer_names, extractor.layer_dims)),
            "baseline_slice": list(extractor.baseline_slice)}

    def save_progress(count: int) -> None:
        rows.flush()  # rows reach the disk before the counter that vouches for them
        meta["done"] = count
        tmp = meta_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, meta_path)

    if done < n:
        what = f"{dataset} {split.name} features"
        bar = tqdm(total=n, initial=done, unit="img", desc=what, disable=quiet or None, file=sys.stderr)
        # tqdm shows nothing where stderr is not a terminal: a line every PIPED_EVERY seconds there instead
        lines = None if quiet or sys.stderr.isatty() else PipedProgress(what, n, done)
        batch, position = [], done
        for path, image in iter_squares(split.image_paths[done:], extractor.resize_size):
            if isinstance(image, ImageError):
                raise ImageError(f"{path}: {image}")
            batch.append(image)
            if len(batch) == batch_size or position + len(batch) == n:
                rows[position:position + len(batch)] = extractor(np.stack(batch))
                position += len(batch)
                save_progress(position)
                bar.update(len(batch))
                if lines is not None:
                    lines.update(position)
                batch = []
        bar.close()
    save_progress(n)
    return np.load(data_path, mmap_mode="r")


def feature_meta(dataset: str, spec: FeatureSpec, split_name: str, root: Path | None = None) -> dict:
    return json.loads(((root or cache_root()) / dataset / spec.key / f"{split_name}.json").read_text())


class PipedProgress:
    """`imgtxt: WHAT: 320/1000 photos (32%) in 2 min, about 4 min left` on stderr every PIPED_EVERY seconds, and
    at the end."""

    def __init__(self, what: str, total: int, done: int = 0):
        import time

        self.what, self.total, self.first = what, total, done
        self.started = self.last = time.monotonic()

    def update(self, done: int) -> None:
        import time

        now = time.monotonic()
        if now - self.last < PIPED_EVERY and done < self.total:
            return
        self.last, spent = now, now - self.started

        def minutes(seconds: float) -> str:
            return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"
        rate = (done - self.first) / spent if spent > 0 else 0
        left = f", about {minutes((self.total - done) / rate)} left" if rate > 0 and done < self.total else ""
        sys.stderr.write(f"imgtxt: {self.what}: {done}/{self.total} photos ({100 * done // max(self.total, 1)}%) "
                         f"in {minutes(spent)}{left}\n")
        sys.stderr.flush()
