"""The words of a name (a folder, a file, a place) as searches compare them."""
from __future__ import annotations

import re
import unicodedata

WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
ALTERNATION = re.compile(r"(?<=[0-9])(?=[A-Za-z])|(?<=[A-Za-z])(?=[0-9])")   # a switch between digits and letters


def words_of(text: str) -> list[str]:
    """Lower-cased words without accents, split on anything but letters and digits and on camelCase; numbers
    are left out (a file's counter says nothing; a year in a query is read as a date), and so are runs that
    switch between digits and letters three times or more (hashes)."""
    plain = unicodedata.normalize("NFKD", text)
    plain = "".join(c for c in plain if not unicodedata.combining(c))
    out = []
    for chunk in re.split(r"[^0-9A-Za-z]+", plain):
        if len(ALTERNATION.findall(chunk)) >= 3:
            continue   # an identifier ("1000268201_693b08cb0e", a hash): its letters are no words ("bed", "cafe")
        out += [w.lower() for w in WORD.findall(chunk) if not w.isdigit()]
    return out
