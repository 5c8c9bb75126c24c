"""numpy twin of torch_parts.Head: sentence vector -> joint space ("linear", or "mlp" with a linear skip path)."""
from __future__ import annotations

import numpy as np


def head_tensor_names(prefix: str, kind: str) -> list[str]:
    names = [f"{prefix}.linear.weight", f"{prefix}.linear.bias"]
    if kind == "mlp":
        names += [f"{prefix}.hidden.weight", f"{prefix}.hidden.bias", f"{prefix}.out.weight", f"{prefix}.out.bias"]
    return names


def head_tensor_shapes(prefix: str, kind: str, in_dim: int, out_dim: int, hidden: int = 0) -> dict[str, tuple]:
    shapes = {f"{prefix}.linear.weight": (out_dim, in_dim), f"{prefix}.linear.bias": (out_dim,)}
    if kind == "mlp":
        shapes.update({f"{prefix}.hidden.weight": (hidden, in_dim), f"{prefix}.hidden.bias": (hidden,),
                       f"{prefix}.out.weight": (out_dim, hidden), f"{prefix}.out.bias": (out_dim,)})
    return shapes


class NumpyHead:
    def __init__(self, tensors, prefix: str, kind: str):
        self.kind = kind
        get = lambda name: np.asarray(tensors[f"{prefix}.{name}"], dtype=np.float32)  # noqa: E731
        # Transposed views, not copies: BLAS reads either layout at the same speed, and the copies of the
        # (out, in) matrices were ~9 ms of a cold search's ~120 ms beyond importing numpy.
        self.w, self.b = get("linear.weight").T, get("linear.bias")
        if kind == "mlp":
            self.w1, self.b1 = get("hidden.weight").T, get("hidden.bias")
            self.w2, self.b2 = get("out.weight").T, get("out.bias")

    @property
    def out_dim(self) -> int:
        return self.w.shape[1]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = x @ self.w + self.b
        if self.kind == "mlp":
            y += np.maximum(x @ self.w1 + self.b1, 0) @ self.w2 + self.b2
        return y
