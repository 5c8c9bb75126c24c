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
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import ImgtxtError
from .fne import FeatureStats, full_network_embedding, l2_normalize
from .vocab import Vocabulary

FORMAT, FORMAT_VERSION = "imgtxt-model", 1
WEIGHT_NAMES = ("word_embedding", "gru.weight_ih", "gru.weight_hh", "gru.bias_ih", "gru.bias_hh", "image_projection")
# backbones.BACKBONES, repeated so that loading a model never imports torch (a test keeps them equal)
BACKBONE_NAMES = ("efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2", "vgg16", "resnet50", "resnet152")
_INT, _STR, _BOOL = (int,), (str,), (bool,)
CONFIG_SCHEMA = {   # section -> key -> accepted types; checked at load so a bad file fails in one line, at once
    "joint": {"embed_dim": _INT, "image_dim": _INT, "word_dim": _INT, "similarity": _STR, "use_abs": _BOOL},
    "features": {"kind": _STR, "backbone": _STR, "backbone_id": _STR, "layer_set": _STR, "crops": _INT,
                 "precision": _STR, "raw_dim": _INT, "baseline_slice": (list,)},
}


def safe_name(name: str) -> str:
    """A model name as it may appear in a file name: no separators, no leading dots, nothing odd."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip(".")[:64] or "model"


def check_config(config, where: Path) -> None:
    """model.json's structure and values, before anything is computed from them."""
    if not isinstance(config, dict):
        raise ModelError(f"{where}: model.json must hold an object")
    for section, keys in CONFIG_SCHEMA.items():
        if not isinstance(config.get(section), dict):
            raise ModelError(f"{where}: model.json lacks the {section!r} section")
        for key, types in keys.items():
            value = config[section].get(key)
            if key not in config[section]:
                raise ModelError(f"{where}: model.json lacks {section}.{key}")
            if not isinstance(value, types) or (types is _INT and isinstance(value, bool)):
                raise ModelError(f"{where}: model.json {section}.{key} has the wrong type ({value!r})")
    joint, features = config["joint"], config["features"]
    if joint["similarity"] not in ("cosine", "order"):
        raise ModelError(f"{where}: model.json joint.similarity must be cosine or order, not {joint['similarity']!r}")
    if min(joint["embed_dim"], joint["image_dim"], joint["word_dim"], features["raw_dim"], features["crops"]) < 1:
        raise ModelError(f"{where}: model.json has a size below 1")
    if features["kind"] not in ("fne", "baseline"):
        raise ModelError(f"{where}: model.json features.kind must be fne or baseline, not {features['kind']!r}")
    if features["backbone"] not in BACKBONE_NAMES:
        raise ModelError(f"{where}: unknown backbone {features['backbone']!r} in model.json; known: "
                         f"{', '.join(BACKBONE_NAMES)}")
    if "@" not in features["backbone_id"]:
        raise ModelError(f"{where}: model.json features.backbone_id must be NAME@WEIGHTS")
    start_stop = features["baseline_slice"]
    if len(start_stop) != 2 or not all(isinstance(v, int) for v in start_stop) or \
            not 0 <= start_stop[0] < start_stop[1] <= features["raw_dim"]:
        raise ModelError(f"{where}: model.json features.baseline_slice must be [start, stop] within raw_dim")
    expected = features["raw_dim"] if features["kind"] == "fne" else start_stop[1] - start_stop[0]
    if joint["image_dim"] != expected:
        raise ModelError(f"{where}: model.json joint.image_dim {joint['image_dim']} does not match its features "
                         f"({expected})")
    if not isinstance(config.get("name", ""), str):
        raise ModelError(f"{where}: model.json name must be a string")


def check_shapes(tensors: dict, joint: dict, vocab_size: int, raw_dim: int, path: Path) -> None:
    """Every weight's shape against model.json, at load: not after half a minute of CNN work."""
    h, w = joint["embed_dim"], joint["word_dim"]
    expected = {"word_embedding": (vocab_size, w), "gru.weight_ih": (3 * h, w), "gru.weight_hh": (3 * h, h),
                "gru.bias_ih": (3 * h,), "gru.bias_hh": (3 * h,), "image_projection": (h, joint["image_dim"]),
                "fne.mean": (raw_dim,), "fne.std": (raw_dim,)}
    for name, shape in expected.items():
        if name in tensors and tuple(tensors[name].shape) != shape:
            raise ModelError(f"{path}: tensor {name} has shape {tuple(tensors[name].shape)}, model.json and "
                             f"vocab.json say {shape}")


class ModelError(ImgtxtError):
    """A model folder that is missing, incomplete, or not an imgtxt model."""


def default_model_dir() -> Path:
    from .paths import default_model_dir as packaged

    return packaged()


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


# CNNs already loaded in this process, by model id: loading the same model folder twice (tests, a server)
# should not pay for the CNN twice.
_LOADED_CNNS: dict[str, object] = {}


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
    # The CNN part (pipeline.ImageEmbedder, torch): loaded on first use, so text-only work never imports torch.
    _cnn: object = field(default=None, init=False, repr=False, compare=False)
    on_cnn_load: object = field(default=None, repr=False, compare=False)  # called before the slow first load

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(cls, folder: Path | str | None = None) -> "TrainedModel":
        from safetensors import SafetensorError
        from safetensors.numpy import load_file

        from .paths import model_dir

        folder = model_dir(folder)  # --model, else $IMGTXT_MODEL, else the packaged default
        if not folder.is_dir():
            raise ModelError(f"{folder}: no such model folder")
        try:
            config = json.loads((folder / "model.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ModelError(f"{folder}: no model.json (not an imgtxt model folder)") from None
        except json.JSONDecodeError as e:
            raise ModelError(f"{folder / 'model.json'}: not valid JSON ({e})") from None
        if not isinstance(config, dict) or config.get("format") != FORMAT:
            raise ModelError(f"{folder}: model.json is not an imgtxt model")
        if not isinstance(config.get("version", 0), int) or config.get("version", 0) > FORMAT_VERSION:
            raise ModelError(f"{folder}: model format v{config['version']} is newer than this imgtxt (v{FORMAT_VERSION}); upgrade imgtxt")
        path = folder / "model.safetensors"
        try:
            tensors = load_file(str(path))
            vocab = Vocabulary.load(folder / "vocab.json")
        except (FileNotFoundError, SafetensorError, ValueError, KeyError, OSError) as e:
            raise ModelError(f"{folder}: unreadable model files ({e})") from None
        check_config(config, folder)
        missing = [n for n in WEIGHT_NAMES if n not in tensors]
        if missing:
            raise ModelError(f"{path}: missing tensors {missing}")
        check_shapes(tensors, config["joint"], len(vocab), config["features"]["raw_dim"], path)
        weights = {n: tensors[n].astype(np.float32) for n in WEIGHT_NAMES}
        stats = FeatureStats(tensors["fne.mean"], tensors["fne.std"]) if "fne.mean" in tensors else None
        if config["features"]["kind"] == "fne" and stats is None:
            raise ModelError(f"{path}: an FNE model must carry its feature statistics")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
        model_id = f"{safe_name(config.get('name') or folder.name)}-{digest}"
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

    # ------------------------------------------------------------------ image side (CNN, loaded lazily)
    def image_embedder(self):
        """The model's CNN with its feature settings (seconds to load; once per model object)."""
        if self._cnn is None:
            self._cnn = _LOADED_CNNS.get(self.model_id)
        if self._cnn is None:
            from .pipeline import ImageEmbedder

            if self.on_cnn_load is not None:
                self.on_cnn_load()
            self._cnn = _LOADED_CNNS[self.model_id] = ImageEmbedder(self)
        return self._cnn

    def embed_images(self, squares: np.ndarray) -> np.ndarray:
        """(B, R, R, 3) uint8 squares of side `image_embedder().resize_size` -> joint vectors (B, D)."""
        return self.image_embedder().embed(squares)

    def embed_photo(self, path: Path | str) -> np.ndarray:
        """One photo file -> its joint vector (D,). Raises ImageError for a file that is not a usable photo."""
        from .images import load_square, register_heif

        register_heif()
        size = self.image_embedder().resize_size
        return self.embed_images(load_square(path, size)[None].copy())[0]  # writable for torch

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


def order_scores(images: np.ndarray, captions: np.ndarray, chunk: int = 64) -> np.ndarray:
    """-||max(0, c - i)||^2 for every pair, in chunks of images to bound memory."""
    out = np.empty((len(images), len(captions)), np.float32)
    for s in range(0, len(images), chunk):
        diff = captions[None, :, :] - images[s:s + chunk, None, :]
        out[s:s + chunk] = -np.square(np.maximum(diff, 0)).sum(axis=2)
    return out
