"""The trained-model format and its torch-free runtime.

A model is a folder:
  model.json         config: joint space, image-feature settings (backbone, layer set, crops), training record
  model.safetensors  weights (fp16) and the FNE training-set mean/std (fp32); no pickle
  vocab.json         the vocabulary
  captions.txt       the caption bank for `imgtxt caption` (the training captions, one per line)

`TrainedModel` loads it with numpy only and encodes text with a numpy GRU forward (tested equal to
the torch model), so `imgtxt search` never imports torch.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .fne import FeatureStats, full_network_embedding, l2_normalize
from .vocab import Vocabulary

FORMAT, FORMAT_VERSION = "imgtxt-model", 1
WEIGHT_NAMES = ("word_embedding", "gru.weight_ih", "gru.weight_hh", "gru.bias_ih", "gru.bias_hh", "image_projection")


class ModelError(Exception):
    """A model folder that is missing, incomplete, or not an imgtxt model."""


def default_model_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "weights" / "default"


def save_model(folder: Path | str, weights: dict[str, np.ndarray], vocab: Vocabulary, config: dict,
               stats: FeatureStats | None, captions: list[str]) -> None:
    """Write a model folder. `config` holds "joint", "features" and optionally "training"/"metrics"."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {name: np.ascontiguousarray(weights[name], dtype=np.float16) for name in WEIGHT_NAMES}
    if stats is not None:
        tensors["fne.mean"] = np.ascontiguousarray(stats.mean, dtype=np.float32)
        tensors["fne.std"] = np.ascontiguousarray(stats.std, dtype=np.float32)
    save_file(tensors, str(folder / "model.safetensors"))
    vocab.save(folder / "vocab.json")
    (folder / "captions.txt").write_text("\n".join(c.replace("\n", " ") for c in captions) + "\n", encoding="utf-8")
    doc = {"format": FORMAT, "version": FORMAT_VERSION, **config}
    (folder / "model.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1.0)  # overflow-free


@dataclass
class TrainedModel:
    folder: Path
    config: dict
    vocab: Vocabulary
    weights: dict[str, np.ndarray]
    stats: FeatureStats | None
    model_id: str

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(cls, folder: Path | str | None = None) -> "TrainedModel":
        from safetensors import SafetensorError
        from safetensors.numpy import load_file

        folder = Path(folder) if folder else default_model_dir()
        if not folder.is_dir():
            raise ModelError(f"{folder}: no such model folder")
        try:
            config = json.loads((folder / "model.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ModelError(f"{folder}: no model.json (not an imgtxt model folder)") from None
        except json.JSONDecodeError as e:
            raise ModelError(f"{folder / 'model.json'}: not valid JSON ({e})") from None
        if config.get("format") != FORMAT:
            raise ModelError(f"{folder}: model.json is not an imgtxt model")
        if config.get("version", 0) > FORMAT_VERSION:
            raise ModelError(f"{folder}: model format v{config['version']} is newer than this imgtxt (v{FORMAT_VERSION}); upgrade imgtxt")
        path = folder / "model.safetensors"
        try:
            tensors = load_file(str(path))
            vocab = Vocabulary.load(folder / "vocab.json")
        except (FileNotFoundError, SafetensorError, ValueError, KeyError, OSError) as e:
            raise ModelError(f"{folder}: unreadable model files ({e})") from None
        missing = [n for n in WEIGHT_NAMES if n not in tensors]
        if missing:
            raise ModelError(f"{path}: missing tensors {missing}")
        weights = {n: tensors[n].astype(np.float32) for n in WEIGHT_NAMES}
        joint = config["joint"]
        if weights["word_embedding"].shape[0] != len(vocab):
            raise ModelError(f"{folder}: vocab.json has {len(vocab)} words, the model {weights['word_embedding'].shape[0]}")
        if weights["image_projection"].shape != (joint["embed_dim"], joint["image_dim"]):
            raise ModelError(f"{path}: image projection shape does not match model.json")
        stats = FeatureStats(tensors["fne.mean"], tensors["fne.std"]) if "fne.mean" in tensors else None
        if config["features"]["kind"] == "fne" and stats is None:
            raise ModelError(f"{path}: an FNE model must carry its feature statistics")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
        model_id = f"{config.get('name', folder.name)}-{digest}"
        return cls(folder, config, vocab, weights, stats, model_id)

    # ------------------------------------------------------------------ properties
    @property
    def features(self) -> dict:
        return self.config["features"]

    @property
    def use_abs(self) -> bool:
        return bool(self.config["joint"]["use_abs"])

    @property
    def similarity_kind(self) -> str:
        return self.config["joint"]["similarity"]

    def caption_bank(self) -> list[str]:
        path = self.folder / "captions.txt"
        if not path.is_file():
            return []
        return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]

    # ------------------------------------------------------------------ encoders (numpy)
    def encode_text(self, texts: list[str], batch_size: int = 512) -> np.ndarray:
        """Captions -> joint-space vectors (N, D) float32, a numpy port of model.TextEncoder."""
        out = [self._encode_token_batch([self.vocab.encode(t) for t in texts[s:s + batch_size]])
               for s in range(0, len(texts), batch_size)]
        return np.concatenate(out) if out else np.zeros((0, self.config["joint"]["embed_dim"]), np.float32)

    def _encode_token_batch(self, token_lists: list[list[int]]) -> np.ndarray:
        w = self.weights
        seqs = [t if t else [1] for t in token_lists]
        lengths = np.array([len(t) for t in seqs])
        hidden_size = w["gru.weight_hh"].shape[1]
        h = np.zeros((len(seqs), hidden_size), np.float32)
        tokens = np.zeros((len(seqs), lengths.max()), np.int64)
        for i, t in enumerate(seqs):
            tokens[i, :len(t)] = t
        # Input-side gates for every step at once; only the recurrence is sequential.
        x_gates = w["word_embedding"][tokens] @ w["gru.weight_ih"].T + w["gru.bias_ih"]  # (B, T, 3H)
        w_hh_t, b_hh = w["gru.weight_hh"].T, w["gru.bias_hh"]
        for step in range(tokens.shape[1]):
            xr, xz, xn = np.split(x_gates[:, step], 3, axis=1)
            hr, hz, hn = np.split(h @ w_hh_t + b_hh, 3, axis=1)
            r, z = _sigmoid(xr + hr), _sigmoid(xz + hz)
            n = np.tanh(xn + r * hn)
            h_new = (1.0 - z) * n + z * h
            active = (step < lengths)[:, None]
            h = np.where(active, h_new, h)
        out = l2_normalize(h)
        return np.abs(out) if self.use_abs else out

    def image_features(self, raw: np.ndarray) -> np.ndarray:
        """Raw CNN features (N, D_raw) -> the model's input features (FNE int8 or baseline)."""
        if self.features["kind"] == "fne":
            return full_network_embedding(raw, self.stats)
        start, stop = self.features["baseline_slice"]
        return l2_normalize(np.asarray(raw)[:, start:stop])

    def encode_image_features(self, feats: np.ndarray) -> np.ndarray:
        out = l2_normalize(np.asarray(feats, dtype=np.float32) @ self.weights["image_projection"].T)
        return np.abs(out) if self.use_abs else out

    def encode_raw_images(self, raw: np.ndarray) -> np.ndarray:
        return self.encode_image_features(self.image_features(raw))

    def scores(self, images: np.ndarray, captions: np.ndarray) -> np.ndarray:
        """(N, D) x (M, D) -> (N, M), higher = better match."""
        if self.similarity_kind == "cosine":
            return images @ captions.T
        return order_scores(images, captions)


def order_scores(images: np.ndarray, captions: np.ndarray, chunk_elements: int = 1 << 24) -> np.ndarray:
    """-||max(0, c - i)||^2 for every pair, in blocks of images of at most `chunk_elements` differences
    (64 MB of float32), so 5,000 captions x 2,048 dims never build a (N, M, D) array."""
    out = np.empty((len(images), len(captions)), np.float32)
    chunk = max(1, chunk_elements // max(1, captions.shape[0] * captions.shape[1]))
    for s in range(0, len(images), chunk):
        diff = captions[None, :, :] - images[s:s + chunk, None, :]
        out[s:s + chunk] = -np.square(np.maximum(diff, 0)).sum(axis=2)
    return out
