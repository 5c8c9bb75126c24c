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
    """The pip command that installs one of imgtxt's extras, right for how imgtxt was installed. imgtxt is not
    on PyPI, so `pip install 'imgtxt[serve]'` finds nothing: from a source checkout the checkout itself is
    installed with the extra; from a wheel, that wheel with the extra, or else the extra's packages by name."""
    import shlex
    from importlib import metadata
    from pathlib import Path

    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file():
        return f"pip install {shlex.quote(f'{checkout}[{extra}]')}"
    try:
        version = metadata.version("imgtxt")
        marker = f'extra == "{extra}"'
        packages = [r.split(";")[0].strip() for r in metadata.requires("imgtxt") or []
                    if marker in r.replace("'", '"')]
    except metadata.PackageNotFoundError:
        version, packages = "0.1.0", []
    wheel = f"pip install 'imgtxt-{version}-py3-none-any.whl[{extra}]' (the wheel imgtxt was installed from)"
    return wheel + (f", or pip install {' '.join(shlex.quote(p) for p in packages)}" if packages else "")
