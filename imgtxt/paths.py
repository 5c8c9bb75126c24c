"""Where imgtxt keeps things, resolved in one place.

- index folder: `--index DIR`, else $IMGTXT_INDEX_DIR, else $XDG_DATA_HOME/imgtxt (~/.local/share/imgtxt)
- cache folder (dataset features, caption vectors, thumbnails): $IMGTXT_CACHE_DIR, else $XDG_CACHE_HOME/imgtxt
- dataset folder: `--data-dir DIR`, else $IMGTXT_DATA_DIR
- model folder: `--model DIR`, else $IMGTXT_MODEL, else the default model that ships inside the package
  (weights/default at the top of a checkout, installed as imgtxt/weights/default in the wheel and sdist, so it
  is found without a source tree)
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
    package = Path(__file__).resolve().parent
    installed = package / "weights" / "default"       # a wheel or sdist install maps weights/ into the package
    checkout = package.parent / "weights" / "default"  # a checkout (editable install) keeps it at the top
    return installed if installed.is_dir() or not checkout.is_dir() else checkout


def chosen_model_dir(option: Path | str | None = None) -> Path | None:
    """The model the user asked for (`--model`, else $IMGTXT_MODEL), or None: the caller picks a default."""
    return Path(option).expanduser() if option else _env_path(MODEL_ENV)


def model_dir(option: Path | str | None = None) -> Path:
    return chosen_model_dir(option) or default_model_dir()
