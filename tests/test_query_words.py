"""Queries as people type them: typos corrected against the English word list, ties broken by the caption bank,
the English hint for other languages, and the fast path that loads no word list."""
from __future__ import annotations

import json

import pytest

from imgtxt.library import query_words
from imgtxt.library.query_words import ENGLISH_HINT, read_query


def known(*words):
    return set(words).__contains__


def test_typos_are_corrected_and_the_note_says_what_was_searched():
    bank = {"dog": 50, "running": 20, "the": 900, "grass": 30, "horse": 12, "field": 9}
    reading = read_query("a dgo runing on teh grsas", known("a", "on"), lambda: bank)
    assert reading.text == "a dog running on the grass"
    assert reading.note == "searching for: a dog running on the grass"
    assert read_query("A hrose in a feild!", known("a", "in"), lambda: bank).text == "A horse in a field!"


def test_only_words_the_caption_bank_uses_are_offered_and_it_breaks_ties():
    # "dgo" is one edit from do, dog, ago, ego, go, ...: by the dictionary's frequency alone "do" would win; only
    # the bank's words count, the most used first.
    assert read_query("a dgo", known("a"), lambda: {}).text == "a dgo"
    assert read_query("a dgo", known("a"), lambda: {"dog": 3}).text == "a dog"
    assert read_query("a dgo", known("a"), lambda: {"dog": 3, "go": 5}).text == "a go"
    # "quokka" has no English word one edit away; "quota" is two away, and offered only when the bank uses it
    reading = read_query("a quokka", known("a"), lambda: {})
    assert reading.text == "a quokka" and reading.note is None
    assert read_query("a quokka", known("a"), lambda: {"quota": 2}).text == "a quota"


def test_names_and_the_bank_s_own_words_are_left_alone():
    bank = {"port": 4, "cafe": 2, "cake": 9}
    assert read_query("a boat in Porto", known("a", "boat", "in"), lambda: bank).text == "a boat in Porto"
    assert read_query("a boat in porto", known("a", "boat", "in"), lambda: bank).text == "a boat in port"
    assert read_query("a cafe", known("a"), lambda: bank).text == "a cafe"   # the bank's word, not "cake"


def test_the_caption_bank_s_own_typos_are_corrected_only_against_a_far_more_used_word():
    # Flickr8k's captions write "feild" 3 times and "field" 997: the bank knowing a word is not enough when it
    # is the bank's typo; at 3 against 100 (less than BANK_TYPO_RATIO = 50 times as often) it stays
    reading = read_query("a hrose in a feild", known("a", "in"), lambda: {"horse": 40, "feild": 3, "field": 997})
    assert (reading.text, reading.note) == ("a horse in a field", "searching for: a horse in a field")
    assert read_query("a feild", known("a"), lambda: {"feild": 3, "field": 149}).text == "a feild"
    assert read_query("a feild", known("a"), lambda: {"feild": 3, "field": 150}).text == "a field"
    assert read_query("a feild", known("a"), lambda: {"feild": 3, "fields": 997}).text == "a feild"   # 2 edits
    assert read_query("an hdr photo", known("an", "photo"), lambda: {"hdr": 1, "her": 861}).text == "an hdr photo"


def test_a_name_in_the_class_lines_is_never_a_typo(tmp_path):
    # "A photo of a clumber." (a spaniel) is in the shipped bank; "climber" is one edit away and far more used
    from imgtxt.library.query_words import read_model_query

    class Model:
        class text:
            ascii = None

        @staticmethod
        def caption_bank():
            return ["A man is a climber ."] * 60 + ["A photo of a clumber."]

        @staticmethod
        def check_query(text):
            return None

    notes = []
    assert read_model_query(Model, "a clumber on the grass", notes) == "a clumber on the grass" and notes == []
    Model.caption_bank = staticmethod(lambda: ["A man is a climber ."] * 60 + ["A dog, a clumber."])
    assert read_model_query(Model, "a clumber on the grass", notes) == "a climber on the grass"   # not a name here


def test_known_words_load_no_word_list(monkeypatch):
    def refuse(language):
        raise AssertionError(f"the {language} word list was loaded for a query of known words")

    monkeypatch.setattr(query_words, "_dictionary", refuse)
    reading = read_query("A dog, on the beach.", known("a", "dog", "on", "the", "beach"), None)
    assert (reading.text, reading.note) == ("A dog, on the beach.", None)
    chinese = read_query("一只狗在海滩上奔跑", known(), None)   # no Latin letters: the hint, no word list either
    assert (chinese.text, chinese.note) == ("一只狗在海滩上奔跑", ENGLISH_HINT)
    assert read_query("?!", known(), None).note is None   # no words at all: check_query refuses it later


@pytest.mark.parametrize("query", ["un chien qui court sur la plage", "ein Hund läuft am Strand",
                                   "un perro corriendo en la playa"])
def test_other_languages_get_the_english_hint_and_are_not_corrected(query):
    reading = read_query(query, known("a", "la", "am", "un", "en"), lambda: {"dog": 5})
    assert (reading.text, reading.note) == (query, ENGLISH_HINT)


def test_english_words_the_model_lacks_are_left_alone():
    reading = read_query("motocross on a dirt track", known("on", "a", "dirt", "track"), lambda: {})
    assert (reading.text, reading.note) == ("motocross on a dirt track", None)


def test_search_says_what_it_searched_for(library, tmp_path):
    from conftest import write_photo

    for i in range(3):
        write_photo(tmp_path / "p" / f"{i}.jpg", seed=80 + i)
    library.run("index", tmp_path / "p", "--quiet")
    fixed = library.run("search", "a dog on the beach wiht a ball", "--json")
    assert "imgtxt: searching for: a dog on the beach with a ball" in fixed.stderr
    same = library.run("search", "a dog on the beach with a ball", "--json")
    assert "searching for" not in same.stderr
    assert [json.loads(x)["path"] for x in fixed.stdout.splitlines()] == \
        [json.loads(x)["path"] for x in same.stdout.splitlines()]
    # the tiny model knows none of these words: the refusal is the hint (the shipped model searches and hints)
    foreign = library.run("search", "un chien qui court sur la plage", ok=False)
    assert foreign.exit_code == 1 and foreign.stderr.strip() == f"imgtxt: {ENGLISH_HINT}"


# Sentences of other languages whose every word MiniLM's vocabulary knows ("le", "chat", "sur"), and English ones
# that hold another language's articles or names: the word lists' frequencies tell them apart.
def every_word_known(word):
    return True


@pytest.mark.parametrize("query", ["un chat sur le canapé", "le chat noir", "une femme qui court dans le parc",
                                   "la tour eiffel la nuit", "eine Katze auf dem Sofa", "una mujer con un paraguas rojo",
                                   "il gatto nero", "el gato"])
def test_a_sentence_of_known_words_in_another_language_gets_the_hint_and_no_correction(query):
    reading = read_query(query, every_word_known, lambda: {"suit": 40, "night": 30})
    assert (reading.text, reading.note) == (query, ENGLISH_HINT)   # "nuit" is never read as "suit"


@pytest.mark.parametrize("query", ["los angeles skyline", "la tour eiffel at night", "de la soul concert",
                                   "el capitan in yosemite", "a kid in a la liga shirt", "en route to the alps",
                                   "le mans race", "a street in montmartre"])
def test_english_with_another_language_s_articles_or_names_gets_no_hint(query):
    assert read_query(query, every_word_known, lambda: {}).note is None


def test_the_markers_are_each_far_more_frequent_in_another_language_than_in_english():
    english = query_words._dictionary("en").word_frequency
    others = [query_words._dictionary(lang).word_frequency for lang in query_words.OTHER_LANGUAGES]

    def share(freq, word):
        return (freq[word] + 1) / freq.total_words

    weak = [w for w in query_words.FOREIGN_MARKERS if max(share(f, w) for f in others) < 100 * share(english, w)]
    assert weak == []


def test_two_edits_only_for_words_of_five_letters_or_more():
    bank = {"boy": 500, "bicycle": 40}
    assert read_query("bbq", known(), lambda: bank).text == "bbq"          # "boy" is two edits away
    assert read_query("a bycicle", known("a"), lambda: bank).text == "a bicycle"
