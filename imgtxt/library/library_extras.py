"""`Library`'s methods over what people remember of their photos (photo_facts.py): duplicate groups, a photo's
date and place, and an overview of the library for the web page's home. Kept apart from photo_library.py, which
holds the core API; `Library` inherits these."""
from __future__ import annotations

from dataclasses import dataclass, field

from . import arguments as check
from .open_index import database_errors


@dataclass
class PhotoFacts:
    taken: str | None = None        # 'YYYY-MM-DDTHH:MM:SS', the wall-clock time where it was taken
    taken_offset: str | None = None
    taken_from: str | None = None   # 'exif' or 'mtime' (the file's date: a copy's is the copy's)
    latitude: float | None = None
    longitude: float | None = None
    city: str | None = None
    region: str | None = None
    country: str | None = None

    @property
    def place(self) -> str | None:
        names = [n for n in (self.city, self.region, self.country) if n]
        return ", ".join(dict.fromkeys(names)) or None


@dataclass
class Overview:
    photos: int
    folders: int
    dated: int                       # photos with an EXIF date
    placed: int                      # photos with a GPS position
    first: str | None                # the earliest and latest capture time
    last: str | None
    recent: list[tuple[int, str, str | None]] = field(default_factory=list)   # (id, path, taken), newest first
    places: list[tuple[str, int]] = field(default_factory=list)              # (country, photos), most first


class LibraryExtras:
    @database_errors
    def duplicates(self, threshold: float | None = None):
        """Groups of exact copies (same bytes) and near duplicates (image vectors with a cosine of at least
        `threshold`, default duplicates.NEAR_THRESHOLD), largest first. Never touches the files."""
        from .duplicates import NEAR_THRESHOLD, find

        threshold = check.optional_number(threshold, "threshold")
        if threshold is None:
            threshold = NEAR_THRESHOLD
        elif not 0.0 < threshold <= 1.0:
            raise check.ArgumentError(f"threshold must be a cosine above 0 and at most 1, not {threshold}")
        index = self._open()   # kept open between calls (open_index.py): not closed here
        model = self._query_model(index)
        index.vectors(model)   # the same refusals as a search: no run yet, another model, empty
        return find(index.conn, model.model_id, model.content_dim, model.vector_dim, threshold)

    @database_errors
    def facts(self, photo_id: int) -> PhotoFacts:
        """When and where an indexed photo was taken, as far as the index knows (all None before a run read it)."""
        record = self.photo(photo_id)
        row = self._open().conn.execute("SELECT taken, taken_offset, taken_from, latitude, longitude, city, "
                                        "region, country FROM photo_facts WHERE id = ?", [record.id]).fetchone()
        return PhotoFacts(*row) if row else PhotoFacts()

    @database_errors
    def overview(self, recent: int = 12) -> Overview:
        """Counts, the span of capture times, the most recent photos and the countries, for a home page."""
        recent = check.integer(recent, "recent", 0, 1000)
        status = self.status()
        conn = self._open().conn
        dated, placed, first, last = conn.execute(
            "SELECT sum(taken_from = 'exif'), sum(latitude IS NOT NULL), min(taken), max(taken) "
            "FROM photo_facts").fetchone()
        newest = conn.execute("SELECT p.id, p.path, f.taken FROM photos p JOIN photo_facts f USING (id) "
                              "WHERE p.model_id = ? ORDER BY f.taken DESC LIMIT ?",
                              [status.model, recent]).fetchall()
        countries = conn.execute("SELECT country, count(*) FROM photo_facts WHERE country IS NOT NULL "
                                 "GROUP BY country ORDER BY count(*) DESC, country LIMIT 20").fetchall()
        return Overview(status.photos, len(status.folders), dated or 0, placed or 0, first, last,
                        [tuple(r) for r in newest], [tuple(r) for r in countries])
