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
