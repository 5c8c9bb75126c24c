"""Recurrent Capsule Network text encoder (Francis, Huet and Merialdo, "Embedding Images and Sentences in a Common
Space with a Recurrent Capsule Network", CBMI 2018, section III), numpy forward for queries.

N_c capsules, each a mask GRU (its candidate uses a sigmoid instead of tanh, so masks are positive) and an
embedding GRU. Masks start at 1; for t = 1 .. r+1:
    v_i(t)  = GRU_emb_i(m_i(t-1) * x)                                   (5)
    mt_i(t) = GRU_mask_i(m_i(t-1) * x)                                  (6)
    m_i(t)  = sum_j alpha_ij(t) mt_j(t),  alpha_ij = <v_i|v_j> / sum_k <v_i|v_k>         (7, 9)
    v(t)    = sum_ij beta_ij(t) v_i(t),   beta_ij  = <v_i|v_j> / sum_kl <v_k|v_l>         (8, 10)
The sentence vector is v(r+1) (the paper keeps v(5) with r = 4), L2-normalised. A GRU is the special case
N_c = 1, r = 0. A GRU's output is its last hidden state at the sentence's length.
The routing denominators are sums of dot products and could cross zero; they are kept away from it by
ROUTING_EPS (same sign), a guard the paper does not mention.
The GRUs are torch's (nn.GRU's gate layout), which differs from the paper's eq. 1-4 in two ways: the candidate is
tanh(W x + b + r o (U h + b')) where eq. 3 has tanh(W x + U (r o h) + b), and h = (1 - z) o h~ + z o h where eq. 4
has h = (1 - z) o h + z o h~ (the same family with z relabelled 1 - z; the reset placement is a different function).

Tensors (the model-file contract, shared with research/text_modules/rcn.py), capsules stacked on the first axis:
  rcn.word_embedding (vocab, V);  rcn.mask.{weight_ih (N_c, 3V, V), weight_hh (N_c, 3V, V), bias_ih, bias_hh (N_c, 3V)}
  rcn.emb.{weight_ih (N_c, 3H, V), weight_hh (N_c, 3H, H), bias_ih, bias_hh (N_c, 3H)}   gate order r, z, n as torch.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from . import TextSetup, positive_int

SETTINGS = {"recursions": (positive_int, "an integer of at least 1")}   # checked when the model loads

ROUTING_EPS = 1e-6
MAX_WORDS = 16          # paper: sentences are cut after the 16th word
NAMES = ("rcn.word_embedding",
         "rcn.mask.weight_ih", "rcn.mask.weight_hh", "rcn.mask.bias_ih", "rcn.mask.bias_hh",
         "rcn.emb.weight_ih", "rcn.emb.weight_hh", "rcn.emb.bias_ih", "rcn.emb.bias_hh")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1.0)


def gru_scan(x: np.ndarray, lengths: np.ndarray, w_ih, w_hh, b_ih, b_hh, candidate: str) -> np.ndarray:
    """Capsule-parallel GRU. x (C, B, T, I); weights (C, 3H, I), (C, 3H, H), (C, 3H) -> last states (C, B, H)."""
    c, b, t, _ = x.shape
    hidden = w_hh.shape[2]
    # One batched matmul per capsule (BLAS); np.einsum would run this contraction without BLAS.
    gates_x = (x.reshape(c, b * t, -1) @ np.transpose(w_ih, (0, 2, 1))).reshape(c, b, t, -1) + b_ih[:, None, None, :]
    act = np.tanh if candidate == "tanh" else _sigmoid
    h = np.zeros((c, b, hidden), np.float32)
    w_hh_t = np.transpose(w_hh, (0, 2, 1))
    for step in range(t):
        xr, xz, xn = np.split(gates_x[:, :, step], 3, axis=2)
        hr, hz, hn = np.split(h @ w_hh_t + b_hh[:, None, :], 3, axis=2)
        r, z = _sigmoid(xr + hr), _sigmoid(xz + hz)
        h_new = (1.0 - z) * act(xn + r * hn) + z * h
        h = np.where((step < lengths)[None, :, None], h_new, h)
    return h


def _safe(den: np.ndarray) -> np.ndarray:
    return np.where(np.abs(den) < ROUTING_EPS, np.where(den < 0, -ROUTING_EPS, ROUTING_EPS), den)


def route(v: np.ndarray):
    """v (C, B, H) capsule embeddings -> alpha (B, C, C), the combined embedding (B, H). Eq. 8-10."""
    gram = np.einsum("cbh,dbh->bcd", v, v)                        # <v_i|v_j>
    alpha = gram / _safe(gram.sum(axis=2, keepdims=True))
    beta = gram / _safe(gram.sum(axis=(1, 2), keepdims=True))
    combined = np.einsum("bc,cbh->bh", beta.sum(axis=2), v)       # sum_i (sum_j beta_ij) v_i
    return alpha, combined


def update_masks(alpha: np.ndarray, proposals: np.ndarray) -> np.ndarray:
    """Eq. 7: m_i = sum_j alpha_ij mt_j. alpha (B, C, C) with alpha[b, i, j] = alpha_ij, proposals (C, B, V)."""
    return np.einsum("bij,jbv->ibv", alpha, proposals)


def rcn_forward(tokens: np.ndarray, lengths: np.ndarray, w: dict, recursions: int) -> tuple[np.ndarray, np.ndarray]:
    """tokens (B, T) ids, lengths (B,) -> (sentence vectors (B, H) not normalised, final masks (C, B, V))."""
    x = w["rcn.word_embedding"][tokens]                           # (B, T, V)
    n_caps = w["rcn.emb.weight_ih"].shape[0]
    masks = np.ones((n_caps, x.shape[0], x.shape[2]), np.float32)  # m(0) = 1
    for t in range(recursions + 1):
        inputs = masks[:, :, None, :] * x[None]                   # m_i(t-1) o x
        v = gru_scan(inputs, lengths, w["rcn.emb.weight_ih"], w["rcn.emb.weight_hh"], w["rcn.emb.bias_ih"],
                     w["rcn.emb.bias_hh"], "tanh")
        alpha, combined = route(v)
        if t < recursions:
            proposals = gru_scan(inputs, lengths, w["rcn.mask.weight_ih"], w["rcn.mask.weight_hh"],
                                 w["rcn.mask.bias_ih"], w["rcn.mask.bias_hh"], "sigmoid")
            masks = update_masks(alpha, proposals)
    return combined, masks


def mask_variance_penalty(masks: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Eq. 14 per sentence: ( sum_i ||m_i - mean||^2 / (N_c ||mean||^2) * min_i ||m_i|| )^-1. masks (C, B, V)."""
    mean = masks.mean(axis=0)
    spread = np.square(masks - mean).sum(axis=2).sum(axis=0) / (masks.shape[0] * np.square(mean).sum(axis=1) + eps)
    return 1.0 / (spread * np.linalg.norm(masks, axis=2).min(axis=0) + eps)


def pad(token_lists: list[list[int]], max_words: int = MAX_WORDS) -> tuple[np.ndarray, np.ndarray]:
    seqs = [(t if t else [1])[:max_words] for t in token_lists]
    lengths = np.array([len(t) for t in seqs])
    tokens = np.zeros((len(seqs), lengths.max()), np.int64)
    for i, t in enumerate(seqs):
        tokens[i, :len(t)] = t
    return tokens, lengths


def encode(token_lists: list[list[int]], w: dict, recursions: int) -> np.ndarray:
    tokens, lengths = pad(token_lists)
    v, _ = rcn_forward(tokens, lengths, w, recursions)
    return (v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)).astype(np.float32)


def parameter_count(vocab: int, word_dim: int, hidden: int, capsules: int) -> int:
    """Parameters of an RCN text encoder (for the equal-size GRU comparison of the paper's Fig. 4)."""
    gru = lambda i, h: 3 * h * i + 3 * h * h + 6 * h  # noqa: E731
    return vocab * word_dim + capsules * (gru(word_dim, word_dim) + gru(word_dim, hidden))


def equal_size_gru_hidden(vocab: int, word_dim: int, hidden: int, capsules: int) -> int:
    """Hidden size of a plain GRU with (about) the same number of parameters as the RCN."""
    target = parameter_count(vocab, word_dim, hidden, capsules) - vocab * word_dim
    h = hidden
    while 3 * h * word_dim + 3 * h * h + 6 * h < target:
        h += 1
    return h


# ----------------------------------------------------------------------------- the text-encoder kind "rcn"

def TENSOR_NAMES(text_config: dict) -> tuple[str, ...]:  # noqa: N802 (the registry's contract name)
    return NAMES


def prepare(train_captions: list[str], options: dict) -> TextSetup:
    """Paper settings unless overridden: vocabulary of the 5,000 most frequent words, word vectors 300,
    4 capsules, 4 recursions, lambda 0."""
    from imgtxt.model.vocab import Vocabulary

    vocab = Vocabulary.build(train_captions, min_count=options.get("min_count") or 1,
                             max_words=options.get("max_words") or 5000)
    config = {"kind": "rcn", "vocab_size": len(vocab), "word_dim": options.get("word_dim") or 300,
              "capsules": options.get("capsules") or 4, "recursions": options.get("recursions", 4),
              "reg_lambda": float(options.get("reg_lambda") or 0.0), "max_words": MAX_WORDS}
    files = {"vocab.json": json.dumps({"words": vocab.words}, ensure_ascii=False).encode("utf-8")}
    return TextSetup(config, lambda text: vocab.encode(text)[:MAX_WORDS], files,
                     description=f"RCN, {config['capsules']} capsules, {config['recursions']} recursions, "
                                 f"lambda {config['reg_lambda']}, vocabulary {len(vocab)} words")


class Runtime:
    def __init__(self, text_config: dict, tensors, folder: Path):
        from imgtxt.model.vocab import Vocabulary

        self.config = text_config
        self.vocab = Vocabulary.load(folder / "vocab.json")
        self.w = {n: np.asarray(tensors[n], dtype=np.float32) for n in NAMES}
        if self.w["rcn.word_embedding"].shape[0] != len(self.vocab):
            raise ValueError(f"vocab.json has {len(self.vocab)} words, the model {self.w['rcn.word_embedding'].shape[0]}")
        self.embed_dim = self.w["rcn.emb.weight_hh"].shape[2]

    def tokenize(self, text: str) -> list[int]:
        return self.vocab.encode(text)[:MAX_WORDS]

    def sort_key(self, text: str) -> int:
        return len(self.tokenize(text))

    def check_query(self, text: str) -> str | None:
        if not self.tokenize(text):
            return "empty query: describe the photo, e.g. imgtxt search \"a dog running on a beach\""
        if self.vocab.known_fraction(text) == 0.0:
            return f"none of the words in {text!r} are known to the model; try other words"
        return None

    def encode(self, token_lists: list[list[int]]) -> np.ndarray:
        return encode(token_lists, self.w, int(self.config["recursions"]))
