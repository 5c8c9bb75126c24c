"""AMECON (Abstract Meta-Concepts; Chami, Tamaazousti and Le Borgne, ICMR 2017): text -> binary C-dim code,
image -> C sigmoid detectors, t2i by kNN.

Text (section 3.2): content words (lower case, alphanumeric, stop words removed) -> word vectors -> each word
switches on its m nearest of C k-means clusters of the vocabulary's word vectors ("local hard coding", eq. 1) ->
max-pooled over the caption (eq. 2): a binary C-vector.
Image (3.3): CNN features, max-pooled over regions (full image + 4 corners at 2/3 scale, eq. 7) -> an MLP (hidden
layers with ReLU and dropout) -> sigmoid, trained with sigmoid cross-entropy against each training caption's code
(eq. 3-6) by SGD (lr 1e-4, momentum 0.9, weight decay 5e-4, batch 512). Inputs are standardised with the training
images' statistics (not in the paper; without it the MLP did not leave the label prior, see train_image_mlp). Text-illustration (t2i) ranks images by Euclidean distance to the caption's code (kNN); i2t works by
the same distance but the paper reports it weak.
The paper's word2vec is not obtainable here; `word_vectors` offers PPMI+SVD vectors trained on the captions and
MiniLM's (wordpiece-averaged) input token embeddings, and README reports the measured comparison.
numpy only except `train_image_mlp` (torch).
"""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np

# A compact English stop-word list (NLTK's, whose corpus needs a download, minus nothing visual).
STOP_WORDS = frozenset("""a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further had has have having he
her here hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now
of off on once only or other our ours ourselves out over own same she should so some such than that the their
theirs them themselves then there these they this those through to too under until up very was we were what when
where which while who whom why will with would you your yours yourself yourselves s t""".split())
_NON_ALNUM = re.compile(r"[^a-z0-9 ]+")


def content_words(text: str) -> list[str]:
    return [w for w in _NON_ALNUM.sub(" ", text.lower()).split() if w not in STOP_WORDS]


# ------------------------------------------------------------------------------------------- word vectors

def ppmi_svd_vectors(captions: list[str], words: list[str], dim: int = 300, window: int = 4) -> np.ndarray:
    """Word vectors from the captions alone: positive PMI of co-occurrence within `window` content words, reduced by
    a truncated SVD (U * sqrt(S)), rows L2-normalised. words: the vocabulary (rows of the result)."""
    index = {w: i for i, w in enumerate(words)}
    counts = np.zeros((len(words), len(words)), np.float64)
    for c in captions:
        ids = [index[w] for w in content_words(c) if w in index]
        for p, a in enumerate(ids):
            for b in ids[p + 1:p + 1 + window]:
                counts[a, b] += 1
                counts[b, a] += 1
    row = counts.sum(axis=1, keepdims=True)
    col = counts.sum(axis=0, keepdims=True) ** 0.75          # context smoothing (Levy et al. 2015)
    # PMI = log P(w, c) / (P(w) P_a(c)) = log n_wc * sum_c n_c^a / (n_w * n_c^a)
    with np.errstate(divide="ignore", invalid="ignore"):
        pmi = np.log(counts * col.sum() / np.maximum(row * col, 1e-12))
    ppmi = np.nan_to_num(np.maximum(pmi, 0.0), posinf=0.0, neginf=0.0)
    u, s = randomized_svd(ppmi, min(dim, len(words)))
    vectors = u * np.sqrt(s)
    return (vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)).astype(np.float32)


def randomized_svd(a: np.ndarray, k: int, oversample: int = 10, power: int = 3, seed: int = 0):
    """Top-k left singular vectors and values of `a` (Halko et al. 2011): a full SVD of a 5,000-word PPMI
    matrix takes minutes on one core, this a few seconds."""
    rng = np.random.default_rng(seed)
    q = np.linalg.qr(a @ rng.normal(size=(a.shape[1], min(k + oversample, a.shape[1]))))[0]
    for _ in range(power):
        q = np.linalg.qr(a @ (a.T @ q))[0]
    u_small, s, _ = np.linalg.svd(q.T @ a, full_matrices=False)
    return (q @ u_small)[:, :k], s[:k]


def minilm_vectors(words: list[str], weights: str | Path | None = None) -> np.ndarray:
    """MiniLM's input token embeddings (384-d), averaged over a word's wordpieces, rows L2-normalised."""
    from imgtxt.model.text_encoders.minilm import load_tokenizer, read_pretrained

    tensors, tokenizer_json, _ = read_pretrained(weights)
    table = np.asarray(tensors["embeddings.word_embeddings.weight"], dtype=np.float32)
    tok = load_tokenizer(tokenizer_json, 32)
    out = np.stack([table[tok.encode(w, add_special_tokens=False).ids].mean(axis=0) for w in words])
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


# ------------------------------------------------------------------------------------------- meta-concepts

def kmeans(x: np.ndarray, k: int, iterations: int = 30, seed: int = 0) -> np.ndarray:
    """Lloyd's k-means with k-means++ seeding -> (k, d) centres. An emptied cluster is re-seeded at the point
    farthest from its centre."""
    rng = np.random.default_rng(seed)
    centres = [x[rng.integers(len(x))]]
    dist = np.square(x - centres[0]).sum(axis=1)
    for _ in range(1, k):
        centres.append(x[rng.choice(len(x), p=dist / dist.sum()) if dist.sum() > 0 else rng.integers(len(x))])
        dist = np.minimum(dist, np.square(x - centres[-1]).sum(axis=1))
    c = np.stack(centres)
    for _ in range(iterations):
        d = squared_distances(x, c)
        assign = d.argmin(axis=1)
        for j in range(k):
            members = x[assign == j]
            c[j] = members.mean(axis=0) if len(members) else x[d.min(axis=1).argmax()]
    return c.astype(np.float32)


def squared_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum((a * a).sum(1)[:, None] - 2 * a @ b.T + (b * b).sum(1)[None, :], 0)


def hard_codes(vectors: np.ndarray, centres: np.ndarray, m: int = 3) -> np.ndarray:
    """(V, d) word vectors -> (V, m) indexes of each word's m nearest meta-concepts (eq. 1)."""
    return np.argsort(squared_distances(vectors, centres), axis=1, kind="stable")[:, :m]


def text_codes(captions: list[str], word_index: dict[str, int], codes: np.ndarray, n_concepts: int) -> np.ndarray:
    """Captions -> (N, C) binary codes: the union (max pooling, eq. 2) of their known content words' codes."""
    out = np.zeros((len(captions), n_concepts), np.float32)
    for i, c in enumerate(captions):
        ids = [word_index[w] for w in content_words(c) if w in word_index]
        if ids:
            out[i, codes[ids].ravel()] = 1.0
    return out


# ------------------------------------------------------------------------------------------- image side

def region_boxes(height: int, width: int, scale: float = 2 / 3) -> list[tuple[int, int, int, int]]:
    """(top, left, bottom, right) of the full image and its 4 corners at `scale` of each side."""
    h, w = round(height * scale), round(width * scale)
    return [(0, 0, height, width), (0, 0, h, w), (0, width - w, h, width), (height - h, 0, height, w),
            (height - h, width - w, height, width)]


def region_crops(image: np.ndarray, scale: float = 2 / 3) -> list[np.ndarray]:
    return [image[t:b, l:r] for t, l, b, r in region_boxes(image.shape[0], image.shape[1], scale)]


def pool_regions(features: np.ndarray, regions: int = 5) -> np.ndarray:
    """(N * regions, D) features, regions of an image consecutive -> (N, D) max over its regions (eq. 7)."""
    return features.reshape(-1, regions, features.shape[1]).max(axis=1)


def mlp_forward(x: np.ndarray, tensors: dict) -> np.ndarray:
    """numpy twin of the image MLP: (N, D) -> (N, C) probabilities."""
    layers = sorted({k.split(".")[1] for k in tensors if k.startswith("mlp.")}, key=int)
    h = np.asarray(x, np.float32)
    if "mlp_in.mean" in tensors:
        h = (h - tensors["mlp_in.mean"]) / tensors["mlp_in.std"]
    for i, name in enumerate(layers):
        h = h @ tensors[f"mlp.{name}.weight"].T + tensors[f"mlp.{name}.bias"]
        h = np.maximum(h, 0) if i < len(layers) - 1 else 0.5 * (np.tanh(0.5 * h) + 1)
    return h.astype(np.float32)


def t2i_scores(image_probs: np.ndarray, text: np.ndarray) -> np.ndarray:
    """(N images, M captions) minus the squared Euclidean distance: higher = nearer (kNN ranking)."""
    return -squared_distances(image_probs.astype(np.float64), text.astype(np.float64))


# The paper's recipe (section 4, "Neural Networks"): Caffe's SGD, lr 1e-4, momentum 0.9, weight decay 5e-4, batch
# 512. "adam" is the variant the first imgtxt runs used (lr 1e-3, no weight decay).
OPTIMIZERS = {"sgd": {"lr": 1e-4, "momentum": 0.9, "weight_decay": 5e-4}, "adam": {"lr": 1e-3}}


def image_mlp_loss(logits, codes):
    """Eq. 5-6: the sigmoid cross-entropy between the MLP's raw scores and the captions' binary codes, summed over
    the C concepts and averaged over the samples, as eq. 6 writes it and Caffe's SigmoidCrossEntropyLoss computes
    it (normalised by the batch). Averaging over the concepts too would divide the gradient by C (1,000): with
    the paper's SGD at lr 1e-4 the loss then moved from 0.6995 to 0.6902 in 7 epochs on Flickr8k."""
    from torch.nn.functional import binary_cross_entropy_with_logits

    return binary_cross_entropy_with_logits(logits, codes, reduction="sum") / max(1, logits.shape[0])


def train_image_mlp(features: np.ndarray, labels: np.ndarray, image_of_label: np.ndarray, hidden=(4096, 4096),
                    dropout: float = 0.5, epochs: int = 5, lr: float | None = None, batch: int = 512, seed: int = 0,
                    log=print, optimizer: str = "sgd", state_path: Path | None = None,
                    stats: dict | None = None) -> dict[str, np.ndarray]:
    """Sigmoid cross-entropy MLP from image features to the codes of their captions (one pair per caption).
    optimizer: "sgd" (the paper's recipe, OPTIMIZERS) or "adam"; lr None = the recipe's.
    state_path: rewritten atomically after every epoch (weights, optimizer, both RNGs); a run that finds it
    continues after its last epoch, so a stopped run, or one given more epochs, goes on where it was and ends
    where an uninterrupted run would. `stats["epochs_run"]` gets the epochs this call trained.
    Returns the weights as numpy under the names mlp_forward reads."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    # Each input feature is standardised with the training images' statistics (stored, and applied by
    # mlp_forward). Without it the L2-normalised CNN features (~0.03 per dimension) left the MLP's output almost
    # independent of the image after 2 epochs on Flickr8k: it varied 16x less across images than across
    # concepts, and even train-image t2i recall was at chance.
    features = np.asarray(features, np.float32)
    mean, std = features.mean(axis=0), features.std(axis=0) + 1e-6
    features = (features - mean) / std
    dims = [features.shape[1], *hidden, labels.shape[1]]
    layers: list[nn.Module] = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            layers += [nn.ReLU(), nn.Dropout(dropout)]
    net = nn.Sequential(*layers)
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"AMECON optimizer must be one of {', '.join(OPTIMIZERS)}, not {optimizer!r}")
    recipe = {**OPTIMIZERS[optimizer], **({"lr": lr} if lr is not None else {})}
    opt = torch.optim.SGD(net.parameters(), **recipe) if optimizer == "sgd" else \
        torch.optim.Adam(net.parameters(), **recipe)
    feats, y = torch.from_numpy(np.asarray(features, np.float32)), torch.from_numpy(labels)
    rng = np.random.default_rng(seed)
    settings = {"dims": dims, "optimizer": optimizer, "recipe": recipe, "batch": batch, "seed": seed,
                "dropout": dropout, "pairs": len(labels)}
    start = _resume(state_path, settings, net, opt, rng, log) if state_path is not None else 0
    for epoch in range(start, epochs):
        net.train()
        order, total = rng.permutation(len(labels)), 0.0
        for s in range(0, len(order), batch):
            rows = order[s:s + batch]
            loss = image_mlp_loss(net(feats[image_of_label[rows]]), y[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(rows)
        log(f"AMECON image MLP epoch {epoch + 1}/{epochs}: loss {total / len(labels):.4f}")
        if state_path is not None:
            from .checkpoints import atomic_torch_save

            atomic_torch_save({"settings": settings, "net": net.state_dict(), "optimizer": opt.state_dict(),
                               "rng": rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
                               "epoch": epoch + 1}, state_path)
    if stats is not None:
        stats["epochs_run"] = max(epochs - start, 0)
    linear = [m for m in net if isinstance(m, nn.Linear)]
    out = {"mlp_in.mean": mean.astype(np.float32), "mlp_in.std": std.astype(np.float32)}
    for i, m in enumerate(linear):
        out[f"mlp.{i}.weight"] = m.weight.detach().numpy().copy()
        out[f"mlp.{i}.bias"] = m.bias.detach().numpy().copy()
    return out


def _resume(state_path: Path, settings: dict, net, opt, rng, log) -> int:
    """Load a saved training state into net, opt and rng; the epochs it had done (0 without one)."""
    import torch

    from .checkpoints import safe_load

    if not state_path.exists():
        return 0
    state = safe_load(state_path)
    if not isinstance(state, dict) or state.get("settings") != settings:
        raise ValueError(f"{state_path}: the training state of a run with other settings; use another --output "
                         f"or delete it to start over")
    net.load_state_dict(state["net"])
    opt.load_state_dict(state["optimizer"])
    rng.bit_generator.state = state["rng"]
    torch.set_rng_state(state["torch_rng"])
    log(f"AMECON image MLP: continuing after epoch {state['epoch']} ({state_path})")
    return int(state["epoch"])


# ------------------------------------------------------------------------------------------- model folder

def save(folder: Path, tensors: dict[str, np.ndarray], words: list[str], config: dict) -> None:
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(folder / "amecon.safetensors"))
    (folder / "amecon_words.json").write_text(json.dumps(words), encoding="utf-8")
    (folder / "model.json").write_text(json.dumps({"format": "imgtxt-model", "version": 1, "model": "amecon",
                                                   **config}, indent=2), encoding="utf-8")


class AmeconModel:
    def __init__(self, folder: Path):
        from safetensors.numpy import load_file

        self.folder = Path(folder)
        self.config = json.loads((self.folder / "model.json").read_text(encoding="utf-8"))
        self.tensors = load_file(str(self.folder / "amecon.safetensors"))
        words = json.loads((self.folder / "amecon_words.json").read_text(encoding="utf-8"))
        self.word_index = {w: i for i, w in enumerate(words)}

    @staticmethod
    def is_amecon(folder: Path) -> bool:
        try:
            return json.loads((Path(folder) / "model.json").read_text(encoding="utf-8")).get("model") == "amecon"
        except (OSError, ValueError):
            return False

    def encode_text(self, captions: list[str]) -> np.ndarray:
        codes = self.tensors["codes"].astype(np.int64)
        return text_codes(captions, self.word_index, codes, int(self.config["concepts"]))

    def encode_images(self, features: np.ndarray) -> np.ndarray:
        return mlp_forward(features, {k: v for k, v in self.tensors.items() if k.startswith(("mlp.", "mlp_in."))})


def vocabulary(captions: list[str], min_count: int = 1) -> list[str]:
    counts = Counter(w for c in captions for w in content_words(c))
    return sorted((w for w, n in counts.items() if n >= min_count), key=lambda w: (-counts[w], w))
