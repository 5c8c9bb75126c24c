"""Recurrent Capsule Network text encoder as a trainable torch module (numpy twin and equations: rcn.py).

`forward` also leaves `self.penalty`: lambda times the mask-variance regulariser (eq. 14, on the last masks)
summed over the batch, which training adds to the ranking loss (eq. 15). The paper averages both terms over
the batch; imgtxt's hinge loss is a sum, so the penalty is summed too and lambda keeps the paper's weight.
"""
from __future__ import annotations

import torch
from torch import nn

from imgtxt.model.text_encoders.rcn import MAX_WORDS, ROUTING_EPS

from .parts import check_and_copy


def _stacked_gru(capsules: int, inp: int, hidden: int) -> nn.ParameterDict:
    k = hidden ** -0.5  # torch's nn.GRU initialisation
    shapes = {"weight_ih": (capsules, 3 * hidden, inp), "weight_hh": (capsules, 3 * hidden, hidden),
              "bias_ih": (capsules, 3 * hidden), "bias_hh": (capsules, 3 * hidden)}
    return nn.ParameterDict({n: nn.Parameter(torch.empty(s).uniform_(-k, k)) for n, s in shapes.items()})


def gru_scan(x: torch.Tensor, lengths: torch.Tensor, p: nn.ParameterDict, candidate: str) -> torch.Tensor:
    """x (C, B, T, I) -> last states (C, B, H); capsule-parallel."""
    c, b, t, _ = x.shape
    gates_x = torch.einsum("cbti,cgi->cbtg", x, p["weight_ih"]) + p["bias_ih"][:, None, None, :]
    act = torch.tanh if candidate == "tanh" else torch.sigmoid
    h = x.new_zeros(c, b, p["weight_hh"].shape[2])
    w_hh_t = p["weight_hh"].transpose(1, 2)
    active = (torch.arange(t, device=x.device)[:, None] < lengths.to(x.device)[None, :])  # (T, B)
    for step in range(t):
        xr, xz, xn = gates_x[:, :, step].chunk(3, dim=2)
        hr, hz, hn = (torch.bmm(h, w_hh_t) + p["bias_hh"][:, None, :]).chunk(3, dim=2)
        r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
        h_new = (1.0 - z) * act(xn + r * hn) + z * h
        h = torch.where(active[step][None, :, None], h_new, h)
    return h


def _safe(den: torch.Tensor) -> torch.Tensor:
    small = den.abs() < ROUTING_EPS
    return torch.where(small, torch.where(den < 0, -ROUTING_EPS, ROUTING_EPS).to(den), den)


def route(v: torch.Tensor):
    gram = torch.einsum("cbh,dbh->bcd", v, v)
    alpha = gram / _safe(gram.sum(dim=2, keepdim=True))
    beta = gram / _safe(gram.sum(dim=(1, 2), keepdim=True))
    return alpha, torch.einsum("bc,cbh->bh", beta.sum(dim=2), v)


def update_masks(alpha: torch.Tensor, proposals: torch.Tensor) -> torch.Tensor:
    """Eq. 7: m_i = sum_j alpha_ij mt_j. alpha (B, C, C), proposals (C, B, V) -> (C, B, V)."""
    return torch.einsum("bij,jbv->ibv", alpha, proposals)


def mask_variance_penalty(masks: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Eq. 14 per sentence, masks (C, B, V) -> (B,)."""
    mean = masks.mean(dim=0)
    spread = (masks - mean).pow(2).sum(dim=2).sum(dim=0) / (masks.shape[0] * mean.pow(2).sum(dim=1) + eps)
    return 1.0 / (spread * masks.norm(dim=2).min(dim=0).values + eps)


class RCNEncoder(nn.Module):
    def __init__(self, vocab_size: int, word_dim: int, embed_dim: int, capsules: int = 4, recursions: int = 4,
                 reg_lambda: float = 0.0):
        super().__init__()
        self.recursions, self.reg_lambda = recursions, reg_lambda
        self.embed = nn.Embedding(vocab_size, word_dim, padding_idx=0)
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        self.mask_gru = _stacked_gru(capsules, word_dim, word_dim)
        self.emb_gru = _stacked_gru(capsules, word_dim, embed_dim)
        self.penalty = torch.zeros(())

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) right-padded with 0, lengths (B,) -> (B, embed_dim) L2-normalised."""
        tokens, lengths = tokens[:, :MAX_WORDS], lengths.clamp(max=MAX_WORDS)
        x = self.embed(tokens)
        n_caps = self.emb_gru["weight_ih"].shape[0]
        masks = x.new_ones(n_caps, x.shape[0], x.shape[2])
        for t in range(self.recursions + 1):
            inputs = masks[:, :, None, :] * x[None]
            v = gru_scan(inputs, lengths, self.emb_gru, "tanh")
            alpha, combined = route(v)
            if t < self.recursions:
                proposals = gru_scan(inputs, lengths, self.mask_gru, "sigmoid")
                masks = update_masks(alpha, proposals)
        if self.reg_lambda and self.recursions > 0:
            self.penalty = self.reg_lambda * mask_variance_penalty(masks).sum()
        else:
            self.penalty = x.new_zeros(())
        return combined / combined.norm(dim=1, keepdim=True).clamp(min=1e-12)

    def export_tensors(self) -> dict[str, torch.Tensor]:
        out = {"rcn.word_embedding": self.embed.weight}
        for prefix, params in (("rcn.mask", self.mask_gru), ("rcn.emb", self.emb_gru)):
            out.update({f"{prefix}.{name}": p for name, p in params.items()})
        return out

    def import_tensors(self, tensors: dict, pretrained_only: bool = False) -> None:
        check_and_copy(self.export_tensors(), tensors)


class Encoder(RCNEncoder):
    """The registry's constructor: (model.json "text" section, joint-space size)."""

    def __init__(self, text_config: dict, embed_dim: int):
        super().__init__(text_config["vocab_size"], text_config["word_dim"], embed_dim, text_config["capsules"],
                         text_config["recursions"], text_config.get("reg_lambda", 0.0))
