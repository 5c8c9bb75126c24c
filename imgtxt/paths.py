"""Where imgtxt keeps things, resolved in one place.

- index folder: `--index DIR`, else $IMGTXT_INDEX_DIR, else $XDG_DATA_HOME/imgtxt (~/.local/share/imgtxt)
- cache folder (dataset features, caption vectors, thumbnails): $IMGTXT_CACHE_DIR, else $XDG_CACHE_HOME/imgtxt
- dataset folder: `--data-dir DIR`, else $IMGTXT_DATA_DIR
- model folder: `--model DIR`, else $IMGTXT_MODEL, else the default model that ships inside the package
  (imgtxt/weights/default, package data in the wheel and sdist, so it is found without a source tree)
"""
from __future__ import annotations

import os
from pathlib import Path

INDEX_ENV, CACHE_ENV, DATA_ENV, MODEL_ENV = "IMGTXT_INDEX_DIR", "IMGTXT_CACHE_DIR", "IMGTXT_DATA_DIR", "IMGTXT_MODEL"


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value).expanduser() if value else None


def index_dir(option: Path | str | None = None) -> Path:
    if option:
        return Path(option).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return _env_path(INDEX_ENV) or Path(base) / "imgtxt"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return _env_path(CACHE_ENV) or Path(base) / "imgtxt"


def data_dir(option: Path | str | None = None) -> Path | None:
    return Path(option).expanduser() if option else _env_path(DATA_ENV)


def default_model_dir() -> Path:
    return Path(__file__).resolve().parent / "weights" / "default"


def chosen_model_dir(option: Path | str | None = None) -> Path | None:
    """The model the user asked for (`--model`, else $IMGTXT_MODEL), or None: the caller picks a default."""
    return Path(option).expanduser() if option else _env_path(MODEL_ENV)


def model_dir(option: Path | str | None = None) -> Path:
    return chosen_model_dir(option) or default_model_dir()
