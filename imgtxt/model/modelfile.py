"""The trained-model format and its torch-free runtime.

A model is a folder:
  model.json         config: joint space, text encoder ("text": {"kind": ...}), image-feature settings (backbone,
                     layer set, crops), training record, the weights' sha256 and the photo settings' (the
                     model id: model_id.py)
  model.safetensors  weights (fp16, or int8 with per-row fp32 scales "NAME.scale") and the FNE training-set
                     mean/std (fp32); no pickle
  vocab.json | tokenizer.json   the text encoder's vocabulary (GRU) or tokenizer (MiniLM)
  captions.txt       the caption bank for `imgtxt caption` (the training captions, one per line)

`TrainedModel` loads it with numpy only, lazily: tensors are read from the memory-mapped file when first used, so a
search never touches the image projection, and encodes text with the kind's numpy runtime (imgtxt/text_encoders,
tested equal to the torch modules), so `imgtxt search` never imports torch.
"""
from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from imgtxt.errors import ImgtxtError, ModelError  # noqa: F401  (ModelError: imported from here too)

from . import concepts, search_tuning, text_encoders
from . import model_id as identity
from .query_cache import QueryVectors
from .text_encoders.head import Weight
from .calibration import Calibration
from .fne import FeatureStats, full_network_embedding, l2_normalize

# The checks of model.json and the weights live in model_config; importable from here too.
from .model_config import (  # noqa: F401
    BACKBONE_NAMES,
    CONFIG_SCHEMA,
    check_config,
    check_shapes,
    read_config,
    remember_weights,
    safe_name,
    verify_weights,
)
from .tensor_file import LazyTensors, quantize_rows  # noqa: F401  (quantize_rows: imported from here too)

FORMAT, FORMAT_VERSION = "imgtxt-model", 1
IMAGE_PROJECTION = "image_projection"


def image_tensor_names(joint: dict) -> list[str]:
    """The image side's tensors: the map, and the thesis's hidden layer / an affine map's bias when configured."""
    names = [IMAGE_PROJECTION]
    if joint.get("image_hidden"):
        names += ["image_hidden.weight", "image_hidden.bias"]
    if joint.get("image_bias"):
        names.append("image_bias")
    return names


def default_model_dir() -> Path:
    from imgtxt.paths import default_model_dir as packaged

    return packaged()


def save_model(folder: Path | str, weights: dict[str, np.ndarray], vocab, config: dict,
               stats: FeatureStats | None, captions: list[str], files: dict[str, bytes] | None = None,
               int8: tuple[str, ...] = (), extra: dict[str, np.ndarray] | None = None) -> None:
    """Write a model folder. `config` holds "joint", "features", optionally "text" (default: the GRU described by
    "joint"), "training"/"metrics". `vocab`: the GRU's Vocabulary (or None when `files` carries the text encoder's
    files). Tensors named in `int8` are stored int8 with per-row scales, the other weights fp16; `extra` holds
    further tensors (fp16) that model.json's other sections name, e.g. the ConSE bridge's."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names = text_encoders.tensor_names(text_encoders.text_config_of(config)) + image_tensor_names(config["joint"])
    tensors = {}
    for name in names:
        if name in int8:
            tensors[name], tensors[name + ".scale"] = quantize_rows(weights[name])
        else:
            tensors[name] = np.ascontiguousarray(weights[name], dtype=np.float16)
    for name, value in (extra or {}).items():
        tensors[name] = np.ascontiguousarray(value, dtype=np.float16)
    if stats is not None:
        tensors["fne.mean"] = np.ascontiguousarray(stats.mean, dtype=np.float32)
        tensors["fne.std"] = np.ascontiguousarray(stats.std, dtype=np.float32)
    save_file(tensors, str(folder / "model.safetensors"))
    if vocab is not None:
        vocab.save(folder / "vocab.json")
    for name, data in (files or {}).items():
        (folder / name).write_bytes(data)
    (folder / "captions.txt").write_text("\n".join(c.replace("\n", " ") for c in captions) + "\n", encoding="utf-8")
    digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    remember_weights(folder / "model.safetensors", digest)
    doc = {"format": FORMAT, "version": FORMAT_VERSION, **config, "weights_sha256": digest,
           identity.RECORD_KEY: identity.photo_settings_record(config)}   # the settings these weights go with
    (folder / "model.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")


# CNNs already loaded in this process, by model id: loading the same model folder twice (tests, a server)
# should not pay for the CNN twice.
_LOADED_CNNS: dict[str, object] = {}
_CNN_LOAD = threading.Lock()  # server threads asking for the CNN at once load it once


@dataclass
class TrainedModel:
    folder: Path
    config: dict
    tensors: LazyTensors
    stats: FeatureStats | None
    model_id: str
    _text: object = field(default=None, repr=False)
    # The CNN part (cnn_torch.ImageEmbedder, torch): loaded on first use, so text-only work never imports torch.
    _cnn: object = field(default=None, init=False, repr=False, compare=False)
    on_cnn_load: object = field(default=None, repr=False, compare=False)  # called before the slow first load

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(cls, folder: Path | str | None = None) -> "TrainedModel":
        from safetensors import SafetensorError

        from imgtxt.paths import model_dir

        folder = model_dir(folder)  # --model, else $IMGTXT_MODEL, else the packaged default
        if not folder.is_dir():
            raise ModelError(f"{folder}: no such model folder")
        config = read_config(folder)
        if not isinstance(config, dict) or config.get("format") != FORMAT:
            raise ModelError(f"{folder}: model.json is not an imgtxt model")
        if config.get("model") == "amecon":
            raise ModelError(f"{folder} is an AMECON model (text-illustration by kNN over meta-concept codes): "
                             f"it is evaluated with `imgtxt eval` only; index/search/caption need a joint-space model")
        if not isinstance(config.get("version", 0), int) or config.get("version", 0) > FORMAT_VERSION:
            raise ModelError(f"{folder}: model format v{config['version']} is newer than this imgtxt (v{FORMAT_VERSION}); upgrade imgtxt")
        path = folder / "model.safetensors"
        try:
            tensors = LazyTensors(path)
        except (FileNotFoundError, SafetensorError, ValueError, KeyError, OSError) as e:
            raise ModelError(f"{folder}: unreadable model files ({e})") from None
        check_config(config, folder)
        Calibration.from_config(config.get("calibration"), folder)   # a bad section fails at load, in one line
        reason = search_tuning.check_config(config["search"]) if "search" in config else None
        if reason is None and "query_gate" in config.get("search", {}) and "concepts" not in config:
            reason = "search.query_gate needs a ConSE bridge (concepts)"
        if reason is None and "hubness" in config.get("search", {}) and config["joint"].get("similarity") != "cosine":
            reason = "search.hubness needs a cosine joint space (an offset is not an order-embedding score)"
        if reason:
            raise ModelError(f"{folder}: model.json: {reason}")
        try:
            text_config = text_encoders.text_config_of(config)
            names = text_encoders.tensor_names(text_config)
        except (ValueError, KeyError, TypeError) as e:
            raise ModelError(f"{folder}: model.json has an unusable text encoder section ({e})") from None
        missing = [n for n in names + image_tensor_names(config["joint"]) if n not in tensors]
        if missing:
            raise ModelError(f"{path}: missing tensors {missing}")
        check_shapes(tensors, config, path)
        stats = FeatureStats(tensors["fne.mean"], tensors["fne.std"]) if "fne.mean" in tensors else None
        if config["features"]["kind"] == "fne" and stats is None:
            raise ModelError(f"{path}: an FNE model must carry its feature statistics")
        # Recorded at save and checked against the file (hashed once per change of it): weights swapped under an
        # unchanged model.json must not pass as the model whose id (and caption cache) they would take.
        digest = verify_weights(path, config.get("weights_sha256"))
        model = cls(folder, config, tensors, stats,
                    identity.model_id(config, safe_name(config.get("name") or folder.name), digest))
        tokenizer = folder / "tokenizer.json"
        if text_config["kind"] == "minilm" and not (tokenizer.is_file() and tokenizer.stat().st_size > 0):
            raise ModelError(f"{folder}: no tokenizer.json (or an empty one) for its {text_config['kind']} text "
                             f"encoder")
        if text_config["kind"] != "minilm":
            model.text  # the vocabulary is small: check it against the weights now  # noqa: B018
        return model

    @property
    def text(self):
        """The numpy text encoder of this model's kind, built on first use."""
        if self._text is None:
            try:
                self._text = text_encoders.runtime(text_encoders.text_config_of(self.config), self.tensors, self.folder)
            except (FileNotFoundError, ValueError, KeyError, OSError) as e:
                raise ModelError(f"{self.folder}: unreadable text encoder ({e})") from None
        return self._text

    @property
    def vocab(self):
        """The GRU's vocabulary (GRU models only)."""
        return self.text.vocab

    @cached_property
    def concepts(self) -> concepts.ConceptBridge | None:
        """The ConSE bridge appended to the joint vectors (model.json "concepts"), or None."""
        return concepts.ConceptBridge(self.config["concepts"], self.tensors) if "concepts" in self.config else None

    @property
    def content_dim(self) -> int:
        """Width of what the encoders say: the joint space, plus the ConSE part."""
        return self.config["joint"]["embed_dim"] + (self.concepts.dim if self.concepts else 0)

    @property
    def hubness(self) -> dict | None:
        return self.config.get("search", {}).get("hubness")

    @property
    def vector_dim(self) -> int:
        """Width of the photo and text vectors: content_dim, plus the hubness coordinate (search_tuning)."""
        return self.content_dim + (1 if self.hubness else 0)

    def caption_bank_vectors(self, stride: int = 1) -> np.ndarray:
        """(bank / stride, content_dim) every stride-th caption's vector: stored with the model, else embedded."""
        from .caption_bank import read_caption_vectors

        bank = self.caption_bank()
        if not bank:
            raise ModelError(f"{self.folder}: search.hubness needs the caption bank (captions.txt)")
        stored = read_caption_vectors(self, bank, stride=stride)
        vectors = stored if stored is not None else self.encode_text(bank[::stride], batch_size=128)
        return np.ascontiguousarray(vectors[:, :self.content_dim], np.float32)

    @cached_property
    def hubness_bank(self) -> np.ndarray:
        """The caption vectors the photo offsets are measured against (search_tuning)."""
        return self.caption_bank_vectors(self.hubness.get("bank_stride", 1) if self.hubness else 1)

    def caption_hubness(self, bank_size: int, notices: list[str] | None = None):
        """The captions' hubness correction (caption_offsets.py), or None. bank_size: the caption bank's length
        (its stored offsets are checked against it)."""
        from . import caption_offsets

        return caption_offsets.load(self, bank_size, notices)

    @cached_property
    def image_projection(self):
        """(embed_dim, image_dim) as x @ W.T, int8 rows cast per use: a float32 copy held 110-330 MB of an index run."""
        return Weight(self.tensors, IMAGE_PROJECTION, keep=False)

    # ------------------------------------------------------------------ properties
    @property
    def features(self) -> dict:
        return self.config["features"]

    @property
    def use_abs(self) -> bool:
        return bool(self.config["joint"]["use_abs"])

    @cached_property
    def calibration(self) -> Calibration | None:
        """score -> confidence and level (None: the model was never calibrated; its results carry neither)."""
        return Calibration.from_config(self.config.get("calibration"), self.folder)

    @property
    def similarity_kind(self) -> str:
        return self.config["joint"]["similarity"]

    def caption_bank(self) -> list[str]:
        path = self.folder / "captions.txt"
        if not path.is_file():
            return []
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise ModelError(f"{path}: the caption bank must be UTF-8 text (byte {e.start} is not)") from None
        except OSError as e:
            raise ModelError(f"{path}: cannot read the caption bank ({e.strerror or e})") from None
        return [line for line in text.splitlines() if line.strip()]

    # ------------------------------------------------------------------ image side (CNN, loaded lazily)
    def image_embedder(self, threads: int | None = None):
        """The model's CNN with its feature settings (seconds to load; once per model object): the exported
        ONNX graph on OpenVINO / ONNX Runtime when possible (no torch imported), else the torch CNN."""
        if self._cnn is not None:
            return self._cnn
        with _CNN_LOAD:
            self._cnn = _LOADED_CNNS.get(self.model_id)
            if self._cnn is None:
                from .cnn_runtime import onnx_embedder

                if self.on_cnn_load is not None:
                    self.on_cnn_load()
                embedder = onnx_embedder(self, threads)
                if embedder is None:
                    from .cnn_torch import ImageEmbedder, check_torch

                    check_torch(self.folder)
                    embedder = ImageEmbedder(self)
                self._cnn = _LOADED_CNNS[self.model_id] = embedder
        return self._cnn

    def embed_images(self, squares: np.ndarray) -> np.ndarray:
        """(B, R, R, 3) uint8 squares of side `image_embedder().resize_size` -> joint vectors (B, D)."""
        return self.image_embedder().embed(squares)

    def embed_photo(self, path: Path | str) -> np.ndarray:
        """One photo file -> its joint vector (D,). Raises ImageError for a file that is not a usable photo."""
        from .images import ImageError, load_square, register_heif

        register_heif()
        size = self.image_embedder().resize_size
        try:
            square = load_square(path, size)
        except ImageError as e:  # the reason alone ("not an image Pillow can read") would not say which file
            raise ImageError(f"{path}: {e}") from None
        return self.embed_images(square[None].copy())[0]  # writable for torch

    # ------------------------------------------------------------------ encoders (numpy)
    def check_query(self, text: str) -> str | None:
        """A one-line reason when this text cannot be a query (empty, no known word), else None."""
        return self.text.check_query(text)

    def encode_text(self, texts: list[str], batch_size: int = 512, progress=None, bridge=None) -> np.ndarray:
        """Captions -> vectors (N, vector_dim) float32 with the text encoder's numpy runtime: the joint part,
        then the sentence vector for the ConSE part when the model has one. Batches hold captions of similar
        length (padding is wasted work); progress(done) after each batch. `bridge`: a ConSE bridge to encode
        for instead of the model's own (add-concepts scores a new bridge on a model that may have none)."""
        text, h = self.text, self.config["joint"]["embed_dim"]
        bridge = self.concepts if bridge is None else bridge
        content_dim = h + (bridge.dim if bridge is not None else 0)
        order = np.argsort([text.sort_key(t) for t in texts], kind="stable") if len(texts) > batch_size \
            else np.arange(len(texts))
        out = np.empty((len(texts), content_dim + (1 if self.hubness else 0)), np.float32)
        for s in range(0, len(texts), batch_size):
            rows = order[s:s + batch_size]
            tokens = [text.tokenize(texts[i]) for i in rows]
            if bridge is None:
                out[rows, :h] = text.encode(tokens)
            else:
                joint, sentence = text.encode_with_sentence(tokens)
                out[rows, :h], out[rows, h:content_dim] = joint, bridge.text_part(sentence)
            if progress is not None:
                progress(min(s + batch_size, len(texts)))
        if self.use_abs:
            out[:, :h] = np.abs(out[:, :h])
        if self.hubness:
            out[:, -1] = 1.0
        return out

    @cached_property
    def encode_query(self) -> QueryVectors:
        """Search queries -> vectors: encode_text, with the query gate (search_tuning) on the ConSE part; the
        last few queries' vectors are kept (query_cache.py)."""
        return QueryVectors(self._encode_query)

    def _encode_query(self, texts: list[str]) -> np.ndarray:
        return search_tuning.gate_queries(self, self.encode_text(texts))

    def image_features(self, raw: np.ndarray) -> np.ndarray:
        """Raw CNN features (N, D_raw) -> the model's input features (FNE int8 or baseline)."""
        if self.features["kind"] == "fne":
            return full_network_embedding(raw, self.stats)
        start, stop = self.features["baseline_slice"]
        return l2_normalize(np.asarray(raw)[:, start:stop])

    def encode_image_features(self, feats: np.ndarray) -> np.ndarray:
        x = np.asarray(feats, dtype=np.float32)
        joint = self.config["joint"]
        if joint.get("image_hidden"):   # the thesis's image MLP: ReLU hidden layer, then the map
            x = np.maximum(x @ np.asarray(self.tensors["image_hidden.weight"], np.float32).T
                           + np.asarray(self.tensors["image_hidden.bias"], np.float32), 0)
        x = self.image_projection(x)
        if joint.get("image_bias"):
            x = x + np.asarray(self.tensors["image_bias"], np.float32)
        out = l2_normalize(x)
        return np.abs(out) if self.use_abs else out

    def encode_raw_images(self, raw: np.ndarray) -> np.ndarray:
        """Raw CNN features -> photo vectors (N, vector_dim): the joint part, then the ConSE part."""
        vectors = self.encode_image_features(self.image_features(raw))
        if self.concepts is not None:
            vectors = np.hstack([vectors, self.concepts.photo_part(raw)])
        if self.hubness:
            offsets = search_tuning.photo_offsets(vectors, self.hubness_bank, self.hubness["top_k"])
            hub = self.hubness
            vectors = np.hstack([vectors, -hub["weight"] * (offsets[:, None] - hub.get("center", 0.0))])
        return vectors.astype(np.float32)

    def scores(self, images: np.ndarray, captions: np.ndarray) -> np.ndarray:
        """(N, D) x (M, D) -> (N, M), higher = better match (with a ConSE part: joint cosine + ConSE score)."""
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

