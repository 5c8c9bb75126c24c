"""More of the world in a model's caption bank: photo descriptions from Conceptual Captions (`imgtxt extend-captions`).

The shipped bank holds Flickr8k's training captions (people, dogs, sport) and one "A photo of a <class>." line
per ImageNet class; a photo of a city street, a kitchen or a plate of food can only get the nearest of those.
Conceptual Captions (Sharma et al., ACL 2018; Google LLC: "may be freely used for any purpose") pairs web photos
with their alt-text, cleaned and with names replaced by hypernyms ("actor attends the premiere"). Its
validation file (Validation_GCC-1.1.0-Validation.tsv, 15,840 lines: caption TAB image URL) is read here; only
the captions are used, never the photos.

Alt-text is often not a description of what is seen ("how to add privacy to any window", "vector illustration
of a banner", "person, attended the fall runway show"), so a line is kept only if it reads like one:
4 to 16 words, no question or exclamation, no word of drawings, text or products, no hypernym that stands for a
name (person, actor, organization, city, ...), no first or second person, no reported speech. Kept lines are
tidied from the dataset's tokenised form ("close - up of a cat 's tail ." -> "Close-up of a cat's tail."),
near-duplicates removed (the same content words in any order, or a line already in the bank), and then chosen
greedily for coverage: each next line is the one whose content words the bank (old lines and lines chosen so
far) has used least, so a thousand lines about Christmas trees do not crowd out the one about a tram.
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

MIN_WORDS, MAX_WORDS = 4, 12
KNOWN_SHARE = 0.75   # of a line's content words, the share the bank already uses

# Words that mark alt-text which is not a description of a photo's content: drawings and graphics, text and
# documents, products and shopping, and the hypernyms Conceptual Captions puts where a name was.
NOT_SEEN = frozenset("""
illustration illustrations vector vectors cartoon cartoons drawing drawings drawn sketch sketches painting
paintings painted artwork art artist artists poster posters logo logos icon icons clipart clip template templates
font fonts pattern patterns seamless isolated render rendering 3d infographic diagram map chart graph banner
wallpaper wallpapers background backgrounds screenshot comic comics emblem symbol silhouette silhouettes
quote quotes text word words letter letters page cover book books magazine album song songs film films movie
movies tv episode series trailer show season chapter issue edition design designs designer idea ideas tips
sale buy shop price product products brand collection outfit outfits style styles fashion trends look looks
recipe recipes tutorial diy video thumb thumbnail stock photo photos image images picture pictures photograph
person people's persons actor actress actors celebrity politician organization organisation company business
industry country nation city state province county region team league club award awards festival event events
venture government agency university college school musician singer author rapper player players athlete
footballer character characters study theory plan program programme software homework success death named
ago annually weeks months years century anniversary tribute occasion occasions royalty free exclusive
perfect favorite favourite love loving beautiful best amazing awesome great cute sassy decadent
i i'm me my we our us you your you're he's she's they're it's
said says say will would could should can may might must
""".split())

_TOKEN_FIXES = (
    (re.compile(r"\s+([,.;:!?%)])"), r"\1"),        # "word ," -> "word,"
    (re.compile(r"([(])\s+"), r"\1"),
    (re.compile(r"\s+'s\b"), "'s"),                  # "cat 's" -> "cat's"
    (re.compile(r"\s+n't\b"), "n't"),
    (re.compile(r"(\w)\s+-\s+(\w)"), r"\1-\2"),      # "close - up" -> "close-up"
    (re.compile(r"\s{2,}"), " "),
)
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
STOPWORDS = frozenset("""
a an the and or of in on at to with by for from into onto over under near next its his her their this that
these those is are be being been it as up down out off through while during some one two three four five
several many few other another very large small big little
""".split())


def read_gcc_captions(path: Path | str) -> list[str]:
    """The caption column of a Conceptual Captions TSV (caption TAB url per line), in file order. A file that is
    not one (not UTF-8 text, or no line with a tab) is refused in one line."""
    from imgtxt.errors import UsageError

    captions, tabbed = [], 0
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                caption, tab, _ = line.partition("\t")
                tabbed += bool(tab)
                if tab and caption.strip():
                    captions.append(caption.strip())
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text; expected Conceptual Captions' TSV (caption TAB url)") from None
    if not tabbed:
        raise UsageError(f"{path}: no line of the form caption TAB url; expected Conceptual Captions' TSV")
    return captions


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def content_words(text: str) -> list[str]:
    return [w for w in words(text) if w not in STOPWORDS]


def looks_like_description(caption: str) -> bool:
    """True for a line that reads like a description of what a photo shows (the rules in the module doc)."""
    if any(c in caption for c in "?!:;\"#@$&*/|[]{}<>=_~^") or any(c.isdigit() for c in caption):
        return False
    tokens = words(caption)
    if not MIN_WORDS <= len(tokens) <= MAX_WORDS:
        return False
    return not any(t in NOT_SEEN for t in tokens) and not caption.lower().startswith(("how ", "what ", "why "))


def tidy(caption: str) -> str:
    """The dataset's tokenised text as a sentence: "close - up of a cat 's tail ." -> "Close-up of a cat's tail."."""
    text = caption.strip()
    for pattern, replacement in _TOKEN_FIXES:
        text = pattern.sub(replacement, text)
    text = text.rstrip(" .,")
    return text[:1].upper() + text[1:] + "." if text else text


def duplicate_key(caption: str) -> tuple[str, ...]:
    """Lines with the same content words in any order are near-duplicates ("a dog on the beach" and "the dog on
    a beach")."""
    return tuple(sorted(set(content_words(caption))))


def select_diverse(candidates: list[str], bank: list[str], count: int) -> list[str]:
    """Up to `count` candidates, near-duplicates of each other and of `bank` removed, chosen greedily so that each
    next line's content words are the least used so far (word use counted over `bank` and the lines chosen).
    A line's value is the mean of 1 / (1 + uses) over its distinct content words; ties keep file order. Only
    lines whose content words the bank mostly knows (KNOWN_SHARE) are candidates: a line of words no caption
    uses is seldom a description of a photo ("theory different mental abilities are biologically distinct")."""
    seen = {duplicate_key(line) for line in bank}
    uses = Counter(w for line in bank for w in set(content_words(line)))
    pool = []
    for line in candidates:
        key = duplicate_key(line)
        if key and key not in seen and sum(w in uses for w in key) >= KNOWN_SHARE * len(key):
            seen.add(key)
            pool.append((line, key))
    chosen: list[str] = []
    # lazy greedy: a line's value only falls as words get used, so a stale value is an upper bound
    import heapq

    def value(key):
        return sum(1.0 / (1 + uses[w]) for w in key) / len(key)

    heap = [(-value(key), i) for i, (_, key) in enumerate(pool)]
    heapq.heapify(heap)
    while heap and len(chosen) < count:
        stale, i = heapq.heappop(heap)
        line, key = pool[i]
        fresh = value(key)
        if heap and fresh < -heap[0][0] - 1e-12:
            heapq.heappush(heap, (-fresh, i))
            continue
        chosen.append(line)
        uses.update(key)
    return chosen


def world_captions(gcc_tsv: Path | str, bank: list[str], count: int) -> tuple[list[str], dict]:
    """The lines to add to `bank` from a Conceptual Captions TSV, and counts of what was dropped at each step."""
    raw = read_gcc_captions(gcc_tsv)
    described = [c for c in raw if looks_like_description(c)]
    tidied = [tidy(c) for c in described]
    chosen = select_diverse(tidied, bank, count)
    return chosen, {"read": len(raw), "descriptions": len(described), "chosen": len(chosen)}


def extend_bank(src: Path | str, dst: Path | str, lines: list[str], progress=None) -> dict:
    """Copy model folder `src` to `dst` with `lines` added to its caption bank (after the training captions,
    before the class-name captions) and the bank's vectors stored. Rows the source folder already stores are
    copied, not re-embedded (35,000 captions take ~20 min of CPU; the new lines alone, a minute or two); int8
    rows are re-quantised on the way, which moves a few values by one step (6 of the shipped 30,000 rows). The
    copy's caption hubness offsets, search corrections and calibrations are those of `src`: they depend on the
    bank, so the recipe's tune-search, calibrate, calibrate-search and tune-captions must be run on `dst`."""
    import shutil

    import numpy as np

    from imgtxt.model.caption_bank import write_caption_vectors
    from imgtxt.model.modelfile import TrainedModel

    from .caption_fit import class_name_rows

    src, dst = Path(src), Path(dst)
    if dst.exists():
        raise FileExistsError(f"{dst} exists; give a new folder")
    model = TrainedModel.load(src)
    bank = model.caption_bank()
    old = model.caption_bank_vectors()
    classes = set(class_name_rows(model, bank).tolist())
    known = set(bank)
    added = [line for line in dict.fromkeys(lines) if line not in known]
    new_bank = [b for i, b in enumerate(bank) if i not in classes] + added + [bank[i] for i in sorted(classes)]
    fresh = model.encode_text(added, batch_size=128, progress=progress)[:, :model.content_dim] if added \
        else np.zeros((0, old.shape[1]), np.float32)
    row_of = {line: i for i, line in enumerate(bank)}
    new_row = {line: i for i, line in enumerate(added)}
    vectors = np.stack([old[row_of[line]] if line in row_of else fresh[new_row[line]] for line in new_bank])
    shutil.copytree(src, dst)
    (dst / "captions.txt").write_text("\n".join(new_bank) + "\n", encoding="utf-8")
    storage = model.config.get("caption_vectors", {}).get("storage", "int8")
    record = write_caption_vectors(dst, vectors, storage)
    return {"added": len(added), "bank": len(new_bank), "record": record}
