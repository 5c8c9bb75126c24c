"""Printing query results: a table on a terminal, tab-separated lines in a pipe, JSON lines with --json.

Results go to stdout and nothing else does, so `imgtxt search ... | cut -f3` and `jq` just work.
"""
from __future__ import annotations

import json
import sys


def print_hits(hits, field: str = "path", as_json: bool = False, out=None) -> None:
    out = out or sys.stdout
    if as_json:
        for h in hits:
            out.write(json.dumps({"rank": h.rank, "score": round(h.score, 4), field: h.value}, ensure_ascii=False) + "\n")
    elif out.isatty():
        out.write(f"{'rank':>4}  {'score':>7}  {field}\n")
        for h in hits:
            out.write(f"{h.rank:>4}  {h.score:>7.3f}  {h.value}\n")
    else:
        for h in hits:
            out.write(f"{h.rank}\t{h.score:.4f}\t{h.value}\n")
    out.flush()


def print_status(status: dict, as_json: bool = False, out=None) -> None:
    out = out or sys.stdout
    if as_json:
        out.write(json.dumps(status) + "\n")
        return
    for key in ("photos", "skipped", "model", "index_dir", "db", "last_run"):
        out.write(f"{key + ':':<11}{status[key]}\n")
