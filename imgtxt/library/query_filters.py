"""Reading what a search remembers besides what the photo shows: dates (`--after`, `--before`, a year, month or
season in the query), a folder (`--in`), a place (`--near`), and the query's words that name folders, files or
places. Dates are parsed by python-dateutil; the query's date words are dateutil's month names, seasons and
four-digit years, read only where they stand as dates (see `read_query`).

`Filters.allowed_ids(conn)` gives the photos a search may return (None: every photo); `word_bonus` the
photos whose folder, name or place holds the query's words, and how much that adds to their score.
"""
from __future__ import annotations

import os
import re
from datetime import date, datetime

from imgtxt.errors import ImgtxtError

from .name_words import words_of
from .photo_paths import path_key

SEASONS = {"spring": (3, 4, 5), "summer": (6, 7, 8), "autumn": (9, 10, 11), "fall": (9, 10, 11),
           "winter": (12, 1, 2)}   # the northern hemisphere's (documented)
AMBIGUOUS = {"may", "march", "fall"}   # also verbs and nouns: dates only after "in" / "of" or beside a year
LEADING = {"in", "of", "during", "from", "taken", "the"}
YEAR = re.compile(r"^(18[5-9]\d|19\d\d|20\d\d|21\d\d)$")
STOPWORDS = frozenset("a an the in on at of with and or to from for by my our is are near photo photos picture "
                      "pictures image images".split())
WORD_BONUS = 0.25      # added to the visual score of a photo whose folder, name or place holds every query word
COMMON_FRACTION = 0.5  # a word held by more than this fraction of the photos says nothing (the library's own name)
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]


class FilterError(ImgtxtError):
    """A date, folder or place that cannot be read."""


MONTH_STARTS = frozenset(m[:3].lower() for m in MONTHS)   # a cheap first look: most words are no month
_PARSER_INFO = []


def _month_number(word: str) -> int | None:
    if word[:3] not in MONTH_STARTS or (len(word) < 4 and word != "may"):   # "jan", "dec": too often no month
        return None
    if not _PARSER_INFO:
        from dateutil.parser import parserinfo

        _PARSER_INFO.append(parserinfo())
    return _PARSER_INFO[0].month(word)   # 1..12 or None; "sept" and "september" alike


def period(text: str, option: str) -> tuple[date, date]:
    """A year, month or day ("2019", "2019-06", "June 2019", "2019-06-14") as [first day, day after the last)."""
    from dateutil.parser import ParserError, parse

    text = str(text).strip()
    try:
        first = parse(text, default=datetime(1904, 1, 1))
        second = parse(text, default=datetime(1908, 2, 2))
    except (ParserError, ValueError, OverflowError):
        raise FilterError(f"{option} {text!r}: not a date (give a year, a month or a day: 2019, 2019-06, "
                          f"2019-06-14)") from None
    if first.year != second.year:
        raise FilterError(f"{option} {text!r}: give the year too (2019-06, June 2019)")
    start = first.date()
    if first.month != second.month:
        return date(start.year, 1, 1), date(start.year + 1, 1, 1)
    if first.day != second.day:
        end = date(start.year + (start.month == 12), start.month % 12 + 1, 1)
        return date(start.year, start.month, 1), end
    from datetime import timedelta

    return start, start + timedelta(days=1)


class Filters:
    """(A plain class, not a dataclass: every search imports this module, and a dataclass costs ~1 ms to make.)"""

    def __init__(self):
        self.after: date | None = None        # taken on or after
        self.before: date | None = None       # taken before (the day after --before's period)
        self.years: set[int] = set()
        self.months: set[int] = set()
        self.folder: str | None = None        # a path key: photos under it
        self.near: set[int] | None = None     # photo ids near --near's place
        self.notes: list[str] = []            # how the query and options were read, for the user

    def restricts(self) -> bool:
        return bool(self.after or self.before or self.years or self.months or self.folder or self.near is not None)

    def allowed_ids(self, conn, model_id: str) -> set[int] | None:
        if not self.restricts():
            return None
        sql = ["SELECT p.id FROM photos p LEFT JOIN photo_facts f ON f.id = p.id WHERE p.model_id = ?"]
        params: list = [model_id]
        if self.after:
            sql.append("f.taken >= ?")
            params.append(self.after.isoformat())
        if self.before:
            sql.append("f.taken < ?")
            params.append(self.before.isoformat())
        if self.years:
            sql.append(f"CAST(substr(f.taken, 1, 4) AS INTEGER) IN ({','.join('?' * len(self.years))})")
            params += sorted(self.years)
        if self.months:
            sql.append(f"CAST(substr(f.taken, 6, 2) AS INTEGER) IN ({','.join('?' * len(self.months))})")
            params += sorted(self.months)
        if self.folder:
            sql.append("(p.path = ? OR substr(p.path, 1, ?) = ?)")
            prefix = self.folder.rstrip(os.sep) + os.sep
            params += [self.folder, len(prefix), prefix]
        ids = {i for (i,) in conn.execute(" AND ".join(sql), params)}
        return ids if self.near is None else ids & self.near


def options(after=None, before=None, folder=None, near=None, conn=None) -> Filters:
    """The explicit filters, checked: each bad value is one line naming it."""
    filters = Filters()
    if after is not None:
        filters.after = period(after, "--after")[0]
        filters.notes.append(f"taken on or after {filters.after.isoformat()}")
    if before is not None:
        last = period(before, "--before")
        filters.before = last[1]
        filters.notes.append(f"taken before {last[1].isoformat()}")
    if filters.after and filters.before and filters.after >= filters.before:
        raise FilterError(f"--after {after} is not before --before {before}: no photo can match")
    if folder is not None:
        path = os.path.abspath(os.path.expanduser(str(folder)))
        filters.folder = path_key(path)
        filters.notes.append(f"in {filters.folder}")
    if near is not None:
        from .places import near_ids

        filters.near, note = near_ids(conn, str(near))
        filters.notes.append(note)
    return filters


def read_query(text: str, filters: Filters) -> str:
    """The query without its date words, which go into `filters` (years, months); returns the words left for the
    model. "beach 2019" -> "beach" (taken in 2019); "snow in december" -> "snow" (taken in December)."""
    tokens = text.split()
    if not any(YEAR.match(t.strip(".,;!?")) or t.strip(".,;!?").lower() in SEASONS or
               _month_number(t.strip(".,;!?").lower()) for t in tokens):
        return text   # the common case, without importing dateutil
    keep = [True] * len(tokens)
    years, months, said = set(), set(), []
    for i, token in enumerate(tokens):
        word = token.strip(".,;!?").lower()
        before = tokens[i - 1].lower() if i else ""
        beside_year = any(0 <= j < len(tokens) and YEAR.match(tokens[j].strip(".,;!?")) for j in (i - 1, i + 1))
        if YEAR.match(word):
            years.add(int(word))
            keep[i] = False
        elif word in SEASONS or _month_number(word):
            if word in AMBIGUOUS and before not in ("in", "of", "during") and not beside_year:
                continue
            months.update(SEASONS.get(word) or (_month_number(word),))
            said.append(word if word in SEASONS else MONTHS[_month_number(word) - 1])
            keep[i] = False
        else:
            continue
        j = i - 1   # "snow in (the) december": the connecting words go with the date
        while j >= 0 and keep[j] and tokens[j].lower() in LEADING:
            keep[j] = False
            j -= 1
    filters.years |= years
    filters.months |= months
    when = " ".join(said + [str(y) for y in sorted(years)])
    filters.notes.append(f"taken in {when}")
    return " ".join(t for t, k in zip(tokens, keep) if k)


def query_words(text: str) -> list[str]:
    return [w for w in dict.fromkeys(words_of(text)) if w not in STOPWORDS]


def word_bonus(conn, text: str, notes: list[str] | None = None) -> dict[int, float]:
    """photo id -> what the query's words found in its folder, name or place add to its score: WORD_BONUS times
    the fraction of the query's words it holds. A word most photos hold (the library's folder) counts for none.
    One indexed query for all the words: a plain search pays little more than that."""
    wanted = query_words(text)
    if not wanted:
        return {}
    form_of = {}
    for word in wanted:   # "dogs" finds "dog" and the other way round
        for form in (word, word + "s", word[:-1] if word.endswith("s") and len(word) > 3 else word):
            form_of.setdefault(form, word)
    by_word: dict[str, set[int]] = {}
    for form, photo_id in conn.execute(f"SELECT word, id FROM photo_words WHERE word IN "
                                       f"({','.join('?' * len(form_of))})", list(form_of)):
        by_word.setdefault(form_of[form], set()).add(photo_id)
    total = None
    hits: dict[int, int] = {}
    found = []
    for word in wanted:
        ids = by_word.get(word)
        if not ids:
            continue
        total = total if total is not None else conn.execute("SELECT count(*) FROM photos").fetchone()[0]
        if len(ids) > COMMON_FRACTION * total:
            continue
        found.append(word)
        for i in ids:
            hits[i] = hits.get(i, 0) + 1
    if found and notes is not None:
        notes.append(f"folder, file or place names with: {', '.join(found)}")
    return {i: WORD_BONUS * count / len(wanted) for i, count in hits.items()}
