"""The GRU text encoder as a trainable torch module (numpy twin: gru.py)."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from .parts import check_and_copy, l2norm


class Encoder(nn.Module):
    def __init__(self, text_config: dict, embed_dim: int):
        super().__init__()
        self.embed = nn.Embedding(text_config["vocab_size"], text_config["word_dim"], padding_idx=0)
        self.gru = nn.GRU(text_config["word_dim"], embed_dim, batch_first=True)
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) right-padded with 0; lengths (B,) >= 1 -> (B, embed_dim)."""
        packed = pack_padded_sequence(self.embed(tokens), lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, hidden = self.gru(packed)
        return l2norm(hidden[-1])

    def export_tensors(self) -> dict[str, torch.Tensor]:
        gru = self.gru
        return {"word_embedding": self.embed.weight,
                "gru.weight_ih": gru.weight_ih_l0, "gru.weight_hh": gru.weight_hh_l0,
                "gru.bias_ih": gru.bias_ih_l0, "gru.bias_hh": gru.bias_hh_l0}

    def import_tensors(self, tensors: dict) -> None:
        check_and_copy(self.export_tensors(), tensors)
