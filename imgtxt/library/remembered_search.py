"""A search as people remember photos: what it shows (the model), when (`--after`, `--before`, dates in the
query), where (`--near`), which folder (`--in`, and the query's words in folder, file and place names), and like
which photo (`--like`). `ranker` turns one into the `ranked(want) -> hits` that Library.search collapses into
distinct photos; a search with none of these is the plain vector search, plus one indexed word look-up.
"""
from __future__ import annotations

import sqlite3

import numpy as np

from . import query_filters
from .query import Hit, QueryError, check_photo, photo_vector, rank, same_photo, search, text_scorer
from .vector_index import dot_scorer

LIKE_WEIGHT = 0.5   # --like PHOTO TEXT: the photo's cosine and the text's score, half each


class Ranker:
    def __init__(self, ranked, visual: bool = True, reading: list[str] | None = None, bonus: dict | None = None,
                 text: str | None = None):
        self.ranked = ranked          # want -> list[Hit]
        self.visual = visual          # False: no model score (listed by date), so no confidence either
        self.reading = reading or []  # how the search was read, for the user (empty: as typed)
        self.bonus = bonus or {}      # photo id -> what its folder, name or place words added to its score
        self.text = text              # the words the model scored alone (None: --like): the confidence's query

    def __call__(self, want: int) -> list[Hit]:
        return self.ranked(want)

    def rate(self, model, matches: list, min_confidence: float | None = None) -> list:
        """Confidence from the model's score alone: the calibration knows nothing of folder words."""
        from .confidence import rate

        if not self.visual:
            return matches
        for m in matches:
            m.score -= self.bonus.get(m.id, 0.0)
        rated = rate(model, matches, min_confidence, self.text)
        for m in matches:
            m.score += self.bonus.get(m.id, 0.0)
        return rated

    def line(self) -> str | None:
        """"searching for: beach · taken in 2019", or None for a plain search."""
        return " · ".join(self.reading) if self.reading else None


def ranker(index, model, text: str, min_score, after=None, before=None, folder=None, near=None,
           like=None) -> Ranker:
    from . import arguments as check

    for name, value in (("after", after), ("before", before), ("near", near)):
        check.optional_text(value, name)
    folder, like = check.optional_path(folder, "folder"), check.optional_path(like, "like")
    conn = index.conn
    filters = query_filters.options(after, before, folder, near, conn)
    words = query_filters.read_query(text, filters) if text.strip() else ""
    bonus = query_filters.word_bonus(conn, words, filters.notes) if words.strip() else {}
    reading = [f"searching for: {words}" if words.strip() else "searching for: any photo"]
    if like is not None:
        reading[0] += f" like {like}"
    reading += filters.notes
    if words == text and not filters.restricts() and like is None:
        reading = []   # read as typed: no note (words found in folder names only rank, as the table shows)
    if not filters.restricts() and not bonus and like is None:
        return Ranker(lambda want: search(index, model, words, want, min_score), reading=reading, text=words)
    from . import blended_search   # only searches that narrow or blend (a plain search does not load it)

    allowed = filters.allowed_ids(conn, model.model_id)

    def narrow(vectors):
        return blended_search.Blended(vectors, conn, model.model_id, model.vector_dim, allowed, bonus)

    if like is not None:
        query, score, exclude = like_scorer(index, model, like, words)
        vectors = index.vectors(model)
        return Ranker(lambda want: rank(index, model, narrow(vectors), query, want, score, min_score, exclude),
                      reading=reading, bonus=bonus)
    if words.strip():
        try:
            text_scorer(model, words)
        except QueryError:
            if not bonus:
                raise
            words = ""   # words only the folders and places know: those photos, newest first
            reading = reading or [f"searching for: {text}", *filters.notes]
    if words.strip():
        return Ranker(lambda want: search(index, model, words, want, min_score, narrow), reading=reading, bonus=bonus,
                      text=words)
    index.vectors(model)   # the same refusals as any search (no run yet, another model, empty)
    return Ranker(lambda want: by_time(index, model, allowed, bonus, want), visual=False, reading=reading)


def index_words(index):
    """word -> whether the library's folder, file or place names hold it (typo correction leaves those alone)."""
    def known(word: str) -> bool:
        try:
            return index.conn.execute("SELECT 1 FROM photo_words WHERE word = ? LIMIT 1", [word]).fetchone() is not None
        except sqlite3.OperationalError:   # an index from before photo_words: nothing known
            return False
    return known


def by_time(index, model, allowed, bonus, want: int) -> list[Hit]:
    from . import blended_search

    ids, scores = blended_search.by_time(index.conn, model.model_id, allowed, bonus, want)
    paths = index.paths(ids.tolist())
    return [Hit(r + 1, float(s), *paths[i]) for r, (i, s) in enumerate(zip(ids.tolist(), scores.tolist()))
            if i in paths]


def like_scorer(index, model, like, text: str):
    """(query vector, score function, paths to leave out) of `--like PHOTO [TEXT]`: the photo's vector (its
    hubness coordinate left out, as `similar` does) and, with a text, the text's, weighted LIKE_WEIGHT each."""
    path = check_photo(str(like))
    vector = np.array(photo_vector(path, model, index, model.embed_photo), np.float32)
    vector[model.content_dim:] = 0
    photo_score = dot_scorer(vector)
    exclude = same_photo(index, path)
    if not text.strip():
        return vector, photo_score, exclude
    query, text_score = text_scorer(model, text)
    combined = LIKE_WEIGHT * vector + (1 - LIKE_WEIGHT) * query
    return combined, (lambda images: LIKE_WEIGHT * photo_score(images) + (1 - LIKE_WEIGHT) * text_score(images)), exclude
