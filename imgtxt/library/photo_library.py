"""imgtxt as a Python library: a `Library` is one index folder and the model that reads it.

    from imgtxt import Library
    lib = Library("my-index")               # index folder; default $IMGTXT_INDEX_DIR or ~/.local/share/imgtxt
    lib.index(["~/Photos"])                 # incremental, like `imgtxt index`
    for match in lib.search("a dog on a beach", n=5):
        print(match.rank, match.score, match.path)

Every method returns plain dataclasses and raises `ImgtxtError` (one line, for a user) when it cannot answer.
This is a facade: scanning and embedding live in indexer.py, queries in query.py; the CLI and the web app
are thin layers over this class. Query methods never import torch unless a photo outside the index has to
go through the CNN.
"""
from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

from imgtxt import paths
from imgtxt.errors import ImgtxtError, Interrupted
from imgtxt.model.modelfile import ModelError, TrainedModel

from . import arguments as check
from .library_extras import LibraryExtras
from .open_index import KeptIndexes, one_blas_thread
from .open_index import database_errors as _database_errors
from .photo_paths import path_key
from .query import QueryError
from .results import CaptionMatch, Folder, PhotoMatch, PhotoRecord, Status, row_id_of
from .store import StoreError


def load_model(folder: Path | str | None) -> TrainedModel:
    try:
        return TrainedModel.load(folder)
    except ModelError as e:
        raise ModelError(f"unusable model: {e}") from None


class Library(LibraryExtras):
    """One photo index. `model`: a model folder (default: $IMGTXT_MODEL, else for queries the model the
    index was built with, else the model shipped with imgtxt). The index stays open between queries (each
    checks that it is still the one on disk, open_index.py); `close()` lets it go."""

    def __init__(self, index_dir: Path | str | None = None, model: Path | str | None = None):
        index_dir, model = check.optional_path(index_dir, "index_dir"), check.optional_path(model, "model")
        self.index_dir = paths.index_dir(index_dir)
        self._model_choice = paths.chosen_model_dir(model)
        self._models: dict[str, TrainedModel] = {}
        self._kept = KeptIndexes(self.index_dir)
        self.notices: list[str] = []   # one-line warnings of the last query (e.g. a damaged vector file)
        self.reading: str | None = None  # how the last search was read: "searching for: beach · taken in 2019"

    # ------------------------------------------------------------------ the model
    def _model(self, folder: Path | None) -> TrainedModel:
        key = str(folder)
        if key not in self._models:
            self._models[key] = load_model(folder)
        return self._models[key]

    def _query_model(self, index) -> TrainedModel:
        """The chosen model, else the one the index was built with, else the shipped default."""
        folder = self._model_choice or (index.model_folder() if index is not None else None)
        return self._model(folder or paths.default_model_dir())

    @property
    def model(self) -> TrainedModel:
        """The model queries use (loads it; its CNN part loads only when a photo must be embedded)."""
        index = self._open(required=False)
        try:
            return self._query_model(index)
        finally:
            _close(index)

    def _open(self, required: bool = True):
        try:
            return self._kept.get()
        except StoreError:
            if required:
                raise
            return None

    def close(self) -> None:
        """Let go of the index this thread holds open (its database connection and mapped vector files); the next
        query opens it again. Old vector files that an index run removed stay on disk while a Library holds them."""
        self._kept.drop()

    # ------------------------------------------------------------------ indexing
    @_database_errors
    def index(self, folders, exclude=(), batch_size: int = 32, workers: int = 2, progress: bool = False,
              log=None, notice=None, on_model_load=None, prune: bool = False, rebuild: bool = False,
              ray_address: str | None = None, previews: bool = False):
        """Index folders (or single photos) incrementally; returns indexer.Summary.

        `log(message)` gets per-file messages, `notice(message)` important ones, `on_model_load()` is called
        before the CNN loads (seconds). Ctrl-C keeps what was committed searchable and raises Interrupted.
        `prune`: drop the photos of a folder that is missing or empty now (kept by default: an unplugged drive
        looks the same). `rebuild`: build a new database from the photos, swapped in only when complete.
        `ray_address`: embed on a Ray cluster ('local', 'auto' or ray://host:port) instead of this process.
        `previews`: decode a photo's embedded preview (camera JPEGs' MPF picture, HEIC thumbnail) when it is at
        least the CNN's input size, instead of the full picture.
        """
        from .indexer import run_index

        folders, exclude = check.paths(folders), check.strings(exclude, "exclude")
        batch_size = check.integer(batch_size, "batch_size", 1, check.MAX_BATCH_SIZE)
        workers = check.integer(workers, "workers", 1, check.MAX_WORKERS)
        for name, value in {"progress": progress, "prune": prune, "rebuild": rebuild, "previews": previews}.items():
            check.flag(value, name)
        log, notice, on_model_load = (check.callback(f, n) for f, n in
                                      ((log, "log"), (notice, "notice"), (on_model_load, "on_model_load")))
        ray_address = check.optional_text(ray_address, "ray_address")
        model = self._model(self._model_choice or paths.default_model_dir())
        model.on_cnn_load = on_model_load
        roots = [os.path.abspath(os.path.expanduser(f)) for f in folders]
        try:
            summary = run_index(self.index_dir, roots, model, exclude, batch_size=batch_size, workers=workers,
                                progress=progress, log=log or (lambda message: None), notice=notice, prune=prune,
                                rebuild=rebuild, ray_address=ray_address, previews=previews)
        except KeyboardInterrupt:
            raise Interrupted(self._keep_committed(model, roots)) from None
        finally:
            model.on_cnn_load = None
        return summary

    def _keep_committed(self, model: TrainedModel, roots: list[str]) -> int:
        """After Ctrl-C: make the committed photos searchable (vector files + meta), as a finished run would."""
        from . import vector_build
        from .indexer import IndexLock
        from .store import Store, now_iso, write_folders

        with IndexLock(self.index_dir):
            store = Store(self.index_dir)
            try:
                saved = store.count_photos(model.model_id)
                if store.meta().get("model_id") in (None, model.model_id):  # never hide another model's index
                    dim = model.vector_dim
                    count = vector_build.sync(store, model.model_id, dim, model.similarity_kind).live
                    store.set_meta(model_id=model.model_id, model_folder=str(Path(model.folder).resolve()),
                                   similarity=model.similarity_kind, embed_dim=dim, last_run=now_iso(),
                                   photos=count)
                write_folders(store, add=roots)
            finally:
                store.close()
        return saved

    @_database_errors
    def forget(self, path: Path | str) -> int:
        """Remove a photo, or every photo under a folder, from the index (never from disk), and keep it out of
        later index runs until it (or a path inside it) is given to `index` again. Returns how many photos."""
        from . import vector_build
        from .indexer import IndexLock
        from .photo_paths import is_under
        from .store import Store, damaged, meta_int, write_folders

        path = check.path(path, "the path to forget")  # '' (an unset variable) would be the current folder
        _close(self._open())  # a clear "no index at" when there is none
        key = path_key(os.path.abspath(os.path.expanduser(path)))
        with IndexLock(self.index_dir):
            store = Store(self.index_dir)
            try:
                photos = [k for k in store.photo_rows() if is_under(k, [key])]
                skipped = [k for k in store.skipped_rows() if is_under(k, [key])]
                if not photos and not skipped:
                    raise StoreError(f"nothing indexed at {key}")
                meta = store.meta()
                if meta.get("model_id"):  # checked before anything is removed
                    dim, similarity = meta_int(meta, "embed_dim"), meta.get("similarity")
                    width = store.db.execute("SELECT length(embedding) FROM photos WHERE model_id = ? LIMIT 1",
                                             [meta["model_id"]]).fetchone()   # bytes of a float16 (float32) vector
                    if dim is not None and width and width[0] not in (2 * dim, 4 * dim):
                        dim = None   # the record does not fit the vectors: the sync after the removal would fail
                    if dim is None or similarity not in ("cosine", "order"):
                        raise damaged(store.db_path, f"its record of the embedding ({meta.get('embed_dim', '')[:20]!r}, "
                                                     f"{str(similarity)[:20]!r}) is unusable")
                with store.db.atomic():
                    store.remove_photos(photos)
                    store.remove_skipped(skipped)
                    store.remove_forgotten([f for f in store.forgotten() if is_under(f, [key])])
                    store.add_forgotten(key)
                if meta.get("model_id"):
                    # Removed photos stay in the vector files as dead ids (SQLite drops them) until too many do.
                    count = vector_build.sync(store, meta["model_id"], dim, similarity).live
                    store.set_meta(photos=count)
                write_folders(store, remove=key)
            finally:
                store.close()
        return len(photos)

    # ------------------------------------------------------------------ queries
    @_database_errors
    def search(self, text: str, n: int = 10, min_score: float | str | None = None, all_copies: bool = False,
               after=None, before=None, folder=None, near=None, like=None) -> list[PhotoMatch]:
        """Photos that match a sentence, best first. `min_score`: a score, or a level name (strong, possible,
        weak) of a calibrated model; each match carries its confidence and level when the model is calibrated.
        `after`, `before`, `folder`, `near`, `like`: remembered_search.py (`self.reading`: how it was read)."""
        from imgtxt.model.calibration import LEVELS

        from .confidence import min_score_of, search_confidence_of
        from .query_words import read_model_query
        from .remembered_search import index_words, ranker

        text, n = check.text(text), check.integer(n, "n")
        min_score = check.score_or_level(min_score, "min_score", LEVELS)
        all_copies = check.flag(all_copies, "all_copies")
        self.notices = []
        index = self._open()
        try:
            model = self._query_model(index)
            text = read_model_query(model, text, notes := [], index_words(index))
            search_confidence_of(model, self.notices)   # a damaged reference file is said once, here
            score, confidence = min_score_of(model, min_score, text)
            with one_blas_thread():
                ranked = ranker(index, model, text, score, after, before, folder, near, like)
                self.reading, matches = ranked.line(), _distinct(index, model, ranked, n, all_copies)
                # the typo line only when the reading does not say it already ("searching for: ...")
                self.notices += [note for note in notes if self.reading is None or not note.startswith("searching")]
                return ranked.rate(model, matches, confidence)
        finally:
            _close(index, self)

    @_database_errors
    def similar(self, photo: Path | str, n: int = 10, all_copies: bool = False) -> list[PhotoMatch]:
        """Indexed photos that look most like `photo` (indexed or not), best first, itself left out. No
        confidence: the calibration is of sentence-to-photo scores, not photo-to-photo ones."""
        from .query import check_photo, photo_vector, similar

        photo, n, all_copies = check.path(photo, "photo"), check.integer(n, "n"), check.flag(all_copies, "all_copies")
        self.notices = []
        index = self._open()
        try:
            model = self._query_model(index)
            path = check_photo(str(photo))
            vector = photo_vector(path, model, index, model.embed_photo)
            with one_blas_thread():
                return _distinct(index, model, lambda want: similar(index, model, vector, want, exclude=path),
                                 n, all_copies)
        finally:
            _close(index, self)

    @_database_errors
    def caption(self, photo: Path | str, n: int = 5, captions: list[str] | None = None,
                on_compute=None, progress=None) -> list[CaptionMatch]:
        """The captions that best describe a photo (default: the model's caption bank).

        The bank's vectors are read from the model when it ships them (the default model does), else computed
        once per model and cached: `on_compute(count)` is called before that,
        `progress(done, total)` during it."""
        from .confidence import rate
        from .query import caption, check_photo, photo_vector

        self.notices = []
        photo, n = check.path(photo, "photo"), check.integer(n, "n")
        captions = None if captions is None else check.captions(captions)
        on_compute, progress = check.callback(on_compute, "on_compute"), check.callback(progress, "progress")
        index = self._open(required=False)
        try:
            model = self._query_model(index)
            path = check_photo(str(photo))
            vector = photo_vector(path, model, index, model.embed_photo)
            hits = caption(model, vector, n, captions, on_compute=on_compute, progress=progress, notices=self.notices)
        finally:
            _close(index, self)
        return rate(model, [CaptionMatch(h.rank, h.score, h.value) for h in hits])

    @_database_errors
    def prepare_captions(self, on_compute=None, progress=None) -> None:
        """Have the model's caption bank's vectors ready now (read from the model, or embedded once per model and
        cached when it ships none), so the first caption is quick."""
        from .query import bank_vectors

        on_compute, progress = check.callback(on_compute, "on_compute"), check.callback(progress, "progress")
        index = self._open(required=False)
        try:
            model = self._query_model(index)
        finally:
            _close(index)
        if model.caption_bank():
            bank_vectors(model, on_compute, progress, self.notices)

    # ------------------------------------------------------------------ what is indexed
    @_database_errors
    def status(self) -> Status:
        from .query import folder_counts

        index = self._open()
        try:
            s = index.status()
            folders = folder_counts(index, s["model"])
        finally:
            _close(index)
        return Status(s["photos"], s["skipped"], s["model"], s["index_dir"], s["db"], s["last_run"], folders,
                      s["forgotten"])

    @_database_errors
    def skipped(self) -> list[tuple[str, str]]:
        """(path, reason) of every file that could not be indexed."""
        index = self._open()
        try:
            return index.skipped()
        finally:
            _close(index)

    @_database_errors
    def photo(self, photo_id: int) -> PhotoRecord:
        """An indexed photo by row id (the web app serves photos by id only)."""
        photo_id = check.integer(photo_id, "photo_id", 1, (1 << 63) - 1)
        row_id = row_id_of(photo_id)
        row = None
        if row_id is not None:
            index = self._open()
            try:
                row = index.conn.execute("SELECT id, path, path_bytes, hash, width, height FROM photos WHERE id = ?",
                                         [row_id]).fetchone()
            finally:
                _close(index)
        if row is None:
            raise QueryError(f"no indexed photo with id {str(photo_id)[:40]}")
        from .photo_paths import real_path

        return PhotoRecord(row[0], real_path(row[1], row[2]), row[3], row[4], row[5])

    @_database_errors
    def thumbnail(self, photo_id: int, size: int = 256) -> Path:
        """A JPEG thumbnail of an indexed photo as the file is now, made once and kept in the cache folder
        (private to this user). Raises ThumbnailCacheError, holding the picture, when it cannot be kept."""
        from .thumbnails import thumbnail

        return thumbnail(self.photo(photo_id).path, size)


# ---------------------------------------------------------------------------------------- helpers


def _close(index, library: "Library | None" = None) -> None:
    """After a query: its notices to the library (the index itself stays open for the next query)."""
    if index is not None and library is not None:
        library.notices.extend(index.notices)


def _distinct(index, model, ranked, n: int, all_copies: bool) -> list[PhotoMatch]:
    """`ranked(want)` -> query.Hits; identical files (same content hash) collapse into the best-ranked one,
    which lists the others as copies. Asks for more hits until n distinct photos or no more."""
    want = n
    while True:
        hits = ranked(want)
        rows = _rows_by_path(index, [h.value for h in hits])
        matches, seen = [], set()
        for h in hits:
            photo_id, content_hash = rows.get(h.value, (0, None))
            if not all_copies and content_hash is not None:
                if content_hash in seen:
                    continue
                seen.add(content_hash)
            matches.append(PhotoMatch(len(matches) + 1, h.score, h.value, photo_id, real=h.real))
        if all_copies or len(matches) >= n or len(hits) < want:
            break
        want *= 2
    matches = matches[:n]
    if not all_copies:
        copies = _paths_by_hash(index, model.model_id, [rows[m.path][1] for m in matches if m.path in rows])
        for m in matches:
            if m.path in rows:
                m.copies = [p for p in copies.get(rows[m.path][1], []) if p != m.path]
    return matches


def _rows_by_path(index, keys: list[str]) -> dict[str, tuple[int, str]]:
    if not keys:
        return {}
    marks = ",".join("?" * len(keys))
    sql = f"SELECT path, id, hash FROM photos WHERE path IN ({marks})"
    return {p: (i, h) for p, i, h in index.conn.execute(sql, keys).fetchall()}


def _paths_by_hash(index, model_id: str, hashes: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    if hashes:
        marks = ",".join("?" * len(hashes))
        sql = f"SELECT hash, path FROM photos WHERE model_id = ? AND hash IN ({marks}) ORDER BY path"
        for h, p in index.conn.execute(sql, [model_id, *hashes]).fetchall():
            out[h].append(p)
    return out


__all__ = ["Library", "PhotoMatch", "CaptionMatch", "Folder", "Status", "PhotoRecord", "ImgtxtError", "Interrupted"]
