"""Printing query results: a table on a terminal, tab-separated lines in a pipe, JSON lines with --json.

Results go to stdout and nothing else does, so `imgtxt search ... | cut -f3` and `jq` just work. A photo with
identical copies elsewhere in the index lists them (JSON "copies"; extra tab-separated fields).
"""
from __future__ import annotations

import json
import os
import sys

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
