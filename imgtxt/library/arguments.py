"""The `Library` API's arguments, checked before anything runs: a wrong type or value is one line, never a
traceback and never a surprise (a str where a list of folders belongs is that one folder, not its characters
walked from "/"; an empty path is refused, not read as the current folder)."""
from __future__ import annotations

import math
import os
from pathlib import PurePath

from imgtxt.errors import ImgtxtError

MAX_BATCH_SIZE = 1024    # photos per CNN batch and per commit: 1,000,000 held 8.6 GB for 300 photos
MAX_WORKERS = 256


class ArgumentError(ImgtxtError):
    """A Library method called with an argument it cannot use (exit status 1, as other refusals of a value)."""


def _type_name(value) -> str:
    return type(value).__name__


def path(value, what: str = "path") -> str:
    """A str, bytes or os.PathLike naming a file or folder; never empty (an unset shell variable)."""
    if isinstance(value, (str, bytes, PurePath)) or hasattr(value, "__fspath__"):
        text = os.fsdecode(value)
        if not text.strip():
            raise ArgumentError(f"{what} is empty (an unset shell variable?): name a folder or photo")
        if "\0" in text:
            raise ArgumentError(f"{what} contains a NUL character")
        return text
    raise ArgumentError(f"{what} must be a path (str or pathlib.Path), not {_type_name(value)}")


def optional_path(value, what: str) -> str | None:
    return None if value is None else path(value, what)


def paths(value, what: str = "folders") -> list[str]:
    """One path or a list of them; a str is one folder."""
    if isinstance(value, (str, bytes, PurePath)) or hasattr(value, "__fspath__"):
        return [path(value, what)]
    if not isinstance(value, (list, tuple, set, frozenset)):
        raise ArgumentError(f"{what} must be a path or a list of paths, not {_type_name(value)}")
    if not value:
        raise ArgumentError(f"{what}: give at least one folder or photo")
    return [path(v, what) for v in value]


def strings(value, what: str) -> list[str]:
    """A list of str (a single str is one item)."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ArgumentError(f"{what} must be a list of str, not {_type_name(value)}")
    return list(value)


def captions(value, what: str = "captions") -> list[str]:
    """Captions to rank: a list of str (a single str is one caption), blank ones left out as the command's
    captions file drops its blank lines; none left is refused, as an empty captions file is."""
    kept = [c for c in strings(value, what) if c.strip()]
    if not kept:
        raise ArgumentError(f"{what} is empty: give at least one caption")
    return kept


def integer(value, what: str, low: int = 1, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentError(f"{what} must be an integer, not {_type_name(value)}")
    if value < low or (high is not None and value > high):
        raise ArgumentError(f"{what} must be {low} to {high}, not {value}" if high is not None
                            else f"{what} must be at least {low}, not {value}")
    return value


def _finite(value) -> float | None:
    """`value` as a finite float, or None: not a number, NaN, infinite, or an int past a float (10**400)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _shown(value) -> str:
    """A wrong number as a message shows it: a float as itself, a huge int by its size, anything else by type."""
    if isinstance(value, float):
        return str(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"an integer of {len(str(abs(value)))} digits" if abs(value) > 10**20 else str(value)
    return _type_name(value)


def optional_number(value, what: str) -> float | None:
    if value is None:
        return None
    number = _finite(value)
    if number is None:
        raise ArgumentError(f"{what} must be a finite number, not {_shown(value)}")
    return number


def score_or_level(value, what: str, levels: tuple[str, ...]) -> float | str | None:
    """A score (a finite number) or a confidence level's name; a number written as text is the CLI's to parse."""
    if isinstance(value, str) and value.strip().lower() in levels:
        return value.strip().lower()
    if value is None:
        return None
    number = _finite(value)
    if number is None:
        raise ArgumentError(f"{what} must be a finite number or one of {', '.join(levels)}, not {_shown(value)}")
    return number


def flag(value, what: str) -> bool:
    if not isinstance(value, bool):
        raise ArgumentError(f"{what} must be True or False, not {_type_name(value)}")
    return value


def text(value, what: str = "query") -> str:
    if not isinstance(value, str):
        raise ArgumentError(f"{what} must be a str, not {_type_name(value)}")
    return value


def callback(value, what: str):
    if value is not None and not callable(value):
        raise ArgumentError(f"{what} must be a function or None, not {_type_name(value)}")
    return value


def optional_text(value, what: str) -> str | None:
    return None if value is None else text(value, what)
