"""Answering queries against an index: text -> photos, photo -> captions, photo -> photos, status.

Nothing here imports torch: text is encoded by the model's numpy text encoder, indexed photos use their stored
vectors, and the vector search files are memory-mapped. Only a photo that is not in the index needs the CNN, and the
caller passes a `embed_photo` function for that case.
"""
from __future__ import annotations

import hashlib
import math
import os
import re
import sqlite3
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from imgtxt.errors import ImgtxtError
from imgtxt.paths import private_dirs, writing
from imgtxt.safe_text import printable

from . import vector_index
from .photo_paths import path_key, real_path
from .store import StoreError, decode_vectors, open_readonly, read_meta

MAX_QUERY_CHARS = 1000   # a caption is a sentence; a 100,000-character "query" took minutes and 400 MB


class QueryError(ImgtxtError):
    """A query that cannot be answered: empty, no known words, a missing photo."""


@dataclass
class Hit:
    rank: int
    score: float
    value: str      # a path (its key: non-UTF-8 bytes escaped), or a caption
    real: str | None = None   # the path to open, when it differs from the key


class Index:
    """A read-only view of an index folder: the SQLite rows and the vector search files of its model."""

    def __init__(self, index_dir: Path):
        self.dir = Path(index_dir)
        self.conn = open_readonly(self.dir)
        self.notices: list[str] = []   # one-line warnings for the user (e.g. a damaged vector file)
        try:
            self.meta = read_meta(self.conn)
        except sqlite3.OperationalError as e:
            raise StoreError(f"{self.dir}: not an imgtxt index ({e})") from None

    @property
    def model_id(self) -> str | None:
        return self.meta.get("model_id")

    def model_folder(self) -> Path | None:
        folder = self.meta.get("model_folder")
        return Path(folder) if folder and Path(folder).is_dir() else None

    def reindex_command(self, shown: int = 3) -> str:
        """`imgtxt index` with the index's own folders (after a model upgrade a user need not remember them)."""
        import shlex

        from imgtxt.paths import index_dir

        from .index_meta import meta_folders

        folders = [shlex.quote(printable(f)) for f in meta_folders(self.meta)] or ["FOLDER"]
        words = ["imgtxt index", *folders[:shown]] + (["..."] if len(folders) > shown else [])
        try:
            default = self.dir.resolve() == index_dir().resolve()
        except (ImgtxtError, OSError, RuntimeError):   # no home folder, say: the index was named with --index
            default = False
        if not default:   # not where a plain `imgtxt index` writes
            words += ["--index", shlex.quote(printable(str(self.dir)))]
        return " ".join(words)

    def count(self, table: str, model_id: str | None = None) -> int:
        if model_id:
            return self.conn.execute(f"SELECT count(*) FROM {table} WHERE model_id = ?", [model_id]).fetchone()[0]
        return self.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]

    def vectors(self, model):
        if self.model_id is None:
            raise StoreError(f"the index at {self.dir} has no completed run yet: run `imgtxt index FOLDER`")
        if self.model_id != model.model_id:
            raise StoreError(f"the index at {self.dir} was built with model {self.model_id}, not {model.model_id}: "
                             f"run `{self.reindex_command()}` with this model to re-embed its photos, or pass the "
                             f"index's --model")
        empty = StoreError(f"the index at {self.dir} is empty: run `imgtxt index FOLDER` with some photos")
        if self.meta.get("photos", "1") == "0":
            raise empty
        # Checked against the record in SQLite before anything is mapped; if they differ, exact search from
        # SQLite and a one-line notice.
        vectors = self._open_vectors(model)
        if len(vectors) == 0:
            raise empty
        return vectors

    def _open_vectors(self, model):
        """The search files checked and mapped, else exact search from SQLite (open_index.py keeps them open)."""
        return vector_index.open_vectors(self.dir, self.meta, self.conn, model.model_id, model.vector_dim,
                                         self.notices)

    def paths(self, ids: list[int], chunk: int = 10_000) -> dict[int, tuple[str, str]]:
        """id -> (key, path to open) of the ids still in the index (removed photos are left out), in chunks
        (SQLite limits the variables of one statement)."""
        out = {}
        for start in range(0, len(ids), chunk):
            part = ids[start:start + chunk]
            sql = f"SELECT id, path, path_bytes FROM photos WHERE id IN ({','.join('?' * len(part))})"
            out.update({i: (key, real_path(key, raw)) for i, key, raw in self.conn.execute(sql, part)})
        return out

    def stored_vector(self, path: str, model_id: str, dim: int) -> np.ndarray | None:
        """The indexed vector of a photo, if the file is unchanged since it was embedded by this model."""
        row = self.conn.execute("SELECT size, mtime_ns, embedding, model_id, ino, ctime_ns FROM photos WHERE path = ?",
                                [path_key(path)]).fetchone()
        if row is None or row[3] != model_id:
            return None
        st = os.stat(path)   # inode and ctime too: another file of equal size and mtime is not this photo
        if (st.st_size, st.st_mtime_ns) != (row[0], row[1]) or row[4] not in (None, st.st_ino & ((1 << 63) - 1)) \
                or row[5] not in (None, st.st_ctime_ns):
            return None
        return decode_vectors([row[2]], dim)[0]

    def skipped(self) -> list[tuple[str, str]]:
        return self.conn.execute("SELECT path, reason FROM skipped ORDER BY path").fetchall()

    def forgotten(self) -> list[str]:
        try:
            return [row[0] for row in self.conn.execute("SELECT path FROM forgotten ORDER BY path")]
        except sqlite3.OperationalError:  # an index from before `forget` kept folders out: nothing forgotten
            return []

    def status(self) -> dict:
        model_id = self.model_id
        return {"photos": self.count("photos", model_id) if model_id else 0, "skipped": self.count("skipped"),
                "model": model_id, "index_dir": str(self.dir.resolve()),
                "db": str((self.dir / "index.db").resolve()), "last_run": self.meta.get("last_run"),
                "forgotten": self.forgotten()}


def folder_counts(index: Index, model_id: str | None) -> list:
    """Photos per indexed folder; photos outside the recorded folders (older indexes) count per parent folder."""
    from .photo_paths import is_under
    from .store import meta_folders

    roots = meta_folders(index.meta)
    counts: dict[str, int] = {r: 0 for r in roots}
    if model_id:
        for (path,) in index.conn.execute("SELECT path FROM photos WHERE model_id = ?", [model_id]):
            root = next((r for r in roots if is_under(path, [r])), None) or os.path.dirname(path)
            counts[root] = counts.get(root, 0) + 1
    from .results import Folder

    return [Folder(p, c) for p, c in sorted(counts.items())]


# ------------------------------------------------------------------------------------- text -> photos

def check_query(model, text: str) -> None:
    if not isinstance(text, str):
        raise QueryError(f"a query is text, not {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:   # undecodable bytes on a command line arrive as lone surrogates
        try:
            raw = text.encode("utf-8", "surrogateescape")   # the bytes as typed, shown as \xff escapes
        except UnicodeEncodeError:
            raw = text.encode("utf-8", "backslashreplace")
        raise QueryError(f"the query is not valid text (invalid UTF-8 bytes or a lone surrogate): "
                         f"{printable(raw.decode('utf-8', 'backslashreplace'))}") from None
    if len(text) > MAX_QUERY_CHARS:
        raise QueryError(f"query too long ({len(text)} characters; at most {MAX_QUERY_CHARS}): describe the photo "
                         f"in a sentence")
    reason = model.check_query(text)
    if reason:
        raise QueryError(reason)


def rank(index: Index, model, vectors, query: np.ndarray, n: int, score_fn,
         min_score: float | None = None, exclude: frozenset[str] = frozenset()) -> list[Hit]:
    if min_score is not None and math.isnan(min_score):
        raise QueryError("--min-score must be a number, not nan")
    # Removed photos may still be in the search files (`dead`): ask for that many more, and map ids to the
    # current paths, which leaves them out. The work is proportional to n (never more than the library holds),
    # not to the library.
    want = min(n + len(exclude), len(vectors)) + vectors.dead
    ids, scores = vectors.search(query, want, score_fn)
    ids = ids.tolist()
    if not ids:
        return []
    paths = index.paths(ids)
    hits = []
    for i in range(len(ids)):
        key, path = paths.get(ids[i], (None, None))
        if min_score is not None and scores[i] < min_score:
            break  # best first: the rest score lower
        if key is None or key in exclude or not math.isfinite(scores[i]):
            continue  # removed, the photo itself or its copies, or a NaN vector (a damaged row): never a result
        hits.append(Hit(len(hits) + 1, float(scores[i]), key, path))
        if len(hits) == n:
            break
    return hits


def encode_query(model, text: str) -> np.ndarray:
    """(1, D) the search vector of `text`, checked first (the model keeps the last queries' vectors, so a search,
    its levels and --min-score encode it once)."""
    check_query(model, text)
    query = model.encode_query([text])
    if not np.isfinite(query).all():
        raise QueryError(f"the model in {model.folder} gives no usable vector for this query (NaN): its weights "
                         f"are damaged")
    return query


def text_scorer(model, text: str):
    """(query vector, score function over photo vectors) of a checked query."""
    query = encode_query(model, text)
    score = (vector_index.dot_scorer(query[0]) if model.similarity_kind == "cosine"
             else lambda images: model.scores(np.asarray(images), query)[:, 0])
    return query[0], score


def search(index: Index, model, text: str, n: int = 10, min_score: float | None = None, narrow=None) -> list[Hit]:
    """`narrow(vectors)`: the search files seen through a search's filters (blended_search.Blended)."""
    if min_score is not None and math.isnan(min_score):
        raise QueryError("--min-score must be a number, not nan")
    query, score = text_scorer(model, text)
    vectors = index.vectors(model)
    return rank(index, model, narrow(vectors) if narrow else vectors, query, n, score, min_score)


# ------------------------------------------------------------------------------------- photo -> ...

def check_photo(path: str) -> str:
    path = os.path.abspath(path)
    try:
        is_folder = stat.S_ISDIR(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        raise QueryError(f"{printable(path)}: no such file") from None
    except OSError as e:  # a folder on the way without x permission is not "no such file"
        raise QueryError(f"{printable(path)}: {(e.strerror or str(e)).lower()}") from None
    if is_folder:
        raise QueryError(f"{printable(path)}: is a folder, not a photo")
    return path


def photo_vector(path: str, model, index: Index | None, embed_photo) -> np.ndarray:
    """The stored vector when the photo is indexed and unchanged, else the CNN's (`embed_photo(path)`)."""
    if index is not None and index.model_id == model.model_id:
        stored = index.stored_vector(path, model.model_id, model.vector_dim)
        if stored is not None and np.isfinite(stored).all():
            return stored
    vector = embed_photo(path)
    if not np.isfinite(vector).all():
        raise QueryError(f"{path}: the model gives no usable vector for it (NaN)")
    return vector


def same_photo(index: Index, path: str) -> frozenset[str]:
    """The keys of `path` and of every indexed file with the same bytes (its copies)."""
    from .photo_work import file_hash

    key = path_key(path)
    row = index.conn.execute("SELECT hash FROM photos WHERE path = ?", [key]).fetchone()
    try:
        content = row[0] if row else file_hash(path)
    except OSError:
        return frozenset([key])
    return frozenset([key, *(p for (p,) in index.conn.execute("SELECT path FROM photos WHERE hash = ?", [content]))])


def similar(index: Index, model, vector: np.ndarray, n: int = 10, exclude: str | None = None) -> list[Hit]:
    vectors = index.vectors(model)
    # Photo to photo: cosine between image vectors (an order score compares a caption to a photo). The photo
    # asked about and its byte-identical copies are not news: left out. The hubness coordinate stays out of it.
    vector = np.array(vector, np.float32)
    vector[model.content_dim:] = 0
    return rank(index, model, vectors, vector, n, vector_index.dot_scorer(vector),
                exclude=same_photo(index, exclude) if exclude else frozenset())


def caption_cache_dir() -> Path:
    from imgtxt.paths import cache_dir

    return cache_dir() / "captions"


MAX_CAPTIONS_BYTES = 64 << 20   # ~1M captions; /dev/zero or a huge file is refused, not read without bound


def read_captions(file: Path) -> list[str]:
    """A UTF-8 file of captions, one per line: a regular file of at most MAX_CAPTIONS_BYTES."""
    from imgtxt.model.images import NotRegularFile, regular_opener

    try:
        with open(file, "rb", opener=regular_opener) as f:
            data = f.read(MAX_CAPTIONS_BYTES + 1)
    except NotRegularFile:
        raise QueryError(f"{printable(str(file))}: not a regular file (captions are read from a text file)") from None
    except OSError as e:
        raise QueryError(f"{printable(str(file))}: cannot read captions ({e.strerror or e})") from None
    if len(data) > MAX_CAPTIONS_BYTES:
        raise QueryError(f"{printable(str(file))}: over {MAX_CAPTIONS_BYTES >> 20} MB of captions; pass a shorter list")
    try:
        captions = [line.strip() for line in data.decode("utf-8").splitlines() if line.strip()]
    except UnicodeDecodeError as e:
        raise QueryError(f"{printable(str(file))}: captions must be UTF-8 text (byte {e.start} is not)") from None
    if not captions:
        raise QueryError(f"{printable(str(file))}: no captions in it (one caption per line)")
    return captions


def caption_vectors(model, captions: list[str], on_compute=None, progress=None) -> np.ndarray:
    """Embeddings of a caption list, cached on disk by model id and caption content.

    The default bank is ~30k training captions: minutes of numpy GRU on a busy 2-core CPU, so it is done once
    per model, in batches of similar-length captions (padding steps are wasted work). `on_compute(n)` is
    called before a cache miss is computed, for a "this takes a while, once" message; `progress(done, total)`
    after each chunk of captions, for a progress bar.
    """
    from imgtxt.model.model_config import text_id

    digest = hashlib.sha256("\n".join(captions).encode("utf-8")).hexdigest()[:16]
    # The model id comes from model.json: only safe characters may reach a file name (no "../"). Keyed by every
    # setting and file that changes a caption's vector, not the weights alone (model_config.text_id).
    safe_id = re.sub(r"[^A-Za-z0-9_.-]", "_", text_id(model)).lstrip(".")
    path = caption_cache_dir() / f"{safe_id}-{digest}.npy"
    try:
        cached = np.load(path)
        if cached.shape == (len(captions), model.vector_dim) and np.isfinite(cached).all():
            return cached
    except (OSError, ValueError):
        pass
    if on_compute is not None:
        on_compute(len(captions))
    vectors = model.encode_text(captions, batch_size=128,
                                progress=(lambda done: progress(done, len(captions))) if progress else None)
    if not np.isfinite(vectors).all():   # damaged text weights: an error, never an empty answer nor a cached NaN
        raise QueryError(f"the model in {model.folder} gives no usable vector (NaN or inf) for "
                         f"{int((~np.isfinite(vectors).all(axis=1)).sum())} of {len(captions)} captions; "
                         f"are its weights damaged?")
    try:
        private_dirs(path.parent)
        with writing(path, 0o600) as f:  # a concurrent reader never sees half a file; Ctrl-C leaves no partial one
            np.save(f, vectors)
    except OSError:  # a read-only or full cache only costs speed
        pass
    return vectors


def bank_vectors(model, on_compute=None, progress=None, notices: list[str] | None = None) -> tuple[list, np.ndarray]:
    """The model's caption bank and its vectors: the ones stored with the model (package-model) when present and
    sound, else embedded once and cached."""
    from imgtxt.model.caption_bank import read_caption_vectors

    bank = model.caption_bank()
    if not bank:
        raise QueryError(f"the model in {model.folder} has no caption bank (captions.txt); pass --captions FILE")
    stored = read_caption_vectors(model, bank, notices)
    return bank, stored if stored is not None else caption_vectors(model, bank, on_compute, progress)


def caption(model, vector: np.ndarray, n: int = 5, captions: list[str] | None = None,
            on_compute=None, progress=None, notices: list[str] | None = None) -> list[Hit]:
    if captions is None:
        bank, vectors = bank_vectors(model, on_compute, progress, notices)
        if vectors.shape[1] not in (model.content_dim, model.vector_dim):  # another model's width: re-embed
            vectors = caption_vectors(model, bank, on_compute, progress)
    else:
        bank, vectors = captions, caption_vectors(model, captions, on_compute, progress)
    # Photo -> captions compares what the encoders say: the photo's hubness offset is the same for every
    # caption; the captions' own hubness (model/caption_offsets.py) is not.
    d = model.content_dim
    hubness = model.caption_hubness(len(bank) if captions is None else len(model.caption_bank()), notices)
    photo = vector[None, :d] if hubness is None else hubness.gate_photos(vector[None, :d])
    scores = model.scores(photo, vectors[:, :d])[0]
    if hubness is not None:
        scores = scores - (hubness.bank_penalties() if captions is None else hubness.penalties(vectors[:, :d]))
    if captions is None:   # the classifier's say on the bank's class lines (model/caption_prior.py)
        from imgtxt.model import caption_prior

        prior = caption_prior.load(model, bank, notices)
        scores = scores if prior is None else prior.apply(scores, vector[:d])
    order = np.argsort(-scores, kind="stable")
    hits, seen = [], set()
    for i in order:
        if bank[i].lower() in seen or not math.isfinite(scores[i]):  # the bank repeats common captions
            continue
        seen.add(bank[i].lower())
        hits.append(Hit(len(hits) + 1, float(scores[i]), bank[i]))
        if len(hits) == n:
            break
    return hits
