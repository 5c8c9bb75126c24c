"""More of the world in the caption bank (`imgtxt extend-captions`, research/caption_sources.py): which alt-text
lines read as photo descriptions, how they are tidied, de-duplicated and chosen for coverage, and the extended
model folder (old vectors copied, new lines embedded, the bank's record right)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest


def test_lines_that_describe_a_photo_are_kept_and_alt_text_that_does_not_is_dropped():
    from imgtxt.research.caption_sources import looks_like_description

    assert looks_like_description("an angler fishes river on a snowy day .")
    assert looks_like_description("cruise ship and boats by the dock")
    assert not looks_like_description("how many triangles are there in this picture")   # a question
    assert not looks_like_description("vector illustration of a banner for holiday with colorful kites .")
    assert not looks_like_description("person , attended the fall runway show during fashion week .")  # a name
    assert not looks_like_description("actor attends the opening ceremony of exhibition")
    assert not looks_like_description("i like how the hot tub is in the deck .")       # first person
    assert not looks_like_description("wine tasting")                                 # 2 words: too short
    assert not looks_like_description("football player before the match held the teams drew 22")  # a number
    assert not looks_like_description(" ".join(["dog"] * 13))                          # 13 words: too long


def test_the_datasets_tokenised_text_is_tidied_into_a_sentence():
    from imgtxt.research.caption_sources import tidy

    assert tidy("close - up of a cat 's tail on tree branch .") == "Close-up of a cat's tail on tree branch."
    assert tidy("a man on a scooter , taking part in the rally") == "A man on a scooter, taking part in the rally."
    assert tidy("boats do n't sink ( mostly )") == "Boats don't sink (mostly)."


def test_near_duplicates_share_their_content_words_in_any_order():
    from imgtxt.research.caption_sources import duplicate_key

    assert duplicate_key("A dog on the beach.") == duplicate_key("the dog on a beach") == ("beach", "dog")
    assert duplicate_key("A dog on the beach.") != duplicate_key("A dog near the sea.")


def test_lines_are_chosen_for_the_words_the_bank_has_used_least():
    """Bank: "a dog runs on the grass" x2, "a dog in the snow", "a red tram in the street", "a boat".
    Word uses (lines using the word): dog 3, runs 2, grass 2, snow 1, red 1, tram 1, street 1, boat 1.
    A candidate's value is the mean of 1 / (1 + uses) over its content words:
      "A dog on the grass."      {dog, grass}: (1/4 + 1/3) / 2 = 0.292
      "The grass on a dog."      the same words: dropped as the line above's near-duplicate
      "A tram in the snow."      {tram, snow}: (1/2 + 1/2) / 2 = 0.5
      "A boat in the street."    {boat, street}: 0.5
      "A red boat in the snow."  {red, boat, snow}: 0.5 at first
      "Zebra quagga okapi."      no word the bank uses (KNOWN_SHARE 0.75): never a candidate
    Chosen: the tram line (0.5, first in the file), the boat line (0.5, its words still unused by the chosen),
    the red boat (now boat and snow have 2 uses: (1/2 + 1/3 + 1/3) / 3 = 0.389), then dog/grass (0.292)."""
    from imgtxt.research.caption_sources import select_diverse

    bank = ["a dog runs on the grass", "a dog runs on the grass", "a dog in the snow", "a red tram in the street",
            "a boat"]
    candidates = ["A dog on the grass.", "The grass on a dog.", "A tram in the snow.", "A boat in the street.",
                  "A red boat in the snow.", "Zebra quagga okapi."]
    assert select_diverse(candidates, bank, 10) == ["A tram in the snow.", "A boat in the street.",
                                                    "A red boat in the snow.", "A dog on the grass."]
    assert select_diverse(candidates, bank, 2) == ["A tram in the snow.", "A boat in the street."]
    assert select_diverse(["A dog in the snow."], bank, 10) == []      # already in the bank (same words)


def test_a_tsv_that_is_not_conceptual_captions_is_refused_in_one_line(tmp_path):
    from imgtxt.errors import UsageError
    from imgtxt.research.caption_sources import read_gcc_captions

    good = tmp_path / "gcc.tsv"
    good.write_text("a dog on a beach\thttp://x/1.jpg\n\t http://x/2.jpg\nno tab here\n", encoding="utf-8")
    assert read_gcc_captions(good) == ["a dog on a beach"]
    for content, words in ((b"\xff\xfe\x00binary", "not UTF-8"), (b"just text\nno tabs\n", "no line of the form")):
        bad = tmp_path / "bad.tsv"
        bad.write_bytes(content)
        with pytest.raises(UsageError, match=words):
            read_gcc_captions(bad)


def test_the_extended_bank_keeps_the_stored_rows_and_embeds_only_the_new_lines(tmp_path, tiny_model_dir, library):
    from imgtxt.model.caption_bank import read_caption_vectors, write_caption_vectors
    from imgtxt.model.modelfile import TrainedModel

    src = shutil.copytree(tiny_model_dir, tmp_path / "src")
    model = TrainedModel.load(src)
    bank = model.caption_bank()
    write_caption_vectors(src, model.encode_text(bank)[:, :model.content_dim])
    model = TrainedModel.load(src)        # with the record of its stored vectors
    tsv = tmp_path / "gcc.tsv"
    tsv.write_text("a cat sitting on the beach with a red ball .\thttp://x/0.jpg\n"
                   "a tram crosses a bridge over the river .\thttp://x/1.jpg\n"
                   "vector illustration of a tram\thttp://x/2.jpg\n"
                   f"{bank[0]}\thttp://x/3.jpg\n", encoding="utf-8")
    out = tmp_path / "world"
    result = library.run("extend-captions", src, "--conceptual-captions", tsv, "--output", out)
    assert result.exit_code == 0, result.output
    extended = TrainedModel.load(out)
    new_bank = extended.caption_bank()
    # kept and tidied: the line of bank words; dropped: the tram (words the bank never uses), the illustration,
    # and the line the bank already has
    added = ["A cat sitting on the beach with a red ball."]
    assert new_bank == bank + added      # no class-name captions in the tiny model: the new lines come last
    stored = read_caption_vectors(extended, new_bank)
    old = read_caption_vectors(model, bank)
    for i, line in enumerate(new_bank):
        if line in bank:
            assert np.allclose(stored[i], old[bank.index(line)], atol=1e-6)
    fresh = extended.encode_text(added)[:, :extended.content_dim]
    assert np.allclose(stored[len(bank):], fresh, atol=0.02)    # int8 storage
    record = json.loads((out / "model.json").read_text())["caption_vectors"]
    assert record["count"] == len(new_bank)
    again = library.run("extend-captions", src, "--conceptual-captions", tsv, "--output", out, ok=False)
    assert again.exit_code != 0 and "exists" in again.stderr and len(again.stderr.strip().splitlines()) == 1
