"""The Annoy nearest-neighbour index: built from SQLite after each index run, swapped in atomically.

The file is `vectors-<model id>.ann` in the index folder, item id = photos.id. Naming it by model means a
search can never read vectors of another model, and a search running during a rebuild keeps the file it
opened (os.replace swaps the name; the old inode lives on until it is closed).

Annoy finds candidates; they are re-scored with the model's own similarity (cosine, or order similarity
for order-embedding models, which Annoy has no metric for: Euclidean neighbours are the candidates).

Annoy trusts its file: a garbled one crashes the process (segmentation fault) and a truncated one raises.
So each run records the file's size, item count and a digest in SQLite (`file_facts`), and a search checks
them before Annoy maps the file (`check_file`); on a mismatch the caller answers exactly from SQLite.
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import numpy as np

N_TREES = 10
SEARCH_K = 50_000        # nodes inspected per query: near-exact up to ~100k photos, still a few ms
FULL_DIGEST_BYTES = 16 << 20   # files up to this size are hashed whole at each search (~10 ms); larger ones sampled
SAMPLE_BLOCKS, SAMPLE_BYTES = 256, 4096


class DamagedFile(Exception):
    """The vector file does not match what the last index run recorded."""


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
        try:
            ann.save(str(tmp))   # disk full: OSError; the previous file stays in place
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        ann.unload()
        os.chmod(tmp, 0o600)
        os.replace(tmp, final)
    else:
        final.unlink(missing_ok=True)
    for other in Path(index_dir).glob("vectors-*.ann*"):
        if other != final:
            other.unlink(missing_ok=True)
    return count


def digest(path: Path, size: int) -> str:
    """sha256 of the whole file when small, else of the size and SAMPLE_BLOCKS blocks spread over it."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= FULL_DIGEST_BYTES:
            while chunk := f.read(1 << 20):
                h.update(chunk)
            return h.hexdigest()
        h.update(str(size).encode())
        for i in range(SAMPLE_BLOCKS):
            f.seek(i * (size - SAMPLE_BYTES) // (SAMPLE_BLOCKS - 1))
            h.update(f.read(SAMPLE_BYTES))
    return "sampled:" + h.hexdigest()


def file_facts(path: Path, dim: int, similarity: str) -> dict[str, str]:
    """What a search checks before trusting the file (stored in the meta table at the end of each run)."""
    path = Path(path)
    if not path.is_file():
        return {"vectors_size": "0", "vectors_items": "0", "vectors_digest": ""}
    size = path.stat().st_size
    items = VectorIndex(path, dim, similarity).ann.get_n_items()
    return {"vectors_size": str(size), "vectors_items": str(items), "vectors_digest": digest(path, size)}


def check_file(path: Path, meta: dict[str, str]) -> None:
    """Raise DamagedFile unless the file is the one the last run wrote (size, then digest)."""
    try:
        size = Path(path).stat().st_size
    except OSError as e:
        raise DamagedFile(f"cannot read it ({e.strerror})") from None
    if "vectors_size" not in meta:
        raise DamagedFile("the index was written by an imgtxt that did not record it")
    if size != int(meta["vectors_size"]):
        raise DamagedFile(f"{size} bytes, the index run wrote {meta['vectors_size']}")
    if digest(Path(path), size) != meta.get("vectors_digest"):
        raise DamagedFile("its content differs from what the index run wrote")


def other_model_files(index_dir: Path, model_id: str) -> list[Path]:
    mine = index_path(index_dir, model_id)
    return [p for p in Path(index_dir).glob("vectors-*.ann") if p != mine]


class VectorIndex:
    def __init__(self, path: Path, dim: int, similarity: str, items: int | None = None):
        from annoy import AnnoyIndex

        self.similarity, self.dim = similarity, dim
        self.ann = AnnoyIndex(dim, metric_for(similarity))
        try:
            self.ann.load(str(path))  # mmap: opening is instant at any size
        except OSError as e:
            raise DamagedFile(f"Annoy cannot load it ({e})") from None
        if items is not None and self.ann.get_n_items() != items:
            raise DamagedFile(f"{self.ann.get_n_items()} items, the index run wrote {items}")

    def __len__(self) -> int:
        return self.ann.get_n_items()

    def candidates(self, query: np.ndarray, n: int) -> tuple[list[int], np.ndarray]:
        """Ids of about n nearest items and their vectors (k, D); never more than the index holds, and one
        float32 row per id (no Python float lists kept), so memory follows what is asked for."""
        want = min(n if self.similarity == "cosine" else max(10 * n, 100), len(self))
        ids = self.ann.get_nns_by_vector(np.asarray(query, dtype=np.float32).tolist(), want, search_k=SEARCH_K)
        vectors = np.empty((len(ids), self.dim), np.float32)
        for row, i in enumerate(ids):
            vectors[row] = self.ann.get_item_vector(i)
        return ids, vectors


class ExactIndex:
    """The same interface answered from the vectors stored in SQLite: every photo scored, exact.

    The fallback when the Annoy file is damaged or out of date."""

    def __init__(self, vectors, similarity: str):
        rows = list(vectors)   # (id, float32 bytes)
        self.similarity = similarity
        self.ids = [int(i) for i, _ in rows]
        self.matrix = np.stack([np.frombuffer(b, np.float32) for _, b in rows]) if rows else np.zeros((0, 0), np.float32)

    def __len__(self) -> int:
        return len(self.ids)

    def candidates(self, query: np.ndarray, n: int) -> tuple[list[int], np.ndarray]:
        q = np.asarray(query, dtype=np.float32)
        if self.similarity == "cosine":
            closeness = self.matrix @ q
        else:
            closeness = -np.square(self.matrix - q).sum(axis=1)
        want = min(n if self.similarity == "cosine" else max(10 * n, 100), len(self.ids))
        top = np.argsort(-closeness, kind="stable")[:want]
        return [self.ids[i] for i in top], self.matrix[top]
