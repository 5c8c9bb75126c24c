"""Nearest-neighbour search over the photos' vectors, kept in step with SQLite without rewriting what did not change.

SQLite holds every vector (float16, the source of truth); vector_build.py keeps a float32 copy laid out for
search, and this module reads it. A build writes:

  vectors-<model>-<gen>.vec   ids int64 (N) | vectors float32 (N, D): every build; up to EXACT_MAX photos (or a
                              model not scored by a dot product) every vector is scored
  above EXACT_MAX, an Annoy index over a PCA projection of the vectors finds the candidates:
  vectors-<model>-<gen>.proj  mean float32 (D) | basis float32 (D, P): item i of the .ann is (x_i - mean) @ basis
  vectors-<model>-<gen>.ann   Annoy's file (metric "dot", P-d): item i is row i of the .vec, trees_for(N) trees
  and in both cases, rows embedded since that build, appended (Annoy cannot add to a built index):
  vectors-<model>-<gen>.add   (id int64, vector float32 (D)) each

Which files are current, their sizes and digests are recorded in SQLite's meta table (the `vec_*` keys). A
search maps a file only when its size and digest match the record (`Record.check`), and otherwise answers exactly
from SQLite's own vectors (slow at a million photos, but right) with a one-line notice for the user, until the
next index run rebuilds. A garbled .ann would crash Annoy's loader (SIGSEGV), so it never reaches it: hence the
digest, whole up to 16 MB, 256 sampled blocks above. Hashing them cost a search at a million photos ~4 ms, and
~70 ms when their blocks had to come from disk, so each file's stamp (inode, size, mtime, ctime) is recorded
beside its digest, and a file whose stamp is unchanged is not hashed again: any write, truncation or rename onto
it changes its ctime, which no user call can set back. Every build has a new generation name, so a search that
opened the old files keeps reading them and never sees half a file.

Why float32 on disk: numpy converts float16 at ~2-5 ns an element, which alone would cost a 100k search 120 ms.
Why a projection: Annoy's query cost is its candidates' distances, and at a million photos the recall asked
needs ~150k of them; at the model's full width (1,409-d) that is ~80 ms, at PROJECTED_DIM a fraction of it. The
projection only picks candidates: q . (x - mean) ranks photos as q . x does, and the PCA basis keeps most of it.

Search: up to EXACT_MAX vectors every vector is scored (single-threaded). Above, Annoy collects search_k(want)
candidates from its trees, ranks them in the projection, and the best candidates(want) of them are rescored by
the caller's score function on their full vectors in the .vec, so every score is exact and only the candidate
set is approximate; when search_k would reach the library's size, every vector is scored instead. The tree
count, SEARCH_K and PROJECTED_DIM were chosen by recall@10 against exact on vectors fitted to the shipped
model's (bench/vector_search.py, bench/annoy_settings.py, docs/vector-index.md): more trees let a smaller search_k
find as many true neighbours, and Annoy's query costs about its search_k. A build of fewer trees (an earlier
version's 10) is searched with the search_k it was measured at, EARLIER_SEARCH_K. The .add rows are always scored exactly; when they pass
REBUILD_FRACTION of the build, or removed photos do, the next run rebuilds.
Removed photos stay in the files as dead ids: the caller maps ids to paths through SQLite, which drops them,
and asks for `dead` more candidates. A photo re-embedded in place (same id) has a newer .add row that overrides
its old one.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .store import COUNTER_MAX, vector_chunks

EXACT_MAX = 50_000       # exact search up to here; Annoy above (docs/vector-index.md: the measured crossover)
N_TREES = 50             # Annoy trees at every size: at 100k the recall of 10 trees for 0.74x the query (docs)
SEARCH_K = 20_000        # Annoy candidates per query for 10 results ...
EARLIER_SEARCH_K = 30_000   # ... from a build of fewer trees (earlier versions built 10 below 500k): as before
SEARCH_K_FRACTION = 0.15  # ... or this fraction of the build, if more (from 200k photos; 150k at 1M, docs)
RESULTS_PER_SEARCH_K = 10  # search_k grows with the results asked for beyond this many (as the root of the tens)
REBUILD_FRACTION = 0.10  # appended or dead rows beyond this fraction of the build trigger a full rebuild
BUILD_THREADS = -1       # Annoy's build threads (-1: one per core)
FULL_DIGEST_BYTES = 16 << 20   # files up to this size are hashed whole at each search (~10 ms); larger ones sampled
# ... except the float32 rows (.vec, .add), sampled from 1 MB: numpy reads them (a changed byte is a wrong score,
# never a crash), and hashing 5.6 MB was ~10 ms of a cold search at 1,000 photos. Annoy's files stay whole to 16 MB.
ROWS_FULL_DIGEST_BYTES = 1 << 20
SAMPLE_BLOCKS, SAMPLE_BYTES = 256, 4096
PROJECTED_DIM = 128      # Annoy's items: the vectors' first PROJECTED_DIM principal components (docs)
PROJECTION_SAMPLE = 20_000   # rows the PCA is fitted on (a seeded sample of the build)
CANDIDATES, CANDIDATES_PER_RESULT = 300, 30  # Annoy's best candidates rescored on the full vectors (docs)
# what a record's vec_kind may be; records without one, or of another kind ("annoy": Annoy over the full
# vectors), are of earlier versions
KINDS = ("exact", "annoy-pca")


class DamagedFile(Exception):
    """The vector files do not match what the last index run recorded."""


def file_stem(model_id: str, generation: str) -> str:
    return f"vectors-{re.sub(r'[^A-Za-z0-9_.-]', '_', model_id)}-{generation}"


def exact_bytes(count: int, dim: int) -> int:
    """Size of a .vec file."""
    return count * 8 + count * dim * 4


def annoy_node_bytes(dim: int) -> int:
    """One node of Annoy's "dot" index (annoylib.h, DotProduct::Node): n_descendants int32, children int32 x2,
    dot_factor float32, then the item's vector; items 0..N-1 are the first N nodes."""
    return 16 + 4 * dim


def projection_bytes(dim: int, projected: int) -> int:
    """Size of a .proj file: the mean (D) and the basis (D, P), float32."""
    return 4 * dim * (1 + projected)


def projected_dim(dim: int) -> int:
    return min(PROJECTED_DIM, dim)


def candidates(want: int) -> int:
    """Annoy's best candidates (in the projection) that are rescored on the full vectors for `want` results."""
    return max(CANDIDATES, CANDIDATES_PER_RESULT * want)


def add_row_dtype(dim: int) -> np.dtype:
    return np.dtype([("id", "<i8"), ("vector", "<f4", (dim,))])


def trees_for(count: int) -> int:
    """Annoy trees for a build of `count` vectors: N_TREES at every size (earlier versions built 10 below
    500,000; at 1M those fell short of recall@10 0.95, docs)."""
    return N_TREES


def search_k(want: int, count: int, trees: int | None = None) -> int:
    """Annoy candidates for `want` results from a build of `count` vectors in `trees` trees (None: N_TREES). Beyond
    10 results it grows as the square root of the tens asked for (24 results at 100k: 34,641, not 60,000), which
    kept recall@24 and recall@100 above recall@10's at 100k and 300k (docs/vector-index.md), and never below
    twice the candidates rescored. A build of fewer trees (an earlier version's) keeps the search_k it was
    measured at, EARLIER_SEARCH_K, growing in step with the results, and so answers as it did."""
    steps = max(1, -(-want // RESULTS_PER_SEARCH_K))
    if trees is not None and trees < N_TREES:
        return max(EARLIER_SEARCH_K, round(SEARCH_K_FRACTION * count)) * steps
    per_ten = max(SEARCH_K, round(SEARCH_K_FRACTION * count))
    return per_ten if steps == 1 else max(round(per_ten * steps ** 0.5), 2 * candidates(want))


# ------------------------------------------------------------------------------------ the record in SQLite

def rows_digest(path: Path, size: int) -> str:
    """The digest of a file of float32 rows (.vec, .add): sampled from ROWS_FULL_DIGEST_BYTES."""
    return digest(path, size, size > ROWS_FULL_DIGEST_BYTES)


def digest(path: Path, size: int, sampled: bool | None = None) -> str:
    """sha256 of the file's first `size` bytes when small, else of the size and SAMPLE_BLOCKS blocks spread
    over them (a .add file may hold an unrecorded tail past `size`: it is not read). `sampled` None: by size
    (FULL_DIGEST_BYTES); a check passes the form of the recorded digest."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if not (size > FULL_DIGEST_BYTES if sampled is None else sampled):
            h.update(f.read(size))
            return h.hexdigest()
        h.update(str(size).encode())
        for i in range(SAMPLE_BLOCKS):
            f.seek(i * (size - SAMPLE_BYTES) // (SAMPLE_BLOCKS - 1))
            h.update(f.read(SAMPLE_BYTES))
    return "sampled:" + h.hexdigest()


def file_stamp(path: Path) -> str:
    """What any change to a file changes, short of reading it: inode, size, mtime and ctime (ns)."""
    st = os.stat(path)
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def stamps_of(paths: list[Path], add_path: Path | None) -> tuple[str, str]:
    """(stamps, add_stamp) as Record.current_stamps gives them, from Record.stamp_paths."""
    return " ".join(file_stamp(path) for path in paths), file_stamp(add_path) if add_path else ""


@dataclass
class Record:
    """What meta says the current files are; `valid_for` checks the files on disk against it."""
    model: str = ""
    file: str = ""
    kind: str = ""           # "exact" (.vec) or "annoy-pca" (.vec + .proj + .ann); else an earlier version's
    count: int = 0
    trees: int = 0
    dim: int = 0
    bytes: int = 0           # of the .vec file
    add: int = 0
    live: int = 0
    max_id: int = 0          # rows after it, or of a later generation, are not in the files yet
    synced_at: str = ""      # (and, for rows of imgtxt versions without generations, embedded at/after this)
    digest: str = ""         # of the .vec file
    add_digest: str = ""     # of the recorded rows of the .add file
    generation: int = 0      # rows of a later write generation are not in the files yet
    projected: int = 0       # annoy-pca: P, the .ann's dimension
    ann_bytes: int = 0       # annoy-pca: the .ann's size and digest, and the .proj's digest
    ann_digest: str = ""
    proj_digest: str = ""
    stamps: str = ""         # file_stamp of the .vec (.proj, .ann) when their digests were taken or last checked
    add_stamp: str = ""      # ... and of the .add file

    FIELDS = ("model", "file", "kind", "count", "trees", "dim", "bytes", "add", "live", "max_id", "synced_at",
              "digest", "add_digest", "generation", "projected", "ann_bytes", "ann_digest", "proj_digest", "stamps",
              "add_stamp")

    @classmethod
    def from_meta(cls, meta: dict) -> Record:
        """The record, or an empty one (the files count as damaged and are rebuilt) when a value is not of its
        type or, for the counts, ids and generation, not from 0 to COUNTER_MAX."""
        try:
            record = cls(**{k: type(getattr(cls, k))(meta.get(f"vec_{k}", getattr(cls, k))) for k in cls.FIELDS})
        except ValueError:
            return cls()
        counts = (getattr(record, k) for k in cls.FIELDS if isinstance(getattr(record, k), int))
        return record if all(0 <= n <= COUNTER_MAX for n in counts) else cls()

    def as_meta(self) -> dict:
        return {f"vec_{k}": getattr(self, k) for k in self.FIELDS}

    def main_path(self, index_dir: Path) -> Path:
        return Path(index_dir) / f"{self.file}.vec"

    def ann_path(self, index_dir: Path) -> Path:
        return Path(index_dir) / f"{self.file}.ann"

    def proj_path(self, index_dir: Path) -> Path:
        return Path(index_dir) / f"{self.file}.proj"

    def add_path(self, index_dir: Path) -> Path:
        return Path(index_dir) / f"{self.file}.add"

    def _expected(self, index_dir: Path) -> list[tuple[Path, int, str]]:
        """(path, recorded size, recorded digest) of each file but the .add (which may hold an unrecorded tail)."""
        expected = [(self.main_path(index_dir), self.bytes, self.digest)]
        if self.kind == "annoy-pca":
            expected += [(self.proj_path(index_dir), projection_bytes(self.dim, self.projected), self.proj_digest),
                         (self.ann_path(index_dir), self.ann_bytes, self.ann_digest)]
        return expected

    def stamp_paths(self, index_dir: Path) -> tuple[list[Path], Path | None]:
        """The files whose stamps current_stamps reads: those of _expected, and the .add when rows are recorded."""
        return [path for path, _, _ in self._expected(index_dir)], self.add_path(index_dir) if self.add else None

    def current_stamps(self, index_dir: Path) -> tuple[str, str]:
        """(stamps, add_stamp) of the files on disk now; raises OSError when one is missing."""
        return stamps_of(*self.stamp_paths(index_dir))

    def add_bytes(self) -> int:
        return self.add * add_row_dtype(self.dim).itemsize

    def _sizes_agree(self) -> bool:
        if self.bytes != exact_bytes(self.count, self.dim):
            return False
        if self.kind == "exact":
            return True
        node = annoy_node_bytes(self.projected)   # the items, then at least one node per tree
        return (0 < self.projected <= self.dim and self.trees > 0 and self.ann_bytes % node == 0
                and self.ann_bytes >= (self.count + self.trees) * node)

    def check(self, index_dir: Path, model_id: str, dim: int) -> None:
        """Raise DamagedFile unless the files are the ones the last run wrote: recorded for this model and
        dimension, exactly the recorded sizes (the .add file may hold an unrecorded tail), the same digests."""
        if not self.file:
            raise DamagedFile("the index was written by an imgtxt that did not record it" if not self.model
                              else "no vector files were recorded")
        if self.kind not in KINDS:
            raise DamagedFile("they were written by an earlier version of imgtxt")
        if self.model != model_id or self.dim != dim:
            raise DamagedFile(f"recorded for model {self.model} ({self.dim}-d), not {model_id} ({dim}-d)")
        annoy = self.kind == "annoy-pca"
        if self.count <= 0 or not self._sizes_agree() or not self.digest or (self.add and not self.add_digest) \
                or (annoy and not (self.ann_digest and self.proj_digest)):
            raise DamagedFile("its record in the database is incomplete")
        expected = self._expected(index_dir)
        try:
            for path, size, _ in expected:
                if os.path.getsize(path) != size:
                    raise DamagedFile(f"{path.name} has {os.path.getsize(path)} bytes, the index run wrote {size}")
            add = self.add_path(index_dir)
            add_size = os.path.getsize(add) if self.add else 0
            if add_size < self.add_bytes():
                raise DamagedFile(f"{add.name} has {add_size} bytes, the index run wrote {self.add_bytes()}")
            stamps, add_stamp = self.current_stamps(index_dir)   # unchanged since checked: not hashed again
            if (stamps != self.stamps and any(digest(path, size, recorded.startswith("sampled:")) != recorded
                                              for path, size, recorded in expected)) \
                    or (self.add and add_stamp != self.add_stamp
                        and digest(add, self.add_bytes(), self.add_digest.startswith("sampled:")) != self.add_digest):
                raise DamagedFile("their content differs from what the index run wrote")
        except OSError as e:
            raise DamagedFile(f"cannot read them ({e.strerror or e})") from None

    def valid_for(self, index_dir: Path, model_id: str, dim: int) -> bool:
        try:
            self.check(index_dir, model_id, dim)
            return True
        except DamagedFile:
            return False

    @property
    def dead(self) -> int:
        """Entries in the files beyond the live photos: removed photos and superseded rows (an upper bound)."""
        return max(0, self.count + self.add - self.live)


# ------------------------------------------------------------------------------------ searching

def dot_scorer(query: np.ndarray):
    """Cosine scores of unit vectors against `query`, single-threaded: einsum instead of BLAS, whose threads spin
    on a busy machine (a 1,000-row mat-vec took 200x the CPU with 2 OpenBLAS threads under load, bench notes)."""
    q = np.asarray(query, dtype=np.float32).ravel()
    return lambda images: np.einsum("ij,j->i", images, q)


def _top(ids: np.ndarray, scores: np.ndarray, want: int) -> tuple[np.ndarray, np.ndarray]:
    if len(scores) > want:
        keep = np.argpartition(-scores, want - 1)[:want]
        ids, scores = ids[keep], scores[keep]
    order = np.argsort(-scores, kind="stable")
    return ids[order], scores[order]


class VectorIndex:
    """The mapped files of one record. `search` returns (ids, scores) best first."""

    def __init__(self, index_dir: Path, record: Record):
        self.record, dim, n = record, record.dim, record.count
        path = record.main_path(index_dir)
        self.ids = np.memmap(path, "<i8", "r", 0, (n,))
        self.vectors = np.memmap(path, "<f4", "r", n * 8, (n, dim))
        self.annoy = None
        if record.kind == "annoy-pca":   # (only libraries past EXACT_MAX pay for importing annoy)
            from annoy import AnnoyIndex

            # q . (x - mean) ranks as q . x does: the mean only matters to the items
            self.basis = np.fromfile(record.proj_path(index_dir), "<f4", offset=4 * dim).reshape(dim, -1)
            self.annoy = AnnoyIndex(record.projected, "dot")
            self.annoy.load(str(record.ann_path(index_dir)))   # maps the file; only after Record.check accepted it
        self.overridden = np.zeros(0, np.int64)
        if record.add:
            rows = np.memmap(record.add_path(index_dir), add_row_dtype(dim), "r", 0, (record.add,))
            self.add_ids, self.add_vectors = rows["id"], rows["vector"]
            # The latest row of an id wins (a photo re-embedded twice); a copy only when there are repeats.
            latest = len(rows) - 1 - np.unique(rows["id"][::-1], return_index=True)[1]
            if len(latest) < len(rows):
                self.add_ids, self.add_vectors = self.add_ids[latest], self.add_vectors[latest]
            # Ids up to the build's largest were in the build: re-embedded since, their build rows are stale.
            self.overridden = np.sort(self.add_ids[self.add_ids <= int(self.ids.max())])
        else:
            self.add_ids, self.add_vectors = np.zeros(0, np.int64), np.zeros((0, dim), np.float32)

    def __len__(self) -> int:
        return self.record.live

    @property
    def dead(self) -> int:
        return self.record.dead

    def search(self, query: np.ndarray, want: int, score_fn) -> tuple[np.ndarray, np.ndarray]:
        """The `want` best (id, score) by `score_fn` ((M, D) float32 -> (M,) scores, higher is better)."""
        want = max(1, want)
        asked = want + len(self.overridden)
        k = search_k(asked, len(self.ids), self.record.trees)
        if self.annoy is None or k >= len(self.ids):
            ids, scores = self.ids, score_fn(self.vectors)
        else:
            projected = np.asarray(query, np.float32).ravel() @ self.basis
            rows = np.sort(np.asarray(self.annoy.get_nns_by_vector(projected.tolist(), candidates(asked),
                                                                   search_k=k), np.int64))
            ids, scores = self.ids[rows], score_fn(self.vectors[rows])   # rescored: every score is exact
        ids, scores = _top(np.asarray(ids), np.asarray(scores, np.float32), asked)
        if len(self.overridden):
            fresh = ~np.isin(ids, self.overridden)
            ids, scores = ids[fresh], scores[fresh]
        if len(self.add_ids):
            ids = np.concatenate([ids, self.add_ids])
            scores = np.concatenate([scores, np.asarray(score_fn(self.add_vectors), np.float32)])
        return _top(ids, scores, want)


class ExactFromRows:
    """Every vector scored straight from SQLite: the answer when the files are missing or do not match meta."""

    def __init__(self, conn, model_id: str, dim: int):
        self.conn, self.model_id, self.dim = conn, model_id, dim

    def __len__(self) -> int:
        return self.conn.execute("SELECT count(*) FROM photos WHERE model_id = ?", [self.model_id]).fetchone()[0]

    dead = 0

    def search(self, query: np.ndarray, want: int, score_fn) -> tuple[np.ndarray, np.ndarray]:
        best_ids, best_scores = np.zeros(0, np.int64), np.zeros(0, np.float32)
        for ids, vectors in vector_chunks(self.conn, self.model_id, self.dim):
            best_ids, best_scores = _top(np.concatenate([best_ids, ids]),
                                         np.concatenate([best_scores, score_fn(vectors)]), max(1, want))
        return best_ids, best_scores


def open_vectors(index_dir: Path, meta: dict, conn, model_id: str, dim: int, notices: list | None = None):
    """The mapped files when they match the record in meta, else exact search from SQLite; why not goes to
    `notices` as one line for the user."""
    record = Record.from_meta(meta)
    try:
        record.check(index_dir, model_id, dim)   # before mapping: never search a file that is not the one written
        return VectorIndex(index_dir, record)
    except (DamagedFile, OSError, ValueError) as e:
        if notices is not None:
            notices.append(f"the vector index {record.file or 'vectors-*'} is damaged or out of date ({e}); "
                           f"answering by exact search, run `imgtxt index FOLDER` to rebuild it")
    return ExactFromRows(conn, model_id, dim)
