"""numpy twin of torch_parts.Head: sentence vector -> joint space ("linear", or "mlp" with a linear skip path)."""
from __future__ import annotations

import numpy as np

from ..tensor_file import Dense


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


def Weight(tensors, name: str, keep: bool = True) -> Dense:
    """An (out, in) matrix as the model stores it, applied as x @ W.T (tensor_file.Dense). int8 rows are cast
    block by block: dequantising the three head matrices when the model loaded was ~7 ms of a cold search.
    keep=False: no int8 column blocks kept for small batches (the image projection is used at index time)."""
    stored = getattr(tensors, "stored", None)
    if stored is not None and name + ".scale" in tensors:
        return Dense(stored(name), stored(name + ".scale"), keep)
    return Dense(np.asarray(tensors[name], dtype=np.float32), keep=keep)


class NumpyHead:
    def __init__(self, tensors, prefix: str, kind: str):
        self.kind = kind
        bias = lambda name: np.asarray(tensors[f"{prefix}.{name}"], dtype=np.float32)  # noqa: E731
        self.w, self.b = Weight(tensors, f"{prefix}.linear.weight"), bias("linear.bias")
        if kind == "mlp":
            self.w1, self.b1 = Weight(tensors, f"{prefix}.hidden.weight"), bias("hidden.bias")
            self.w2, self.b2 = Weight(tensors, f"{prefix}.out.weight"), bias("out.bias")

    @property
    def matrices(self) -> list:
        return [self.w, self.w1, self.w2] if self.kind == "mlp" else [self.w]

    @property
    def out_dim(self) -> int:
        return self.w.shape[0]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = self.w(x) + self.b
        if self.kind == "mlp":
            y += self.w2(np.maximum(self.w1(x) + self.b1, 0)) + self.b2
        return y
