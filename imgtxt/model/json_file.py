"""The model folder's JSON files (model.json, a GRU's vocab.json, the SSE and BoW vocabularies) read with a bound.

Each is parsed, or refused in one ModelError line: missing, over its size bound, not a regular file, not UTF-8,
not JSON, a number of thousands of digits (Python's int limit), nesting past the recursion limit. What the parsed
value must look like is checked by its reader.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from imgtxt.errors import ModelError


def read_json(path: Path, max_bytes: int, what: str, missing: str | None = None):
    """The parsed contents of `path`, or one ModelError line naming it; `what` says what the file should be,
    `missing` the line for a file that is not there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)   # a FIFO planted in a model folder must not hang a load
    except FileNotFoundError:
        raise ModelError(missing or f"{path}: missing") from None
    except OSError as e:
        raise ModelError(f"{path}: unreadable ({e.strerror or e})") from None
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ModelError(f"{path}: not a regular file")
        try:
            data = f.read(max_bytes + 1)
        except OSError as e:
            raise ModelError(f"{path}: unreadable ({e.strerror or e})") from None
    if len(data) > max_bytes:
        size = f"{max_bytes >> 20} MB" if max_bytes >= 1 << 20 else f"{max_bytes} bytes"
        raise ModelError(f"{path}: over {size}, not {what}")
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ModelError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except RecursionError:
        raise ModelError(f"{path}: nested too deeply to be {what}") from None
    except ValueError as e:   # JSONDecodeError, and the digit limit of int()
        raise ModelError(f"{path}: not valid JSON ({str(e).splitlines()[0][:200]})") from None

