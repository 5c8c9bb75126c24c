"""Tokenizer and vocabulary."""
import subprocess
import sys

import pytest

from imgtxt.model.vocab import PAD, UNK, Vocabulary, tokenize


def test_tokenize_is_nltk_treebank_lowercased():
    assert tokenize("A dog's running, on the BEACH.") == ["a", "dog", "'s", "running", ",", "on", "the", "beach", "."]


def test_light_tokenizer_is_nltks_own_class_and_skips_nltk_init():
    code = (
        "import sys\n"
        "from imgtxt.model.vocab import tokenize\n"
        "toks = tokenize('Two dogs aren\\'t here.')\n"
        "assert 'nltk' not in sys.modules, 'nltk package init ran'\n"
        "import nltk\n"
        "from nltk.tokenize import NLTKWordTokenizer\n"
        "assert NLTKWordTokenizer().tokenize('two dogs aren\\'t here.') == toks, toks\n"
        "from imgtxt.model.vocab import _tokenizer\n"
        "assert type(_tokenizer()) is NLTKWordTokenizer\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_vocabulary_min_count_unknown_and_round_trip(tmp_path):
    vocab = Vocabulary.build(["a dog runs", "a dog sits", "a cat"], min_count=2)
    assert vocab.words[:2] == [PAD, UNK]
    assert set(vocab.words[2:]) == {"a", "dog"}
    assert vocab.encode("A dog flies") == [vocab.index["a"], vocab.index["dog"], 1]
    path = tmp_path / "vocab.json"
    vocab.save(path)
    again = Vocabulary.load(path)
    assert again.words == vocab.words
    assert again.encode("a dog flies") == vocab.encode("a dog flies")
    assert vocab.known_fraction("a zebra") == 0.5


def test_loading_something_else_is_an_error(tmp_path):
    path = tmp_path / "vocab.json"
    path.write_text('{"words": ["x", "y"]}')
    with pytest.raises(ValueError, match="not an imgtxt vocabulary"):
        Vocabulary.load(path)
