"""Queries as people type them: typos corrected against a real word list, and a hint when a query is not English.

The text encoders read English: "a dgo runing on teh grsas" or "un chien sur la plage" encode as other
sentences and find unrelated photos without a word of explanation. Here:
  - a word the model's own vocabulary knows is left alone (the fast path: no word list is loaded, so a query
    of known words costs nothing more);
  - a word that neither the model, the library's folder and place names, the caption bank nor an English
    dictionary knows (pyspellchecker's word-frequency lists) is replaced by its closest dictionary word that the
    model's caption bank uses (how people describe photos: edits alone reach "porno" from "porto", "quota" from
    "quokka"): edit distance 1 (a transposition counts as one), else 2 for a word of five letters or more
    (two edits take "bbq" to "boy"); among equally close words the one the bank uses most wins ("dgo" -> "dog",
    not the more frequent "do"), then the dictionary's frequency. A capitalised word after the first is a name,
    left alone;
  - the caption bank has typos of its own (Flickr8k's captions write "feild" 3 times, "field" 997): a word of
    5 letters or more that only the bank knows is corrected when a dictionary word one edit away is used
    BANK_TYPO_RATIO times as often; never a thing the classifier names in the bank's class lines ("A photo of a
    clumber." is a spaniel, not a typo of "climber"), nor a short word ("hdr");
  - a query that reads as another language the word lists cover, or that has letters but none of the Latin
    alphabet, is searched as typed (never corrected), with a hint that imgtxt reads English. "Reads as": by the
    lists' word frequencies, the other language makes the query FOREIGN_MARGIN likelier per word than English
    does, and no common word of it is plainly English ("los angeles skyline" stays English). MiniLM's vocabulary
    knows "le", "chat" and "sur", so a query of known words is checked too when it holds one of
    FOREIGN_MARKERS, the other languages' articles and prepositions; English's own list knows them as well
    ("un chat sur le canapé" has one word English lacks), so counting unknown words alone cannot tell.
What was searched is said on stderr ("searching for: a dog running on the grass").
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")   # letters of any alphabet, an apostrophe inside
OTHER_LANGUAGES = ("fr", "de", "es", "it")   # pyspellchecker's lists besides English (each ~0.2 s to load, once)
TWO_EDITS_FROM = 5     # letters: "bycicle" -> "bicycle" takes two edits; "bbq" is left alone
BANK_TYPO_RATIO = 50   # "feild" (3 uses) -> "field" (997); "cafe" (2) stays beside "cake" (9)
CLASS_LINE = re.compile(r"A photo of an? ")   # the caption bank's class lines (imgtxt add-concepts writes them)
ENGLISH_HINT = ("imgtxt reads English: this query reads as another language, so its results are unrelated "
                "guesses; describe the photo in English")
# Articles and prepositions of the other languages, each 100x (and more) as frequent there as in English (a test
# checks it against the lists): only whether the lists are consulted for a query of words the model knows.
FOREIGN_MARKERS = frozenset(
    "le la les un une des du au aux sur dans avec et sous chez pour qui mon ma mes deux est de "     # fr
    "der das ein eine einen dem und mit im auf vom zum zur bei ist zwei "                             # de
    "el los las una del con en y por sobre mi dos "                                                    # es
    "il lo gli uno della nel sul di".split())                                                          # it
FOREIGN_MARGIN = 4.0    # natural log per word (x55): tests/test_query_words.py's foreign queries score 4.8-13.6
PLAINLY_ENGLISH = 20.0  # a word this many times as frequent in English as in each other list, and COMMON there
COMMON = 3e-7           # (~500 uses in English's list): "skyline" vetoes the hint; "eiffel" (318 uses) does not


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
    markers = FOREIGN_MARKERS.intersection(words)
    if all(known(w) for w in words) and not markers:
        return QueryReading(text)
    english = _dictionary("en")
    unknown = [w for w in words if not english.known([w])]
    if (markers or len(unknown) * 3 >= len(words)) and _reads_foreign(words):
        return QueryReading(text, ENGLISH_HINT)
    if not unknown:
        return QueryReading(text)
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


def _reads_foreign(words: list[str]) -> bool:
    """Another language's word list makes the words FOREIGN_MARGIN likelier per word than English's (unigram
    frequencies, add-one), and none of them is a common, plainly English word."""
    english = _dictionary("en").word_frequency

    def share(freq, w) -> float:
        return (freq[w] + 1) / freq.total_words

    if all(share(english, w) >= COMMON for w in words):   # "de la soul concert": the other lists stay unloaded
        return False

    def log_likelihood(freq) -> float:
        return sum(math.log(share(freq, w)) for w in words)

    base = log_likelihood(english)
    others = [_dictionary(language).word_frequency for language in OTHER_LANGUAGES]
    if not any(log_likelihood(freq) - base >= FOREIGN_MARGIN * len(words) for freq in others):
        return False

    def plainly_english(w) -> bool:
        return share(english, w) >= COMMON and all(share(english, w) >= PLAINLY_ENGLISH * share(f, w) for f in others)

    return not any(plainly_english(w) for w in words)


def _correct(word: str, english, counts) -> str | None:
    """The closest English word the caption bank uses (edit distance 1, else 2 for a word of TWO_EDITS_FROM
    letters or more), ties broken by the bank's use, then by the dictionary's frequency; None when nothing is
    close."""
    if len(word) < 3 or not word.isalpha():   # "ok", initials, numbers with letters: leave them
        return None
    ways = (english.edit_distance_1, english.edit_distance_2) if len(word) >= TWO_EDITS_FROM else \
        (english.edit_distance_1,)   # two edits of three or four letters reach almost any short word: "bbq" -> "boy"
    for edits in ways:
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
