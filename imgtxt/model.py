"""The joint image-text space (Kiros et al. as modified in the FNE paper, section 3.2), in torch.

caption -> word embedding -> GRU -> final hidden state -> L2 norm   (-> abs for order embeddings)
image features (FNE int8 or baseline) -> dropout -> linear map, no bias -> L2 norm  (-> abs)
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

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

    def to_dict(self) -> dict:
        return asdict(self)


def l2norm(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=1, keepdim=True).clamp(min=1e-12)


class TextEncoder(nn.Module):
    def __init__(self, vocab_size: int, word_dim: int, embed_dim: int, use_abs: bool):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, word_dim, padding_idx=0)
        self.gru = nn.GRU(word_dim, embed_dim, batch_first=True)
        self.use_abs = use_abs
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) right-padded with 0; lengths (B,) >= 1 -> (B, embed_dim)."""
        packed = pack_padded_sequence(self.embed(tokens), lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, hidden = self.gru(packed)
        out = l2norm(hidden[-1])
        return out.abs() if self.use_abs else out


class ImageEncoder(nn.Module):
    def __init__(self, image_dim: int, embed_dim: int, dropout: float, use_abs: bool):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.proj = nn.Linear(image_dim, embed_dim, bias=False)
        self.use_abs = use_abs
        # Xavier as in VSE++: keeps the initial projections of a 21k-wide input well scaled.
        r = (6.0 / (image_dim + embed_dim)) ** 0.5
        nn.init.uniform_(self.proj.weight, -r, r)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        out = l2norm(self.proj(self.dropout(features.float())))
        return out.abs() if self.use_abs else out


class JointModel(nn.Module):
    def __init__(self, config: JointConfig):
        super().__init__()
        self.config = config
        self.text = TextEncoder(config.vocab_size, config.word_dim, config.embed_dim, config.use_abs)
        self.image = ImageEncoder(config.image_dim, config.embed_dim, config.image_dropout, config.use_abs)

    def similarity(self, images: torch.Tensor, captions: torch.Tensor) -> torch.Tensor:
        return SIMILARITIES[self.config.similarity](images, captions)

    def export_tensors(self) -> dict[str, torch.Tensor]:
        """Weights under stable names, the contract with the numpy runtime (`runtime.py`)."""
        gru = self.text.gru
        return {
            "word_embedding": self.text.embed.weight,
            "gru.weight_ih": gru.weight_ih_l0, "gru.weight_hh": gru.weight_hh_l0,
            "gru.bias_ih": gru.bias_ih_l0, "gru.bias_hh": gru.bias_hh_l0,
            "image_projection": self.image.proj.weight,
        }

    def import_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        own = self.export_tensors()
        missing = set(own) - set(tensors)
        if missing:
            raise ValueError(f"model file lacks tensors: {sorted(missing)}")
        with torch.no_grad():
            for name, param in own.items():
                if tuple(tensors[name].shape) != tuple(param.shape):
                    raise ValueError(f"tensor {name} has shape {tuple(tensors[name].shape)}, expected {tuple(param.shape)}")
                param.copy_(tensors[name].to(param.dtype))


def pad_batch(token_lists: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token id lists; an empty caption becomes a single <unk> so the GRU sees >= 1 step."""
    seqs = [t if t else [1] for t in token_lists]
    lengths = torch.tensor([len(t) for t in seqs], dtype=torch.long)
    out = torch.zeros(len(seqs), int(lengths.max()), dtype=torch.long)
    for i, t in enumerate(seqs):
        out[i, : len(t)] = torch.tensor(t, dtype=torch.long)
    return out, lengths
