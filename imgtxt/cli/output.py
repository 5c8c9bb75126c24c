"""Printing query results: a table on a terminal, tab-separated lines in a pipe, JSON lines with --json.

Results go to stdout and nothing else does, so `imgtxt search ... | cut -f3` and `jq` just work. A photo with
identical copies elsewhere in the index lists them (JSON "copies"; extra tab-separated fields).
"""
from __future__ import annotations

import json
import os
import sys

from imgtxt.errors import ImgtxtError
from imgtxt.safe_text import printable


def print_hits(hits, field: str = "path", as_json: bool = False, out=None, null: bool = False) -> None:
    """null: the paths only, each ended by a NUL byte and written as the file system's bytes (for xargs -0)."""
    out = out or sys.stdout
    if null:
        out.flush()
        binary = getattr(out, "buffer", None)
        data = b"".join(os.fsencode(getattr(h, "real", None) or h.value) + b"\0" for h in hits)
        if binary is not None:
            binary.write(data)
            binary.flush()
        else:
            out.write(data.decode("utf-8", "surrogateescape"))
        return
    if as_json:
        for h in hits:
            row = {"rank": h.rank, "score": round(h.score, 4), field: h.value}
            if getattr(h, "level", None) is not None:   # a calibrated model: its confidence and level
                row.update(confidence=round(h.confidence, 4), level=h.level)
            if getattr(h, "copies", None):
                row["copies"] = h.copies
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    elif out.isatty():
        rated = any(getattr(h, "level", None) is not None for h in hits)
        out.write(f"{'rank':>4}  {'score':>7}  {'level':<8}  {field}\n" if rated
                  else f"{'rank':>4}  {'score':>7}  {field}\n")
        for h in hits:
            copies = getattr(h, "copies", None)
            also = f"  (same photo: {', '.join(printable(c) for c in copies)})" if copies else ""
            level = f"{h.level or '':<8}  " if rated else ""
            out.write(f"{h.rank:>4}  {h.score:>7.3f}  {level}{printable(h.value)}{also}\n")
    else:
        for h in hits:  # identical copies as extra fields: `cut -f3` still gets one path per line
            out.write("\t".join([str(h.rank), f"{h.score:.4f}", printable(h.value),
                                  *(printable(c) for c in getattr(h, "copies", None) or [])]) + "\n")
    out.flush()


def print_status(status: dict, as_json: bool = False, out=None) -> None:
    out = out or sys.stdout
    if as_json:
        out.write(json.dumps(status) + "\n")
        return
    for key in ("photos", "skipped", "model", "index_dir", "db", "last_run"):
        out.write(f"{key + ':':<11}{printable(str(status[key]))}\n")


def print_duplicates(groups, as_json: bool = False, out=None) -> None:
    """One JSON object per group with --json; else a line per file, `group<TAB>kind<TAB>size<TAB>WxH<TAB>taken
    <TAB>path` in a pipe, and on a terminal each group under a heading."""
    out = out or sys.stdout
    for number, group in enumerate(groups, 1):
        if as_json:
            out.write(json.dumps({"group": number, **group.as_dict()}, ensure_ascii=False) + "\n")
            continue
        if out.isatty():
            alike = "the same bytes" if group.kind == "exact" else f"near duplicates, cosine >= {group.similarity:.3f}"
            out.write(f"{'' if number == 1 else chr(10)}group {number}: {len(group.photos)} files, {alike}\n")
        for p in group.photos:
            pixels = f"{p.width}x{p.height}" if p.width else "?"
            taken = (p.taken or "?").replace("T", " ") + (" (file date)" if p.taken_from == "mtime" else "")
            fields = [f"{p.size:>10}", f"{pixels:>11}", f"{taken:<31}", printable(p.path)]
            out.write(("  " + "  ".join(fields) if out.isatty()
                       else "\t".join([str(number), group.kind, *(f.strip() for f in fields)])) + "\n")
    out.flush()


class OutputError(ImgtxtError):
    """stdout cannot take the results: closed, disk full, a broken pipe, an encoding without the characters."""


class GuardedStdout:
    """sys.stdout for the length of a command: a write or flush that fails raises OutputError (one line)
    instead of a traceback. Everything else is the real stream's."""

    def __init__(self, stream):
        self._stream = stream

    def _failed(self, e: Exception):
        if isinstance(e, UnicodeEncodeError):
            bad = e.object[e.start:e.end] if isinstance(e.object, str) else ""
            encoding = getattr(self._stream, "encoding", None) or e.encoding
            return OutputError(f"cannot write {ascii(bad)} in the output's encoding {encoding}: set "
                               f"PYTHONIOENCODING=utf-8 (or a UTF-8 locale), or use -0")
        if isinstance(e, BrokenPipeError):   # `| head`: the reader has what it wanted; exit as cat would
            error = OutputError("stdout was closed by the reader (broken pipe)")
            error.quiet, error.exit_code = True, 141
            return error
        return OutputError(f"cannot write to stdout ({getattr(e, 'strerror', None) or e})")

    def write(self, data):
        if self._stream is None:
            raise OutputError("stdout is closed: nowhere to write the results")
        try:
            return self._stream.write(data)
        except (OSError, ValueError, UnicodeEncodeError) as e:   # ValueError: a closed file
            raise self._failed(e) from None

    def flush(self):
        if self._stream is not None:
            try:
                self._stream.flush()
            except (OSError, ValueError) as e:
                raise self._failed(e) from None

    def isatty(self) -> bool:
        try:
            return self._stream is not None and self._stream.isatty()
        except ValueError:
            return False

    @property
    def buffer(self):
        buffer = getattr(self._stream, "buffer", None)
        return None if buffer is None else GuardedStdout(buffer)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def silence_stdout() -> None:
    """After stdout failed: point fd 1 at /dev/null so the interpreter's last flush cannot print a traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass
