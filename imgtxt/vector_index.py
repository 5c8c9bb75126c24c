"""The Annoy nearest-neighbour index: built from SQLite after each index run, swapped in atomically.

The file is `vectors-<model id>.ann` in the index folder, item id = photos.id. Naming it by model means a
search can never read vectors of another model, and a search running during a rebuild keeps the file it
opened (os.replace swaps the name; the old inode lives on until it is closed).

Annoy finds candidates; they are re-scored with the model's own similarity (cosine, or order similarity
for order-embedding models, which Annoy has no metric for: Euclidean neighbours are the candidates).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

N_TREES = 10
SEARCH_K = 50_000        # nodes inspected per query: near-exact up to ~100k photos, still a few ms


def metric_for(similarity: str) -> str:
    return "angular" if similarity == "cosine" else "euclidean"


def index_path(index_dir: Path, model_id: str) -> Path:
    return Path(index_dir) / f"vectors-{re.sub(r'[^A-Za-z0-9_.-]', '_', model_id)}.ann"


def build(index_dir: Path, model_id: str, dim: int, similarity: str, vectors, n_trees: int = N_TREES) -> int:
    """Write the index of (id, float32 bytes) pairs to a temporary file, then rename it into place.

    Returns the number of vectors. With none, the file is removed (a search then says the index is empty).
    Files of other models are deleted: their vectors must not be searched with this model.
    """
    from annoy import AnnoyIndex

    final = index_path(index_dir, model_id)
    tmp = final.with_name(final.name + f".tmp{os.getpid()}")
    ann = AnnoyIndex(dim, metric_for(similarity))
    count = 0
    for photo_id, blob in vectors:
        ann.add_item(int(photo_id), np.frombuffer(blob, dtype=np.float32))
        count += 1
    if count:
        ann.build(n_trees)
        ann.save(str(tmp))
        ann.unload()
        os.replace(tmp, final)
    else:
        final.unlink(missing_ok=True)
    for other in Path(index_dir).glob("vectors-*.ann*"):
        if other != final:
            other.unlink(missing_ok=True)
    return count


def other_model_files(index_dir: Path, model_id: str) -> list[Path]:
    mine = index_path(index_dir, model_id)
    return [p for p in Path(index_dir).glob("vectors-*.ann") if p != mine]


class VectorIndex:
    def __init__(self, path: Path, dim: int, similarity: str):
        from annoy import AnnoyIndex

        self.similarity = similarity
        self.ann = AnnoyIndex(dim, metric_for(similarity))
        self.ann.load(str(path))  # mmap: opening is instant at any size

    def __len__(self) -> int:
        return self.ann.get_n_items()

    def candidates(self, query: np.ndarray, n: int) -> tuple[list[int], np.ndarray]:
        """Ids of about n nearest items and their vectors (k, D)."""
        want = n if self.similarity == "cosine" else max(10 * n, 100)
        ids = self.ann.get_nns_by_vector(np.asarray(query, dtype=np.float32).tolist(), want, search_k=SEARCH_K)
        vectors = np.array([self.ann.get_item_vector(i) for i in ids], dtype=np.float32).reshape(len(ids), -1)
        return ids, vectors
