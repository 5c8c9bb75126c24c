"""all-MiniLM-L6-v2 as a trainable torch module (numpy twin: minilm.py): BERT layers written out here so that
training needs neither transformers nor sentence-transformers (tests check it equals transformers' BertModel).

The lower `layers - trainable_layers` layers (and the embeddings) are frozen: their output depends on the caption
only, so `frozen_prefix` is computed once per run and training continues with `forward_from_prefix`.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from imgtxt.model.text_encoders.minilm import HEAD_PREFIX, PREFIX, bert_names

from .parts import Head, check_and_copy, l2norm


class BertLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int, eps: float):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.attn_out, self.attn_norm = nn.Linear(hidden, hidden), nn.LayerNorm(hidden, eps=eps)
        self.inner, self.out, self.out_norm = nn.Linear(hidden, intermediate), nn.Linear(intermediate, hidden), \
            nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        split = lambda y: y.view(b, t, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads) + bias
        context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = self.attn_norm(self.attn_out(context) + x)
        return self.out_norm(self.out(F.gelu(self.inner(x))) + x)

    def named_bert(self, i: int) -> dict[str, torch.Tensor]:
        p = f"encoder.layer.{i}."
        parts = {"attention.self.query": self.query, "attention.self.key": self.key, "attention.self.value": self.value,
                 "attention.output.dense": self.attn_out, "attention.output.LayerNorm": self.attn_norm,
                 "intermediate.dense": self.inner, "output.dense": self.out, "output.LayerNorm": self.out_norm}
        return {f"{p}{name}.{w}": getattr(m, w) for name, m in parts.items() for w in ("weight", "bias")}


class Encoder(nn.Module):
    def __init__(self, text_config: dict, embed_dim: int):
        super().__init__()
        c = self.config = text_config
        d = c["hidden"]
        self.word = nn.Embedding(30522, d)
        self.position = nn.Embedding(512, d)
        self.token_type = nn.Embedding(2, d)
        self.embed_norm = nn.LayerNorm(d, eps=c["layer_norm_eps"])
        self.layers = nn.ModuleList(BertLayer(d, c["heads"], c["intermediate"], c["layer_norm_eps"])
                                    for _ in range(c["layers"]))
        self.head = Head(c["head"], d, embed_dim, c.get("head_hidden", 0))
        self.frozen_layers = c["layers"] - c["trainable_layers"]
        for module in [self.word, self.position, self.token_type, self.embed_norm, *self.layers[:self.frozen_layers]]:
            module.requires_grad_(False)

    @staticmethod
    def _bias(lengths: torch.Tensor, t: int) -> torch.Tensor:
        mask = torch.arange(t, device=lengths.device)[None, :] < lengths[:, None]
        return torch.zeros(mask.shape, device=lengths.device).masked_fill(~mask, torch.finfo(torch.float32).min
                                                                          )[:, None, None, :]

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        return self.embed_norm(self.word(tokens) + self.position(positions)[None] + self.token_type.weight[0])

    def _run(self, x: torch.Tensor, lengths: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        bias = self._bias(lengths.to(x.device), x.shape[1])
        for layer in self.layers[start:stop]:
            x = layer(x, bias)
        return x

    def sentence_vectors(self, hidden: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Mean pooling over real tokens, L2 norm: the sentence-transformers vector."""
        mask = (torch.arange(hidden.shape[1], device=hidden.device)[None, :] < lengths.to(hidden.device)[:, None])
        pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        return l2norm(pooled)

    # Frozen part: embeddings and the lower layers; with every layer frozen, the pooled sentence vector.
    @torch.no_grad()
    def frozen_prefix(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        x = self._run(self._embed(tokens), lengths, 0, self.frozen_layers)
        return self.sentence_vectors(x, lengths) if self.frozen_layers == len(self.layers) else x

    def forward_from_prefix(self, prefix: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        if self.frozen_layers < len(self.layers):
            prefix = self.sentence_vectors(self._run(prefix, lengths, self.frozen_layers, len(self.layers)), lengths)
        return l2norm(self.head(prefix))

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) WordPiece ids right-padded with 0 ([CLS] ... [SEP]); lengths (B,) -> (B, embed_dim)."""
        if self.frozen_layers == 0:
            x = self._run(self._embed(tokens), lengths, 0, len(self.layers))
            return l2norm(self.head(self.sentence_vectors(x, lengths)))
        return self.forward_from_prefix(self.frozen_prefix(tokens, lengths), lengths)

    def bert_tensors(self) -> dict[str, torch.Tensor]:
        out = {"embeddings.word_embeddings.weight": self.word.weight,
               "embeddings.position_embeddings.weight": self.position.weight,
               "embeddings.token_type_embeddings.weight": self.token_type.weight,
               "embeddings.LayerNorm.weight": self.embed_norm.weight, "embeddings.LayerNorm.bias": self.embed_norm.bias}
        for i, layer in enumerate(self.layers):
            out.update(layer.named_bert(i))
        assert set(out) == set(bert_names(len(self.layers)))
        return out

    def export_tensors(self) -> dict[str, torch.Tensor]:
        return {**{PREFIX + k: v for k, v in self.bert_tensors().items()}, **self.head.export_tensors(HEAD_PREFIX)}

    def import_tensors(self, tensors: dict, pretrained_only: bool = False) -> None:
        own = self.export_tensors()
        if pretrained_only:  # the sentence encoder's weights; the head keeps its fresh initialisation
            own = {k: v for k, v in own.items() if k.startswith(PREFIX)}
        check_and_copy(own, tensors)
