"""Where imgtxt keeps things, resolved in one place.

- index folder: `--index DIR`, else $IMGTXT_INDEX_DIR, else $XDG_DATA_HOME/imgtxt (~/.local/share/imgtxt)
- cache folder (dataset features, caption vectors, thumbnails): $IMGTXT_CACHE_DIR, else $XDG_CACHE_HOME/imgtxt
  (~/.cache/imgtxt); an XDG variable holding a relative path is ignored, as the XDG spec says
- dataset folder: `--data-dir DIR`, else $IMGTXT_DATA_DIR
- model folder: `--model DIR`, else $IMGTXT_MODEL, else the default model that ships inside the package
  (weights/default at the top of a checkout, installed as imgtxt/weights/default in the wheel and sdist, so it
  is found without a source tree)

Files in them are replaced whole (`replacing`, `writing`): written under a temporary name beside the file, then
renamed over it, and the temporary file removed on any failure, Ctrl-C included.
"""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

from imgtxt.errors import ImgtxtError
from imgtxt.safe_text import printable

INDEX_ENV, CACHE_ENV, DATA_ENV, MODEL_ENV = "IMGTXT_INDEX_DIR", "IMGTXT_CACHE_DIR", "IMGTXT_DATA_DIR", "IMGTXT_MODEL"


def _home() -> Path:
    """The user's home folder; a one-line error where there is none (HOME unset and a uid without a passwd
    entry, as in some containers) rather than a folder guessed in the wrong place."""
    try:
        return Path.home()
    except (RuntimeError, KeyError):
        raise ImgtxtError(f"no home folder: HOME is not set and user id {os.getuid()} has no entry in the "
                          f"password database; set HOME, or {INDEX_ENV} and {CACHE_ENV}") from None


def _expand(path: Path | str) -> Path:
    """`~` and `~user` expanded; a path without them never needs a home folder."""
    path = Path(path)
    if not str(path).startswith("~"):
        return path
    try:
        return path.expanduser()
    except RuntimeError:
        if path.parts[0] == "~":
            _home()
        raise ImgtxtError(f"{printable(str(path))}: there is no user {printable(path.parts[0][1:])}") from None


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return _expand(value) if value else None


def _xdg(name: str) -> Path | None:
    """An XDG base folder from the environment; a relative one is ignored, as the XDG spec says (it would put
    the index or the cache under whatever the current folder is)."""
    value = os.environ.get(name)
    return Path(value) if value and os.path.isabs(value) else None


def index_dir(option: Path | str | None = None) -> Path:
    if option:
        return _expand(option)
    return _env_path(INDEX_ENV) or (_xdg("XDG_DATA_HOME") or _home() / ".local" / "share") / "imgtxt"


def cache_dir() -> Path:
    return _env_path(CACHE_ENV) or (_xdg("XDG_CACHE_HOME") or _home() / ".cache") / "imgtxt"


def data_dir(option: Path | str | None = None) -> Path | None:
    return _expand(option) if option else _env_path(DATA_ENV)


def default_model_dir() -> Path:
    package = Path(__file__).resolve().parent
    installed = package / "weights" / "default"       # a wheel or sdist install maps weights/ into the package
    checkout = package.parent / "weights" / "default"  # a checkout (editable install) keeps it at the top
    return installed if installed.is_dir() or not checkout.is_dir() else checkout


def chosen_model_dir(option: Path | str | None = None) -> Path | None:
    """The model the user asked for (`--model`, else $IMGTXT_MODEL), or None: the caller picks a default."""
    return _expand(option) if option else _env_path(MODEL_ENV)


def model_dir(option: Path | str | None = None) -> Path:
    return chosen_model_dir(option) or default_model_dir()


def private_dirs(folder: Path | str) -> Path:
    """`folder` and the missing folders above it created 0700 whatever the umask (a cache another user could write
    to could make "a cat" find the rocket); a folder left group- or world-writable by an older version is closed."""
    folder = Path(folder)
    missing = [folder]
    while not missing[-1].parent.exists():
        missing.append(missing[-1].parent)
    for each in reversed(missing):
        try:
            each.mkdir(mode=0o700)
        except FileExistsError:   # made by another process or thread meanwhile
            pass
    st = folder.stat()
    if st.st_mode & 0o022 and st.st_uid == os.getuid():
        os.chmod(folder, 0o700)
    return folder


@contextmanager
def replacing(path: Path | str) -> Iterator[Path]:
    """A temporary name beside `path` for the block to write: renamed over `path` when the block ends, so a reader
    never sees half a file; removed when the block raises anything (a full disk, Ctrl-C), and the error goes on."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")   # per process and thread
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise


@contextmanager
def writing(path: Path | str, mode: int = 0o666) -> Iterator[BinaryIO]:
    """`path` replaced whole by what the block writes to the yielded file (`replacing`), fsynced before the rename.
    A new file gets `mode` (less the umask); a link planted at the temporary name is refused, not followed."""
    with replacing(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, mode)
        with open(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
