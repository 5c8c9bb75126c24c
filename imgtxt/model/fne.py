"""Full-Network Embedding (Garcia-Gasulla et al.; FNE paper section 3.1 and 4.3.3).

1. Run the CNN on the image's crops; spatially average every hooked layer's output (FC layers as
   they are), average over crops -> "raw" features (float32).
2. Standardize each feature with the mean/std of the *training images only* (zero std -> 0).
3. Discretize: z > 0.15 -> 1, z < -0.25 -> -1, else 0 (int8).
The one-layer baseline is the last hooked layer, L2-normalized.

Steps 2-3 are numpy so they can run without torch; step 1 needs torch (RawFeatureExtractor).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

LOW_CUT, HIGH_CUT = -0.25, 0.15
CROPS = (1, 10)


# ---------------------------------------------------------------- standardize + discretize (numpy)

@dataclass
class FeatureStats:
    """Per-feature mean and std over the training images."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, raw_train: np.ndarray, chunk: int = 1024) -> "FeatureStats":
        # float64 accumulation: 21k features x thousands of images in float32 loses digits.
        n = raw_train.shape[0]
        total = np.zeros(raw_train.shape[1])
        total_sq = np.zeros(raw_train.shape[1])
        for start in range(0, n, chunk):
            block = np.asarray(raw_train[start:start + chunk], dtype=np.float64)
            total += block.sum(0)
            total_sq += (block ** 2).sum(0)
        mean = total / n
        var = np.maximum(total_sq / n - mean ** 2, 0.0)
        return cls(mean.astype(np.float32), np.sqrt(var).astype(np.float32))


def standardize(raw: np.ndarray, stats: FeatureStats) -> np.ndarray:
    std = stats.std
    safe = np.where(std > 0, std, 1.0)
    z = (np.asarray(raw, dtype=np.float32) - stats.mean) / safe
    z[:, std <= 0] = 0.0  # a feature constant over the training set carries no information
    return z


def discretize(z: np.ndarray, low: float = LOW_CUT, high: float = HIGH_CUT) -> np.ndarray:
    out = np.zeros(z.shape, dtype=np.int8)
    out[z > high] = 1
    out[z < low] = -1
    return out


def full_network_embedding(raw: np.ndarray, stats: FeatureStats, chunk: int = 2048) -> np.ndarray:
    """raw (N, D) float -> FNE (N, D) int8 in {-1, 0, 1}."""
    return np.concatenate(
        [discretize(standardize(raw[s:s + chunk], stats)) for s in range(0, len(raw), chunk)]
    ) if len(raw) else np.zeros((0, raw.shape[1]), np.int8)


def l2_normalize(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


# ---------------------------------------------------------------- raw features (torch)

@contextmanager
def _tf32(torch, allowed: bool):
    """TF32 in cuDNN's convolutions and in matrix products on or off for a block, then as it was."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


class RawFeatureExtractor:
    """Spatially averaged activations of a layer set, averaged over 1 or 10 crops.

    Input: uint8 RGB images already squashed to resize_size x resize_size (`images.load_square`).
    Precision "auto": CUDA -> fp16 autocast; CPU -> bf16 autocast + channels_last (AMX makes this
    several times faster; `bench/fne_speed.py` measures it and the agreement of the discretized
    features with fp32). "fp32" turns both off, and on CUDA TF32 as well: cuDNN's convolutions use TF32 by
    default, which moved raw features by up to 4e-2 from the CPU's on an H200 (docs/seed-systems.md).
    """

    def __init__(self, backbone, layer_set: str = "all", crops: int = 10, device: str | None = None,
                 precision: str = "auto"):
        import torch

        if crops not in CROPS:
            raise ValueError(f"crops must be 1 or 10, not {crops}")
        if layer_set not in backbone.layer_sets:
            raise ValueError(f"{backbone.name} has layer sets {sorted(backbone.layer_sets)}, not {layer_set!r}")
        self.torch = torch
        self.backbone = backbone
        self.layer_set = layer_set
        self.crops = crops
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.precision = precision
        self.net = backbone.net.to(self.device)
        if self.device.type == "cpu" and precision == "auto":
            self.net = self.net.to(memory_format=torch.channels_last)
        self._outputs: list = []
        self._handles = [m.register_forward_hook(self._hook) for _, m in backbone.layer_sets[layer_set]]
        mean = torch.tensor(backbone.mean, device=self.device).view(1, 3, 1, 1)
        std = torch.tensor(backbone.std, device=self.device).view(1, 3, 1, 1)
        self._mean, self._std = mean, std
        # One dummy pass learns each hooked output's width (a shared module may fire several times).
        dummy = np.zeros((1, backbone.resize_size, backbone.resize_size, 3), np.uint8)
        self._run(dummy)
        self.layer_dims = [o.shape[1] for o in self._last_outputs]
        names = [n for n, _ in backbone.layer_sets[layer_set]]
        if len(names) != len(self.layer_dims):  # shared modules: number the calls
            names = [f"call{i}" for i in range(len(self.layer_dims))]
        self.layer_names = names
        self.dim = int(sum(self.layer_dims))
        self.baseline_slice = (self.dim - self.layer_dims[-1], self.dim)

    def _hook(self, module, inputs, output):
        if output.dim() == 4:  # accumulate in fp32 without materialising an fp32 copy of the map
            self._outputs.append(output.mean(dim=(2, 3), dtype=self.torch.float32))
        else:
            self._outputs.append(output.float().flatten(1))

    @property
    def resize_size(self) -> int:
        return self.backbone.resize_size

    def _crops(self, x):
        """(B, 3, R, R) -> (crops*B, 3, C, C): centre, or 4 corners + centre and their mirrors."""
        c, r = self.backbone.crop_size, x.shape[-1]
        o = (r - c) // 2
        centre = x[..., o:o + c, o:o + c]
        if self.crops == 1:
            return centre
        views = [x[..., :c, :c], x[..., :c, r - c:], x[..., r - c:, :c], x[..., r - c:, r - c:], centre]
        views += [v.flip(-1) for v in views]
        return self.torch.cat(views, 0)

    def _run(self, images: np.ndarray):
        torch = self.torch
        x = torch.from_numpy(np.ascontiguousarray(images)).to(self.device).permute(0, 3, 1, 2)
        x = self._crops(x).float()
        x = (x - self._mean) / self._std
        autocast = self.precision == "auto"
        if self.device.type == "cpu" and autocast:
            x = x.contiguous(memory_format=torch.channels_last)
        dtype = torch.float16 if self.device.type == "cuda" else torch.bfloat16
        self._outputs = []
        strict = self.device.type == "cuda" and self.precision == "fp32"
        with torch.inference_mode(), torch.autocast(self.device.type, dtype=dtype, enabled=autocast), \
                _tf32(torch, allowed=not strict):
            self.net(x)
        self._last_outputs = self._outputs
        self._outputs = []

    def __call__(self, images: np.ndarray) -> np.ndarray:
        """images: (B, R, R, 3) uint8 -> raw features (B, dim) float32."""
        batch = images.shape[0]
        self._run(images)
        feats = self.torch.cat(self._last_outputs, dim=1)
        feats = feats.view(self.crops, batch, -1).mean(0)
        return feats.cpu().numpy().astype(np.float32)

    def close(self) -> None:
        for h in self._handles:
            h.remove()
