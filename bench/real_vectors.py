"""Real joint-space vectors for the scale benchmarks: the shipped model's embeddings of Flickr8k photos and captions,
and a synthetic library of any size drawn from a distribution fitted to them.

The photo vectors come from the cached raw FNE features (EfficientNet-Lite0, layer set `all`, 1 crop, fp32; compute
them once with `imgtxt features flickr8k`), turned into joint vectors by `TrainedModel.encode_raw_images`. Caption
vectors (the queries of a text search) come from the model's numpy text encoder. Both are cached as .npy under
--work (default: imgtxt-bench under the system's temp folder; never in the repository).

`FittedMixture`: random unit vectors are Annoy's and IVF's worst case and nothing like a photo library, so
the synthetic vectors are drawn from a Gaussian mixture fitted to the 7,000 real train+val photo vectors in their
PCA basis (diagonal covariance per component), then L2-normalised like the model's outputs.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
WORK = Path(tempfile.gettempdir()) / "imgtxt-bench"   # --work default: cached vectors, rebuilt when missing
sys.path.insert(0, str(REPO))
DATA_DIR = REPO.parent / "shared" / "data" / "flickr8k"


def _cached(path: Path, compute):
    if path.is_file():
        return np.load(path)
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, value)
    return value


def raw_features(split_name: str, model, data_dir: Path = DATA_DIR) -> np.ndarray:
    from imgtxt.research.datasets import load_split
    from imgtxt.research.feature_cache import FeatureSpec, cached_features

    split = load_split("flickr8k", data_dir, split_name)
    f = model.features
    for runtime in ("torch", "openvino"):   # the exported graph agrees with torch fp32 to ~1e-4
        raw = cached_features("flickr8k", split, FeatureSpec(f["backbone_id"], f["layer_set"], f["crops"], "fp32",
                                                             runtime))
        if raw is not None:
            return raw
    raise SystemExit(f"no cached fp32 features of flickr8k {split_name}: run `imgtxt features flickr8k "
                     f"--precision fp32 [--runtime openvino]` (or set IMGTXT_CACHE_DIR)")


def photo_vectors(model, work: Path, split_name: str) -> np.ndarray:
    return _cached(work / f"{model.model_id}-{split_name}-photos.npy",
                   lambda: model.encode_raw_images(raw_features(split_name, model)).astype(np.float32))


def caption_vectors(model, work: Path, split_name: str = "val", limit: int | None = None) -> np.ndarray:
    from imgtxt.research.datasets import load_split

    def compute():
        captions = load_split("flickr8k", DATA_DIR, split_name).captions
        return model.encode_query(captions[:limit] if limit else captions).astype(np.float32)
    return _cached(work / f"{model.model_id}-{split_name}-captions{limit or ''}.npy", compute)


class FittedMixture:
    """A Gaussian mixture in the PCA basis of real photo vectors; samples are unit vectors like the model's."""

    def __init__(self, real: np.ndarray, components: int = 64, seed: int = 0):
        from sklearn.mixture import GaussianMixture

        self.mean = real.mean(axis=0)
        _, _, self.basis = np.linalg.svd(real - self.mean, full_matrices=False)
        self.gmm = GaussianMixture(components, covariance_type="diag", random_state=seed, max_iter=50)
        self.gmm.fit((real - self.mean) @ self.basis.T)

    def sample(self, n: int, seed: int, chunk: int = 50_000) -> np.ndarray:
        """n unit vectors (float32), drawn in chunks so a million of them never need float64 temporaries."""
        out = np.empty((n, self.basis.shape[1]), np.float32)
        for k, s in enumerate(range(0, n, chunk)):
            out[s:s + chunk] = self._sample(min(chunk, n - s), np.random.default_rng([seed, k]))
        return out

    def _sample(self, n: int, rng) -> np.ndarray:
        counts = rng.multinomial(n, self.gmm.weights_)
        parts = [rng.normal(self.gmm.means_[k], np.sqrt(self.gmm.covariances_[k]), size=(c, self.basis.shape[0]))
                 for k, c in enumerate(counts) if c]
        x = (np.concatenate(parts) @ self.basis + self.mean).astype(np.float32)
        x = x[rng.permutation(n)]
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        return x


def load_model(path=None):
    from imgtxt.model.modelfile import TrainedModel

    return TrainedModel.load(path)
