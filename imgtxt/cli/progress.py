"""Progress of long one-time work (embedding a caption bank): a tqdm bar on a terminal, and in a pipe or a log
a line on stderr every `every` seconds (a bar there would print nothing until the end)."""
from __future__ import annotations

import sys
import time


def say(message: str) -> None:
    """stderr, above a progress bar if one is showing; control characters in names escaped (one line)."""
    from tqdm import tqdm

    from imgtxt.safe_text import printable

    tqdm.write(printable(message), file=sys.stderr)


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


class CaptionProgress:
    """The one-time embedding of a caption bank: a message, then a bar with ETA (or periodic lines)."""

    def __init__(self, every: float = 30.0, stream=None):
        self.every, self.stream = every, stream

    def __enter__(self):
        self.bar, self.started, self.last_line = None, time.monotonic(), None
        return self

    def announce(self, count: int) -> None:
        say(f"imgtxt: embedding {count} captions once (cached for next time)...")

    def progress(self, done: int, total: int) -> None:
        stream = self.stream or sys.stderr
        if stream.isatty():
            from tqdm import tqdm

            if self.bar is None:
                self.bar = tqdm(total=total, unit="caption", file=stream)
            self.bar.update(done - self.bar.n)
            return
        now = time.monotonic()
        if self.last_line is None:
            self.last_line = now
        if now - self.last_line >= self.every or done == total:
            self.last_line = now
            spent = now - self.started
            left = f", about {_duration(spent / done * (total - done))} left" if 0 < done < total else ""
            stream.write(f"imgtxt: embedded {done}/{total} captions ({100 * done // max(total, 1)}%) "
                         f"in {_duration(spent)}{left}\n")
            stream.flush()

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
