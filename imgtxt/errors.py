"""The one exception base: every error imgtxt reports to a user derives from `ImgtxtError`.

str(e) is a one-line reason; the CLI catches this one class and prints it (no traceback reaches a user),
and a Python caller can `except imgtxt.ImgtxtError`.
"""
from __future__ import annotations


class ImgtxtError(Exception):
    """Something imgtxt cannot do, with a one-line reason for the user."""


class Interrupted(ImgtxtError):
    """An index run stopped by Ctrl-C; what was committed is kept and searchable."""

    exit_code = 130  # the shell's convention for SIGINT

    def __init__(self, saved: int):
        super().__init__(f"interrupted: {saved} photos saved; run `imgtxt index` again to continue")
        self.saved = saved


class UsageError(ImgtxtError):
    """A command line that cannot work as given (a missing --data-dir, an unknown name)."""

    exit_code = 2


class ModelError(ImgtxtError):
    """A model folder that is missing, incomplete, or not an imgtxt model."""


def install_hint(extra: str) -> str:
    """The command that adds an optional part of imgtxt: in a checkout `pip install '.[EXTRA]'`; from an
    installed wheel the extra's packages by name (imgtxt is not on a package index, so `imgtxt[EXTRA]` would
    not resolve)."""
    from pathlib import Path

    if (Path(__file__).resolve().parent.parent / "pyproject.toml").is_file():
        return f"pip install '.[{extra}]' in the imgtxt checkout"
    try:
        from importlib.metadata import PackageNotFoundError, requires

        declared = requires("imgtxt") or []
    except PackageNotFoundError:
        declared = []
    marker = f'extra == "{extra}"'
    packages = [r.split(";")[0].replace(" ", "") for r in declared if marker in r.replace("'", '"')]
    return "pip install " + " ".join(f"'{p}'" for p in packages) if packages else f"install imgtxt's {extra} extra"


def missing_modules(*names: str) -> list[str]:
    """The modules of `names` that are not installed (checked without importing them)."""
    import importlib.util

    return [n for n in names if importlib.util.find_spec(n) is None]
