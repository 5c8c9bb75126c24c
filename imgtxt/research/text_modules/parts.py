"""Torch pieces shared by text-encoder kinds: L2 norm, the head into the joint space, tensor import."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn


def l2norm(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=1, keepdim=True).clamp(min=1e-12)


class Head(nn.Module):
    """Sentence vector -> joint space: "linear" (a map with bias) or "mlp" (linear -> ReLU -> linear, plus the
    linear map as a skip path so it starts no worse than the linear head). Numpy twin: head.py."""

    def __init__(self, kind: str, in_dim: int, out_dim: int, hidden: int = 0):
        super().__init__()
        self.kind = kind
        self.linear = nn.Linear(in_dim, out_dim)
        if kind == "mlp":
            self.hidden = nn.Linear(in_dim, hidden)
            self.out = nn.Linear(hidden, out_dim)
        elif kind != "linear":
            raise ValueError(f"head must be 'linear' or 'mlp', not {kind!r}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        if self.kind == "mlp":
            y = y + self.out(torch.relu(self.hidden(x)))
        return y

    def export_tensors(self, prefix: str) -> dict[str, torch.Tensor]:
        out = {f"{prefix}.linear.weight": self.linear.weight, f"{prefix}.linear.bias": self.linear.bias}
        if self.kind == "mlp":
            out.update({f"{prefix}.hidden.weight": self.hidden.weight, f"{prefix}.hidden.bias": self.hidden.bias,
                        f"{prefix}.out.weight": self.out.weight, f"{prefix}.out.bias": self.out.bias})
        return out


def check_and_copy(own: dict[str, torch.Tensor], tensors: dict) -> None:
    """Copy tensors (torch or numpy) into parameters by name, refusing missing names or wrong shapes."""
    missing = set(own) - set(tensors)
    if missing:
        raise ValueError(f"model file lacks tensors: {sorted(missing)}")
    with torch.no_grad():
        for name, param in own.items():
            value = tensors[name]
            value = torch.from_numpy(np.array(value, dtype=np.float32)) if not torch.is_tensor(value) else value
            if tuple(value.shape) != tuple(param.shape):
                raise ValueError(f"tensor {name} has shape {tuple(value.shape)}, expected {tuple(param.shape)}")
            param.copy_(value.to(param.dtype))
