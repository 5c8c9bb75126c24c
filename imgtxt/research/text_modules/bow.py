"""The thesis's bag-of-n-grams model as a torch module (numpy twin and the feature definitions: bow.py)."""
from __future__ import annotations

import torch
from torch import nn

from .parts import check_and_copy, l2norm


class Encoder(nn.Module):
    def __init__(self, text_config: dict, embed_dim: int):
        super().__init__()
        self.weighting, hidden = text_config["weighting"], int(text_config.get("hidden") or 0)
        first = hidden or embed_dim
        self.register_buffer("idf", torch.ones(text_config["features"]))
        # The first layer as a lookup summed over a caption's feature ids = a linear map of the sparse vector.
        self.first = nn.EmbeddingBag(text_config["features"], first, mode="sum", padding_idx=0)
        self.first_bias = nn.Parameter(torch.zeros(first))
        r = (6.0 / (text_config["features"] + first)) ** 0.5
        nn.init.uniform_(self.first.weight, -r, r)
        with torch.no_grad():
            self.first.weight[0].zero_()
        self.out = nn.Linear(hidden, embed_dim) if hidden else None

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        lengths = lengths.to(tokens.device)
        valid = torch.arange(tokens.shape[1], device=tokens.device)[None, :] < lengths[:, None]
        if self.weighting == "binary":
            weights = valid.float()
        else:
            weights = self.idf[tokens] / lengths[:, None].float() * valid
        h = self.first(tokens, per_sample_weights=weights) + self.first_bias
        if self.out is not None:
            h = self.out(torch.relu(h))
        return l2norm(h)

    def export_tensors(self) -> dict[str, torch.Tensor]:
        out = {"bow.idf": self.idf, "bow.in.weight": self.first.weight, "bow.in.bias": self.first_bias}
        if self.out is not None:
            out.update({"bow.out.weight": self.out.weight, "bow.out.bias": self.out.bias})
        return out

    def import_tensors(self, tensors: dict, pretrained_only: bool = False) -> None:
        own = self.export_tensors()
        if pretrained_only:   # at the start of training: only the idf fitted on the training captions
            own = {k: v for k, v in own.items() if k in tensors}
        check_and_copy(own, tensors)
