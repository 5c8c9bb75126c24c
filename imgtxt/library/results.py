"""What the library API returns: plain dataclasses (library.py fills them; the CLI, --json and the web app
print them)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PhotoMatch:
    rank: int
    score: float
    path: str
    id: int                                             # the photo's row id in the index
    copies: list[str] = field(default_factory=list)     # other indexed paths with the same bytes
    real: str | None = None                             # the path to open, when it differs from `path`
    confidence: float | None = None   # the model's calibrated confidence in this result (None: not calibrated)
    level: str | None = None          # "strong", "possible" or "weak" (None: not calibrated)

    @property
    def value(self) -> str:  # what output.print_hits prints
        return self.path


@dataclass
class CaptionMatch:
    rank: int
    score: float
    text: str
    confidence: float | None = None
    level: str | None = None

    @property
    def value(self) -> str:
        return self.text


@dataclass
class Folder:
    path: str
    photos: int


@dataclass
class Status:
    photos: int
    skipped: int
    model: str | None
    index_dir: str
    db: str
    last_run: str | None
    folders: list[Folder]
    forgotten: list[str] = field(default_factory=list)   # kept out of `index` runs (imgtxt forget)

    def as_dict(self) -> dict:
        out = dict(self.__dict__)
        out["folders"] = [{"path": f.path, "photos": f.photos} for f in self.folders]
        return out


@dataclass
class PhotoRecord:
    id: int
    path: str
    hash: str
    width: int | None
    height: int | None


def row_id_of(photo_id) -> int | None:
    """A row id SQLite can hold (1 .. 2**63-1) from an int or its digits, else None (never a 5,000-digit
    int(): Python refuses those, and SQLite overflows past 2**63)."""
    if isinstance(photo_id, str):
        photo_id = photo_id.strip()
        if not photo_id.isascii() or not photo_id.isdigit() or len(photo_id) > 19:
            return None
        photo_id = int(photo_id)
    if isinstance(photo_id, bool) or not isinstance(photo_id, int) or not 0 < photo_id < 1 << 63:
        return None
    return photo_id
