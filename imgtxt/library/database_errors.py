"""SQLite errors as one line for a user, around every `Library` method."""
from __future__ import annotations


def database_errors(method):
    """An SQLite error anywhere below becomes one StoreError line that names the recovery (busy, cannot write,
    or damaged: `imgtxt index --rebuild`)."""
    import functools
    import sqlite3

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        from .store import DB_NAME, classify

        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as e:
            raise classify(e, self.index_dir / DB_NAME) from None
    return wrapper
