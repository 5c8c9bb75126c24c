"""BERT's uncased WordPiece for ASCII text, in Python: the tokens HF `tokenizers` gives, without loading it.

Why: a cold `imgtxt search` spends ~20 ms in `Tokenizer.from_file` (building its 30,522-word tables) and ~9 ms
importing `tokenizers`, for a query of a few words. Reading the vocabulary from tokenizer.json and splitting an
ASCII query by BERT's rules costs a few ms. Anything beyond ASCII (accents, CJK, other scripts and their
normalisation) goes to `tokenizers` itself, and so does any tokenizer.json that is not the plain BERT uncased
setup described below. tests/test_text_encoders.py checks the two agree on every ASCII character, on Flickr8k's
captions and on random ASCII strings.

The rules, for ASCII (HF's BertNormalizer with clean_text, lowercase; BertPreTokenizer; WordPiece; a
[CLS] $A [SEP] template; truncation to max_length tokens in all):
- \\t, \\n, \\r and space separate words; every other control character (0-31, 127) is dropped;
- letters are lowercased;
- each punctuation character (!"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~) is a word of its own;
- a word longer than max_input_chars_per_word is [UNK]; else it is split greedily into the longest pieces in
  the vocabulary, "##" before every piece but the first; a word that cannot be split is one [UNK].
"""
from __future__ import annotations

PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
SEPARATORS = frozenset(" \t\n\r")
DROPPED = frozenset(chr(c) for c in (*range(32), 127)) - SEPARATORS


class AsciiWordPiece:
    def __init__(self, vocab: dict[str, int], unk: str, cls: str, sep: str, prefix: str, max_chars: int,
                 max_length: int):
        self.vocab, self.prefix, self.max_chars, self.max_length = vocab, prefix, max_chars, max_length
        self.unk, self.cls, self.sep = vocab[unk], vocab[cls], vocab[sep]
        self.added: tuple[str, ...] = ()   # special tokens' texts: `tokenizers` matches them in the raw text

    def applies(self, text: str) -> bool:
        """Whether `encode` gives `tokenizers`' answer for `text`: ASCII, naming no special token."""
        return text.isascii() and not any(token in text for token in self.added)

    @classmethod
    def from_tokenizer_json(cls, config, max_length: int) -> AsciiWordPiece | None:
        """From the parsed tokenizer.json when it is BERT's uncased setup (else None: use `tokenizers`)."""
        try:
            model, normalizer = config["model"], config["normalizer"]
            post = config["post_processor"]
            plain = (model["type"] == "WordPiece" and normalizer["type"] == "BertNormalizer"
                     and normalizer["clean_text"] is True and normalizer["lowercase"] is True
                     and normalizer["strip_accents"] in (None, True)
                     and config["pre_tokenizer"] == {"type": "BertPreTokenizer"}
                     and post["type"] == "TemplateProcessing"
                     and [_piece(p) for p in post["single"]] == [("[CLS]", 0), ("A", 0), ("[SEP]", 0)]
                     and isinstance(model["vocab"], dict) and isinstance(model["unk_token"], str)
                     and isinstance(model["continuing_subword_prefix"], str)
                     and isinstance(model["max_input_chars_per_word"], int)
                     and not config.get("added_tokens_decoder") and _specials_in_vocab(config, model["vocab"]))
            # str keys, int ids (not bool): the types' sets, built in C (a loop over 30k entries was ~10 ms of
            # a cold search)
            vocab = model["vocab"]
            if not plain or not (set(map(type, vocab)) <= {str} and set(map(type, vocab.values())) <= {int}):
                return None
            cls_id, sep_id = (post["special_tokens"][name]["ids"] for name in ("[CLS]", "[SEP]"))
            if cls_id != [model["vocab"].get("[CLS]")] or sep_id != [model["vocab"].get("[SEP]")]:
                return None
            wordpiece = cls(model["vocab"], model["unk_token"], "[CLS]", "[SEP]",
                            model["continuing_subword_prefix"], model["max_input_chars_per_word"], max_length)
            wordpiece.added = tuple(t["content"] for t in config.get("added_tokens", []))
            return wordpiece
        except (KeyError, TypeError, AttributeError, ValueError):
            return None

    def words(self, text: str) -> list[str]:
        words, word = [], []
        for ch in text.lower():
            if ch in SEPARATORS or ch in PUNCTUATION:
                if word:
                    words.append("".join(word))
                    word = []
                if ch in PUNCTUATION:
                    words.append(ch)
            elif ch not in DROPPED:
                word.append(ch)
        if word:
            words.append("".join(word))
        return words

    def pieces(self, word: str) -> list[int]:
        if len(word) > self.max_chars:
            return [self.unk]
        ids, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else self.prefix + word[start:end]
                found = self.vocab.get(piece)
                if found is not None:
                    ids.append(found)
                    start = end
                    break
            else:
                return [self.unk]
        return ids

    def encode(self, text: str) -> list[int]:
        """[CLS] pieces [SEP] of an ASCII text, max_length in all."""
        ids = [i for word in self.words(text) for i in self.pieces(word)]
        return [self.cls, *ids[:max(0, self.max_length - 2)], self.sep]


def _piece(item) -> tuple[str, int]:
    (value,) = item.values()   # {"SpecialToken": {...}} or {"Sequence": {...}}
    return value["id"], value["type_id"]


def _specials_in_vocab(config, vocab) -> bool:
    """Added tokens that are BERT's specials only (each in the vocabulary under its own id): a tokenizer.json
    with other added tokens matches them before WordPiece, which this does not."""
    return all(isinstance(t, dict) and t.get("special") is True and vocab.get(t.get("content")) == t.get("id")
               for t in config.get("added_tokens", []))


# ------------------------------------------------------------------------- the vocabulary, cached as lines
# Parsing tokenizer.json (466 KB, nearly all of it the vocabulary) was 8-15 ms of a cold search. Its vocabulary
# is kept in the cache folder as one token per line under a JSON header, named by the sha256 of the
# tokenizer.json it came from and checked by the sha256 of its lines: splitting them costs ~2 ms. Anything
# unexpected (a missing, garbled or foreign file; an unwritable cache) falls back to parsing tokenizer.json.
CACHE_FORMAT = 1


def load(source: bytes, max_length: int) -> AsciiWordPiece | None:
    """The WordPiece of tokenizer.json's bytes (None: not BERT's plain setup, use `tokenizers`)."""
    import hashlib
    import json

    path = _cache_path(hashlib.sha256(source).hexdigest())
    cached = _read_cache(path, max_length) if path is not None else None
    if cached is not None:
        return cached
    try:
        wordpiece = AsciiWordPiece.from_tokenizer_json(json.loads(source), max_length)
    except (ValueError, RecursionError):
        return None
    if wordpiece is not None and path is not None:
        _write_cache(path, wordpiece)
    return wordpiece


def _cache_path(key: str):
    from imgtxt.paths import cache_dir

    try:
        return cache_dir() / "tokenizers" / f"{key}.txt"
    except (OSError, RuntimeError):   # no home folder to put a cache in
        return None


def _read_cache(path, max_length: int) -> AsciiWordPiece | None:
    import hashlib
    import json

    try:
        head, _, body = path.read_bytes().partition(b"\n")
        header = json.loads(head)
        if header.get("format") != CACHE_FORMAT or hashlib.sha256(body).hexdigest() != header.get("sha256"):
            return None
        tokens = body.decode("utf-8").split("\n")
        if len(tokens) != header["count"]:
            return None
        wordpiece = AsciiWordPiece(dict(zip(tokens, range(len(tokens)))), header["unk"], "[CLS]", "[SEP]",
                                   header["prefix"], header["max_chars"], max_length)
        wordpiece.added = tuple(header["added"])
        return wordpiece
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _write_cache(path, wordpiece: AsciiWordPiece) -> None:
    """Only a vocabulary whose ids are 0..n-1 and whose tokens hold no newline can be lines."""
    import hashlib
    import json

    from imgtxt.paths import private_dirs, writing

    tokens = sorted(wordpiece.vocab, key=wordpiece.vocab.__getitem__)
    if [wordpiece.vocab[t] for t in tokens] != list(range(len(tokens))) or any("\n" in t for t in tokens):
        return
    body = "\n".join(tokens).encode("utf-8")
    unk = tokens[wordpiece.unk]
    header = {"format": CACHE_FORMAT, "count": len(tokens), "sha256": hashlib.sha256(body).hexdigest(), "unk": unk,
              "prefix": wordpiece.prefix, "max_chars": wordpiece.max_chars, "added": list(wordpiece.added)}
    try:
        private_dirs(path.parent)
        with writing(path, 0o600) as f:
            f.write(json.dumps(header).encode("utf-8") + b"\n" + body)
    except OSError:   # a read-only or full cache only costs speed
        pass
