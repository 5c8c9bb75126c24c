"""Queries as people type them: typos corrected against a real word list, and a hint when a query is not English.

The text encoders read English: "a dgo runing on teh grsas" or "un chien sur la plage" encode as other
sentences and find unrelated photos without a word of explanation. Here:
  - a word the model's own vocabulary knows is left alone (the fast path: no word list is loaded, so a query
    of known words costs nothing more);
  - a word that neither the model, the library's folder and place names, the caption bank nor an English
    dictionary knows (pyspellchecker's word-frequency lists) is replaced by its closest dictionary word that the
    model's caption bank uses (how people describe photos: edits alone reach "porno" from "porto", "quota" from
    "quokka"): edit distance 1 (a transposition counts as one), else 2; among equally close words the one the
    bank uses most wins ("dgo" -> "dog", not the more frequent "do"), then the dictionary's frequency. A
    capitalised word after the first is a name, left alone;
  - the caption bank has typos of its own (Flickr8k's captions write "feild" 3 times, "field" 997): a word of
    5 letters or more that only the bank knows is corrected when a dictionary word one edit away is used
    BANK_TYPO_RATIO times as often; never a thing the classifier names in the bank's class lines ("A photo of a
    clumber." is a spaniel, not a typo of "climber"), nor a short word ("hdr");
  - a query whose words are mostly unknown in English but known in another language the word lists cover, or
    that has letters but none of the Latin alphabet, is searched as typed, with a hint that imgtxt reads English.
What was searched is said on stderr ("searching for: a dog running on the grass").
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")   # letters of any alphabet, an apostrophe inside
OTHER_LANGUAGES = ("fr", "de", "es", "it")   # pyspellchecker's lists besides English (each ~0.2 s to load, once)
BANK_TYPO_RATIO = 50   # "feild" (3 uses) -> "field" (997); "cafe" (2) stays beside "cake" (9)
CLASS_LINE = re.compile(r"A photo of an? ")   # the caption bank's class lines (imgtxt add-concepts writes them)
ENGLISH_HINT = ("imgtxt reads English: this query has no English words, so its results are unrelated guesses; "
                "describe the photo in English")


@dataclass
class QueryReading:
    text: str                 # what is searched
    note: str | None = None   # one line for stderr: what was searched, or the English hint


def read_model_query(model, text: str, notices: list[str], also_known=None) -> str:
    """The query to search for `model`: read_query with the model's vocabulary and caption bank; its note goes
    to `notices`. `also_known(word)`: words the library itself knows (its folder and place names)."""
    wordpiece = getattr(model.text, "ascii", None)   # MiniLM's WordPiece vocabulary (other kinds: none)
    vocab = wordpiece.vocab if wordpiece is not None else {}

    bank: list[str] = []   # the caption bank's lines, read once and only for a query with an unknown word

    def bank_lines():
        if not bank:
            bank.extend(model.caption_bank())
        return bank

    def bank_words():
        from collections import Counter

        return Counter(w for line in bank_lines() for w in WORD.findall(line.lower()))

    def bank_names():   # the classifier's names (its class lines' words) are words, not the bank's typos
        return {w for line in bank_lines() if CLASS_LINE.match(line) for w in WORD.findall(line.lower())}

    reading = read_query(text, (lambda w: w in vocab or also_known(w)) if also_known else vocab.__contains__,
                         bank_words, bank_names)
    if reading.note == ENGLISH_HINT and model.check_query(reading.text):   # the model knows none of its words
        from .query import QueryError

        raise QueryError(ENGLISH_HINT)
    if reading.note:
        notices.append(reading.note)
    return reading.text


def read_query(text: str, known, bank_words=None, bank_names=None) -> QueryReading:
    """`known(word)`: whether the model's vocabulary has the lower-cased word (the fast path); `bank_words()`:
    a Counter of the caption bank's lower-cased words, asked only when a word is unknown; `bank_names()`: the
    bank's words that name things (never read as its typos)."""
    words = [m.group().lower() for m in WORD.finditer(text)]
    latin = [w for w in words if w.isascii()]
    if not latin:
        return QueryReading(text, ENGLISH_HINT if words else None)  # letters, none Latin: Chinese, Greek...
    if all(known(w) for w in words):
        return QueryReading(text)
    english = _dictionary("en")
    unknown = [w for w in words if not english.known([w])]
    if not unknown:
        return QueryReading(text)
    if len(unknown) * 3 >= len(words) and _reads_foreign(words, len(words) - len(unknown)):
        return QueryReading(text, ENGLISH_HINT)
    counts = bank_words() if bank_words is not None else {}
    names = None
    pieces, last, changed = [], 0, False
    for i, m in enumerate(WORD.finditer(text)):
        word = m.group().lower()
        if m.group()[0].isupper() and i > 0:   # a name (Porto, Sevilla): not a typo to correct
            continue
        if word in unknown and not known(word):
            if not counts.get(word):
                fixed = _correct(word, english, counts)
            else:   # a word only the bank knows: its typo, unless the bank names a thing with it
                names = names if names is not None else bank_names() if bank_names is not None else set()
                fixed = None if word in names else _bank_typo(word, english, counts)
            if fixed and fixed != word:
                pieces += [text[last:m.start()], fixed]
                last, changed = m.end(), True
    if not changed:
        return QueryReading(text)
    corrected = "".join(pieces) + text[last:]
    return QueryReading(corrected, f"searching for: {corrected}")


def _reads_foreign(words: list[str], english_known: int) -> bool:
    """Another language's word list knows at least two more of the words than English's (or all of one or two
    words that English does not know)."""
    for language in OTHER_LANGUAGES:
        lexicon = _dictionary(language)
        found = sum(1 for w in words if lexicon.known([w]))
        if found >= english_known + min(2, len(words) - english_known) and found > english_known:
            return True
    return False


def _correct(word: str, english, counts) -> str | None:
    """The closest English word the caption bank uses (edit distance 1, else 2), ties broken by the bank's use,
    then by the dictionary's frequency; None when nothing is close."""
    if len(word) < 3 or not word.isalpha():   # "ok", initials, numbers with letters: leave them
        return None
    for edits in (english.edit_distance_1, english.edit_distance_2):
        # only words people use to describe photos: one or two edits reach many others ("porto" -> "porno")
        close = [w for w in english.known(edits(word)) if counts.get(w, 0)]
        if close:
            return max(sorted(close), key=lambda w: (counts[w], english.word_usage_frequency(w)))
    return None


def _bank_typo(word: str, english, counts) -> str | None:
    """A word the caption bank uses but the dictionary does not know, read as the bank's own typo: the dictionary
    word one edit away that the bank uses most, if that is at least BANK_TYPO_RATIO times as often; else None."""
    if len(word) < 5 or not word.isalpha():
        return None
    close = [w for w in english.known(english.edit_distance_1(word))
             if counts.get(w, 0) >= BANK_TYPO_RATIO * counts[word]]
    return max(sorted(close), key=lambda w: (counts[w], english.word_usage_frequency(w))) if close else None


@lru_cache(maxsize=None)
def _dictionary(language: str):
    from spellchecker import SpellChecker

    return SpellChecker(language=language, distance=2)
