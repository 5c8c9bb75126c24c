"""Training views: each training photo also seen mirrored and zoomed in, one view drawn per pair and epoch.

Features are computed once per view and cached (as VSE++ trains on precomputed crops, one drawn at random), so
an epoch costs what it cost before; validation, evaluation and indexing keep the single centre crop. The views
are transforms of the square the CNN is given (`images.load_square`), before its own centre crop.
"""
from __future__ import annotations

import numpy as np

VIEWS = ("mirror", "zoom", "zoom-mirror")
ZOOM = 0.8   # the zoomed view keeps the square's central 80% (side), scaled back to the square's size


def apply_view(view: str, squares: np.ndarray) -> np.ndarray:
    """(B, R, R, 3) uint8 squares as `view` shows them, same shape."""
    if view not in VIEWS:
        raise ValueError(f"a training view must be one of {', '.join(VIEWS)}, not {view!r}")
    out = squares
    if view.startswith("zoom"):
        from PIL import Image

        size = squares.shape[1]
        keep = int(round(size * ZOOM))
        start = (size - keep) // 2
        out = np.stack([np.asarray(Image.fromarray(np.ascontiguousarray(s[start:start + keep, start:start + keep]))
                                   .resize((size, size), Image.BILINEAR)) for s in squares])
    if view.endswith("mirror"):
        out = out[:, :, ::-1]
    return np.ascontiguousarray(out)


class ViewExtractor:
    """An extractor (torch or graph) that sees each square through a training view; the rest is the inner one's."""

    def __init__(self, inner, view: str):
        parse_views(view)   # an unknown view fails here, before any work
        self.inner, self.view = inner, view

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, squares: np.ndarray) -> np.ndarray:
        return self.inner(apply_view(self.view, squares))


def parse_views(text: str) -> tuple[str, ...]:
    """'mirror,zoom' -> ('mirror', 'zoom'); '' -> (); each view once, in VIEWS' order."""
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in names if v not in VIEWS]
    if unknown:
        raise ValueError(f"unknown training view {unknown[0]!r}: choose from {', '.join(VIEWS)}")
    return tuple(v for v in VIEWS if v in names)


def batch_rows(centre: np.ndarray, views: tuple[np.ndarray, ...], images: np.ndarray,
               rng: np.random.Generator) -> np.ndarray:
    """The feature rows of a batch's images, each from the centre crop or one of the views, drawn uniformly."""
    if not views:
        return np.asarray(centre[images])
    which = rng.integers(0, len(views) + 1, len(images))
    sources = (centre, *views)
    return np.stack([np.asarray(sources[w][i]) for w, i in zip(which, images)])
