"""The vector search seen through a search's filters and word bonuses (query_filters.py), with the interface the
plain search uses (`search(query, want, score_fn)`, `len`, `dead`), so ranking, copies and confidence work as
for any search.

- Filtered: the photos the filters allow. Up to EXACT_ROWS of them are scored straight from their SQLite rows
  (the same stored vectors the search files hold); more are taken from a ranking of the whole library.
- Bonus: a photo whose folder, name or place holds the query's words gets its bonus added to its visual score.
  The result is exact: any photo outside the bonus set scores what the visual ranking says, so the best `want`
  of (the visual top `want`) + (the bonus photos, each scored) are the best `want` of all.
"""
from __future__ import annotations

import numpy as np

from .store import decode_vectors

EXACT_ROWS = 50_000


def score_rows(conn, ids, model_id: str, dim: int, score_fn, chunk: int = 5_000) -> tuple[np.ndarray, np.ndarray]:
    """(ids, scores) of the given photos of this model, from their stored vectors."""
    ids = sorted(ids)
    out_ids, out_scores = [], []
    for start in range(0, len(ids), chunk):
        part = ids[start:start + chunk]
        rows = conn.execute(f"SELECT id, embedding FROM photos WHERE model_id = ? AND id IN ({','.join('?' * len(part))})",
                            [model_id, *part]).fetchall()
        if rows:
            out_ids.append(np.array([r[0] for r in rows], np.int64))
            out_scores.append(np.asarray(score_fn(decode_vectors([r[1] for r in rows], dim)), np.float32))
    if not out_ids:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    return np.concatenate(out_ids), np.concatenate(out_scores)


def top(ids: np.ndarray, scores: np.ndarray, want: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-scores, kind="stable")[:max(1, want)]
    return ids[order], scores[order]


class Blended:
    def __init__(self, vectors, conn, model_id: str, dim: int, allowed: set[int] | None = None,
                 bonus: dict[int, float] | None = None):
        self.vectors, self.conn, self.model_id, self.dim = vectors, conn, model_id, dim
        self.allowed, self.bonus = allowed, dict(bonus or {})
        if allowed is not None:
            self.bonus = {i: b for i, b in self.bonus.items() if i in allowed}

    def __len__(self) -> int:
        return len(self.allowed) if self.allowed is not None else len(self.vectors)

    @property
    def dead(self) -> int:
        return 0 if self.allowed is not None and len(self.allowed) <= EXACT_ROWS else self.vectors.dead

    def search(self, query: np.ndarray, want: int, score_fn) -> tuple[np.ndarray, np.ndarray]:
        if self.allowed is not None and len(self.allowed) <= EXACT_ROWS:
            ids, scores = score_rows(self.conn, self.allowed, self.model_id, self.dim, score_fn)
        else:
            whole = self.allowed is not None   # many allowed: rank everything, keep the allowed
            ids, scores = self.vectors.search(query, len(self.vectors) + self.vectors.dead if whole else want,
                                              score_fn)
            if whole:
                keep = np.isin(ids, np.fromiter(self.allowed, np.int64, len(self.allowed)))
                ids, scores = ids[keep], scores[keep]
            ranked = set(ids.tolist())
            missing = [i for i in self.bonus if i not in ranked]
            if missing:
                more_ids, more_scores = score_rows(self.conn, missing, self.model_id, self.dim, score_fn)
                ids, scores = np.concatenate([ids, more_ids]), np.concatenate([scores, more_scores])
        if self.bonus:
            scores = scores + np.array([self.bonus.get(i, 0.0) for i in ids.tolist()], np.float32)
        return top(np.asarray(ids, np.int64), np.asarray(scores, np.float32), want)


def by_time(conn, model_id: str, allowed: set[int] | None, bonus: dict[int, float], want: int):
    """A search with nothing for the model to read ("2019", "--near lisbon" alone): the allowed photos, those the
    query's words found first, newest first. Scores are the word bonuses (0 without)."""
    sql = ("SELECT p.id, f.taken FROM photos p LEFT JOIN photo_facts f ON f.id = p.id WHERE p.model_id = ? "
           "ORDER BY f.taken DESC, p.id")
    rows = [(i, taken) for i, taken in conn.execute(sql, [model_id])
            if (allowed is None or i in allowed) and (not bonus or i in bonus)]
    rows.sort(key=lambda r: -bonus.get(r[0], 0.0))   # stable: newest first within a bonus
    rows = rows[:want]
    return np.array([r[0] for r in rows], np.int64), np.array([bonus.get(r[0], 0.0) for r in rows], np.float32)
