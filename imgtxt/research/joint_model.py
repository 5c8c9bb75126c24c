"""The joint image-text space (Kiros et al. as modified in the 2019 FNE paper, section 3.2), in torch.

caption -> a text encoder (imgtxt/text_encoders: the paper's GRU, or a pretrained MiniLM + head) -> L2 norm
                                                                                   (-> abs for order embeddings)
image features (FNE int8 or baseline) -> dropout -> linear map, no bias -> L2 norm  (-> abs)
    with image_hidden (the thesis): -> dropout -> linear + bias -> ReLU -> map -> L2 norm; with image_bias (RCN,
    thesis) the map is affine.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from imgtxt.research.text_modules import torch_encoder
from imgtxt.research.text_modules.parts import check_and_copy, l2norm

from .losses import SIMILARITIES


@dataclass
class JointConfig:
    vocab_size: int
    image_dim: int
    word_dim: int = 1024
    embed_dim: int = 1024
    similarity: str = "cosine"      # "cosine" or "order"
    use_abs: bool = False           # order embeddings live in the positive orthant
    image_dropout: float = 0.0      # dropout on the image features (regularises the wide FNE input)
    text: dict | None = None        # model.json "text" section (kind + its settings); None = the GRU above
    image_hidden: int = 0           # a ReLU hidden layer on the image side (thesis: 1,000); 0 = none
    image_bias: bool = False        # affine image map (RCN, thesis)

    def to_dict(self) -> dict:
        return asdict(self)

    def text_config(self) -> dict:
        return self.text or {"kind": "gru", "vocab_size": self.vocab_size, "word_dim": self.word_dim}


class TextEncoder(nn.Module):
    """A text-encoder kind's module, with abs() for order embeddings."""

    def __init__(self, text_config: dict, embed_dim: int, use_abs: bool):
        super().__init__()
        self.encoder = torch_encoder(text_config, embed_dim)
        self.use_abs = use_abs

    def _finish(self, out: torch.Tensor) -> torch.Tensor:
        return out.abs() if self.use_abs else out

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self._finish(self.encoder(tokens, lengths))

    @property
    def has_frozen_prefix(self) -> bool:
        return hasattr(self.encoder, "frozen_prefix")

    def frozen_prefix(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.encoder.frozen_prefix(tokens, lengths)

    def forward_from_prefix(self, prefix: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self._finish(self.encoder.forward_from_prefix(prefix, lengths))


class ImageEncoder(nn.Module):
    def __init__(self, image_dim: int, embed_dim: int, dropout: float, use_abs: bool, hidden: int = 0,
                 bias: bool = False):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.hidden = nn.Linear(image_dim, hidden) if hidden else None
        proj_in = hidden or image_dim
        self.proj = nn.Linear(proj_in, embed_dim, bias=bias)
        self.use_abs = use_abs
        # Xavier as in VSE++: keeps the initial projections of a 21k-wide input well scaled.
        for layer in (self.hidden, self.proj):
            if layer is not None:
                r = (6.0 / (layer.in_features + layer.out_features)) ** 0.5
                nn.init.uniform_(layer.weight, -r, r)
                if layer.bias is not None:
                    nn.init.zeros_(layer.bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = self.dropout(features.float())
        if self.hidden is not None:
            x = torch.relu(self.hidden(x))
        out = l2norm(self.proj(x))
        return out.abs() if self.use_abs else out

    def export_tensors(self) -> dict[str, torch.Tensor]:
        """Names the numpy runtime reads (modelfile.py): image_projection, and when present image_bias,
        image_hidden.weight, image_hidden.bias."""
        out = {"image_projection": self.proj.weight}
        if self.proj.bias is not None:
            out["image_bias"] = self.proj.bias
        if self.hidden is not None:
            out.update({"image_hidden.weight": self.hidden.weight, "image_hidden.bias": self.hidden.bias})
        return out


class JointModel(nn.Module):
    def __init__(self, config: JointConfig):
        super().__init__()
        self.config = config
        self.text = TextEncoder(config.text_config(), config.embed_dim, config.use_abs)
        self.image = ImageEncoder(config.image_dim, config.embed_dim, config.image_dropout, config.use_abs,
                                  config.image_hidden, config.image_bias)

    def similarity(self, images: torch.Tensor, captions: torch.Tensor) -> torch.Tensor:
        return SIMILARITIES[self.config.similarity](images, captions)

    def export_tensors(self) -> dict[str, torch.Tensor]:
        """Weights under stable names, the contract with the numpy runtime (modelfile.py, text_encoders/)."""
        return {**self.text.encoder.export_tensors(), **self.image.export_tensors()}

    def import_tensors(self, tensors: dict) -> None:
        check_and_copy(self.export_tensors(), tensors)


def pad_batch(token_lists: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token id lists; an empty caption becomes a single <unk> so the GRU sees >= 1 step."""
    seqs = [t if t else [1] for t in token_lists]
    lengths = torch.tensor([len(t) for t in seqs], dtype=torch.long)
    out = torch.zeros(len(seqs), int(lengths.max()), dtype=torch.long)
    for i, t in enumerate(seqs):
        out[i, : len(t)] = torch.tensor(t, dtype=torch.long)
    return out, lengths
