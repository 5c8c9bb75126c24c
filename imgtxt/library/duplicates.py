"""Groups of duplicate photos in an index: exact copies (the same content hash) and near duplicates (burst shots,
resized, re-encoded or slightly cropped copies: image vectors whose cosine is at least a threshold). Read only:
it never deletes or moves a file.

The default threshold was chosen on a dev set of Flickr8k val photos and their resized, re-encoded and cropped
copies (bench/duplicate_devset.py; docs/remembered-search.md gives its precision and recall per threshold). Near
duplicates are found by comparing every distinct photo with every other, in blocks of at most BLOCK_VALUES
scores (O(N^2) dot products: 3.6 s for 10,000 of the shipped model's 1,408-d vectors on one busy core).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .photo_paths import real_path
from .store import decode_vectors

NEAR_THRESHOLD = 0.69   # chosen for the shipped model on bench/duplicate_devset.py (docs/remembered-search.md)
BLOCK_VALUES = 1 << 25   # scores per block (128 MB of float32), whatever the library's size


@dataclass
class DuplicatePhoto:
    id: int
    path: str
    size: int
    width: int | None
    height: int | None
    taken: str | None          # 'YYYY-MM-DDTHH:MM:SS' (photo_facts: EXIF, else the file's mtime)
    taken_from: str | None     # 'exif' or 'mtime'
    hash: str
    real: str | None = None

    def as_dict(self) -> dict:
        return {"id": self.id, "path": self.path, "size": self.size, "width": self.width, "height": self.height,
                "taken": self.taken, "taken_from": self.taken_from}


@dataclass
class DuplicateGroup:
    kind: str                   # "exact" (the same bytes) or "near" (vectors at least `similarity` alike)
    photos: list[DuplicatePhoto] = field(default_factory=list)
    similarity: float = 1.0     # the lowest cosine that links the group (1.0 for exact copies)

    def as_dict(self) -> dict:
        return {"kind": self.kind, "similarity": round(self.similarity, 4), "count": len(self.photos),
                "photos": [p.as_dict() for p in self.photos]}


def _find(parent: list[int], i: int) -> int:
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


def near_pairs(vectors: np.ndarray, threshold: float):
    """(i, j, cosine) with i < j of the rows whose cosine is at least `threshold` (rows L2-normalised here)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = vectors / np.where(norms > 0, norms, 1)
    rows_per_block = max(16, BLOCK_VALUES // max(1, len(unit)))
    for start in range(0, len(unit), rows_per_block):
        block = unit[start:start + rows_per_block] @ unit[start:].T
        rows, cols = np.nonzero(block >= threshold)
        for r, c in zip(rows.tolist(), cols.tolist()):
            i, j = start + r, start + c
            if j > i:
                yield i, j, float(block[r, c])


def find(conn, model_id: str, content_dim: int, vector_dim: int, threshold: float = NEAR_THRESHOLD) -> list[DuplicateGroup]:
    """Every group of two or more indexed files that are copies or near duplicates, largest first."""
    rows = conn.execute(
        "SELECT p.id, p.path, p.path_bytes, p.size, p.width, p.height, f.taken, f.taken_from, p.hash, p.embedding "
        "FROM photos p LEFT JOIN photo_facts f ON f.id = p.id WHERE p.model_id = ? ORDER BY p.path", [model_id])
    by_hash: dict[str, list[DuplicatePhoto]] = {}
    blobs: dict[str, bytes] = {}
    for photo_id, key, raw, size, width, height, taken, taken_from, content, blob in rows:
        real = real_path(key, raw)
        by_hash.setdefault(content, []).append(DuplicatePhoto(photo_id, key, size, width, height, taken, taken_from,
                                                              content, real if real != key else None))
        blobs.setdefault(content, blob)
    hashes = list(by_hash)
    parent = list(range(len(hashes)))
    weakest: dict[int, float] = {}
    if len(hashes) > 1 and threshold <= 1.0:
        vectors = decode_vectors([blobs[h] for h in hashes], vector_dim)[:, :content_dim]
        for i, j, cosine in near_pairs(vectors, threshold):
            a, b = _find(parent, i), _find(parent, j)
            if a != b:
                parent[b] = a
                weakest[a] = min(weakest.get(a, 1.0), weakest.get(b, 1.0), cosine)
    members: dict[int, list[int]] = {}
    for i in range(len(hashes)):
        members.setdefault(_find(parent, i), []).append(i)
    groups = []
    for root, indices in members.items():
        photos = [p for i in indices for p in by_hash[hashes[i]]]
        if len(photos) < 2:
            continue
        kind = "exact" if len(indices) == 1 else "near"
        groups.append(DuplicateGroup(kind, sorted(photos, key=lambda p: p.path), weakest.get(root, 1.0)))
    groups.sort(key=lambda g: (-len(g.photos), g.photos[0].path))
    return groups
