"""Calibrated confidence: the fit on toy scores with hand-computed values, levels at their thresholds, model.json's
section, --min-score by level, the JSON fields, the "no strong matches" line and the web page's levels."""
from __future__ import annotations

import io
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import write_photo

from imgtxt.errors import ModelError
from imgtxt.library.results import PhotoMatch
from imgtxt.model.calibration import Calibration
from imgtxt.research import calibrate


def sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-z))


# ------------------------------------------------------------------------------------------- the fit

def test_logistic_fit_on_two_scores_is_the_two_log_odds():
    # Score 0: 1 match in 4 (log-odds -ln 3); score 1: 3 in 4 (ln 3). Two points: the fit passes through both,
    # so intercept = -ln 3 and slope = 2 ln 3.
    scores = [0, 0, 0, 0, 1, 1, 1, 1]
    labels = [1, 0, 0, 0, 1, 1, 1, 0]
    slope, intercept = calibrate.fit_logistic(np.array(scores), np.array(labels))
    assert slope == pytest.approx(2 * math.log(3), abs=1e-5)
    assert intercept == pytest.approx(-math.log(3), abs=1e-5)


def test_logistic_fit_needs_both_classes():
    with pytest.raises(ValueError, match="both"):
        calibrate.fit_logistic(np.array([0.1, 0.2]), np.array([1, 1]))


def test_top_pairs_and_own_photo_removed():
    scores = np.array([[0.9, 0.1, 0.5],
                       [0.2, 0.3, 0.8]])
    own = np.array([0, 1])
    values, labels = calibrate.top_pairs(scores, own, 2)
    pairs = sorted(zip(values.tolist(), labels.tolist()))
    assert pairs == [(0.3, 1.0), (0.5, 0.0), (0.8, 0.0), (0.9, 1.0)]
    assert calibrate.own_photo_removed(scores, own).tolist() == [0.5, 0.8]


def test_score_above_share_lets_through_at_most_that_share():
    scores = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
    assert calibrate.score_above_share(scores, 0.2) == pytest.approx(0.85)   # 0.9 and 1.0 reach it
    assert calibrate.score_above_share(scores, 0.5) == pytest.approx(0.55)
    assert calibrate.score_above_share(scores, 0.0) > 1.0
    assert calibrate.score_above_share(scores, 0.25) == pytest.approx(0.85)  # 2.5 photos: 2 let through


def test_fit_on_a_toy_gallery_and_its_figures():
    # 4 captions x 4 photos; caption q's own photo is q. Top-1 fit (top=1): the top results are 0.9 (own),
    # 0.8 (own), 0.7 (not own: photo 0 for caption 2), 0.6 (own) -> three matches in four.
    scores = np.array([[0.9, 0.2, 0.1, 0.3],
                       [0.4, 0.8, 0.2, 0.1],
                       [0.7, 0.1, 0.5, 0.2],
                       [0.3, 0.2, 0.1, 0.6]])
    own = np.arange(4)
    c = calibrate.fit(scores, own, top=1, strong_false=0.25, possible_false=0.5)
    assert c.slope > 0
    # own photo removed, best of the rest: 0.3, 0.4, 0.7, 0.3 -> strong lets 1 in 4 through (between 0.7 and
    # 0.4), possible 2 in 4 (between 0.4 and 0.3)
    assert c.score_at(c.strong) == pytest.approx(0.55)
    assert c.score_at(c.possible) == pytest.approx(0.35)
    figures = calibrate.measure(c, scores, own)
    assert figures["r1"] == 75.0
    # top result with the own photo present: 0.9, 0.8, 0.7 strong; 0.6 strong
    assert figures["own_photo_present"] == {"strong": 100.0, "possible": 0.0, "weak": 0.0}
    assert figures["own_photo_removed"] == {"strong": 25.0, "possible": 25.0, "weak": 50.0}
    assert figures["right_top1"] == {"strong": 100.0, "possible": 0.0, "weak": 0.0}
    assert figures["top1_right_by_level"] == {"strong": 75.0, "possible": None, "weak": None}


# ------------------------------------------------------------------------------------------- levels

def test_levels_at_their_thresholds():
    c = Calibration(slope=math.log(3), intercept=0.0, strong=0.75, possible=0.5)
    assert c.confidence(1.0) == pytest.approx(0.75)
    assert c.confidence(0.0) == 0.5
    assert c.level(0.75) == "strong" and c.level(0.7499) == "possible"
    assert c.level(0.5) == "possible" and c.level(0.4999) == "weak"
    assert c.score_at(0.75) == pytest.approx(1.0) and c.score_at(0.5) == 0.0
    assert c.score_at(c.threshold("weak")) == -math.inf
    assert c.confidence(-1e6) == 0.0 and c.confidence(1e6) == 1.0   # no overflow at either end


@pytest.mark.parametrize("section, message", [
    ({"method": "isotonic"}, "method"),
    ({"method": "logistic", "slope": 1.0, "intercept": 0.0}, "levels"),
    ({"method": "logistic", "slope": -2.0, "intercept": 0.0, "levels": {"strong": 0.8, "possible": 0.5}}, "slope"),
    ({"method": "logistic", "slope": 2.0, "intercept": 0.0, "levels": {"strong": 0.4, "possible": 0.5}}, "levels"),
    ({"method": "logistic", "slope": "2", "intercept": 0.0, "levels": {"strong": 0.8, "possible": 0.5}}, "finite"),
    ([1, 2], "unusable"),
])
def test_a_bad_calibration_section_is_one_line(section, message, tmp_path):
    with pytest.raises(ModelError, match=message):
        Calibration.from_config(section, tmp_path)


def test_model_json_round_trip_keeps_the_model_id(tiny_model_dir, tmp_path):
    from imgtxt.model.modelfile import TrainedModel

    folder = Path(shutil.copytree(tiny_model_dir, tmp_path / "m"))
    before = TrainedModel.load(folder)
    assert before.calibration is None
    fitted = calibrate.Fitted(Calibration(2.0, -1.0, 0.8, 0.4), {"r1": 1.0}, {"dataset": "toy"})
    calibrate.write_calibration(folder, fitted)
    after = TrainedModel.load(folder)
    assert after.model_id == before.model_id   # an index built before calibrating still matches
    assert after.calibration == Calibration(2.0, -1.0, 0.8, 0.4)
    config = json.loads((folder / "model.json").read_text())
    config["calibration"]["slope"] = 0
    (folder / "model.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="slope"):
        TrainedModel.load(folder)


# ------------------------------------------------------------------------------------------- the commands

def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture()
def calibrated(library, tmp_path, tiny_model_dir):
    """Six photos indexed with a copy of the tiny model, then that copy calibrated so that its two best results for
    QUERY are strong, the next two possible, the last two weak (confidence = sigmoid(score))."""
    model = Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))
    for i in range(6):
        write_photo(tmp_path / "p" / f"{i}.jpg", seed=40 + i)
    library.run("index", tmp_path / "p", "--quiet", "--model", model)
    plain = json_lines(library.run("search", QUERY, "--json").stdout)
    assert [set(h) for h in plain] == [{"rank", "score", "path"}] * 6   # uncalibrated: no level fields
    scores = [h["score"] for h in plain]
    # thresholds between listed scores (they are rounded to 4 places), so no result sits on one
    strong, possible = sigmoid((scores[1] + scores[2]) / 2), sigmoid((scores[3] + scores[4]) / 2)
    calibrate.write_calibration(model, calibrate.Fitted(Calibration(1.0, 0.0, strong, possible), {}, {}))
    return plain


QUERY = "a dog running on the beach"


def test_json_carries_confidence_and_level(library, calibrated):
    hits = json_lines(library.run("search", QUERY, "--json").stdout)
    assert [h["path"] for h in hits] == [h["path"] for h in calibrated]
    assert [h["level"] for h in hits] == ["strong", "strong", "possible", "possible", "weak", "weak"]
    for hit in hits:
        assert hit["confidence"] == pytest.approx(sigmoid(hit["score"]), abs=1e-4)


def test_min_score_by_level(library, calibrated):
    strong = json_lines(library.run("search", QUERY, "--json", "--min-score", "strong").stdout)
    assert [h["path"] for h in strong] == [h["path"] for h in calibrated[:2]]
    possible = json_lines(library.run("search", QUERY, "--json", "--min-score", "Possible").stdout)
    assert [h["rank"] for h in possible] == [1, 2, 3, 4]
    weak = json_lines(library.run("search", QUERY, "--json", "--min-score", "weak").stdout)
    assert len(weak) == 6
    number = json_lines(library.run("search", QUERY, "--json", "--min-score", str(calibrated[2]["score"] - 1e-3)).stdout)
    assert len(number) == 3
    bad = library.run("search", QUERY, "--min-score", "great", ok=False)
    assert bad.exit_code == 1 and "--min-score must be a number or one of strong, possible, weak" in bad.stderr


def test_min_score_level_needs_a_calibrated_model(library, tmp_path):
    write_photo(tmp_path / "p" / "0.jpg", seed=1)
    library.run("index", tmp_path / "p", "--quiet")
    result = library.run("search", QUERY, "--min-score", "strong", ok=False)
    assert result.exit_code == 1 and "has no calibration" in result.stderr and "Traceback" not in result.stderr


def test_caption_results_carry_levels(library, calibrated, tmp_path):
    captions = json_lines(library.run("caption", tmp_path / "p" / "0.jpg", "--json").stdout)
    assert all(c["level"] in ("strong", "possible", "weak") for c in captions)
    assert all(c["confidence"] == pytest.approx(sigmoid(c["score"]), abs=1e-4) for c in captions)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def match(rank: int, level: str | None) -> PhotoMatch:
    return PhotoMatch(rank, 0.5 - rank / 10, f"/photos/{rank}.jpg", rank, confidence=None if level is None else 0.3,
                      level=level)


@pytest.mark.parametrize("levels, as_json, terminal, said", [
    (["possible", "weak"], False, True, True),
    (["strong", "weak"], False, True, False),
    (["possible", "weak"], True, True, False),     # --json: the level field says it
    (["possible", "weak"], False, False, False),   # a pipe
    ([None, None], False, True, False),            # an uncalibrated model says nothing
])
def test_no_strong_matches_is_said_once_at_a_terminal(levels, as_json, terminal, said, monkeypatch, capsys):
    from imgtxt.cli.main import _print_photos

    out = Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    _print_photos([match(i + 1, level) for i, level in enumerate(levels)], as_json)
    err = capsys.readouterr().err
    assert err.count("no strong matches; the closest photos:") == (1 if said else 0)
    if terminal and not as_json and levels[0] is not None:
        table = out.getvalue().splitlines()
        assert table[0].split() == ["rank", "score", "level", "path"]
        assert table[1].split()[2] == levels[0]


def test_web_page_shows_levels_and_mutes_weak_results():
    from jinja2 import Environment, FileSystemLoader

    import imgtxt.web

    templates = Environment(loader=FileSystemLoader(Path(imgtxt.web.__file__).parent / "templates"),
                            autoescape=True)
    page = templates.get_template("search.html").render(query="a horse", index_dir="i",
                                                        matches=[match(1, "possible"), match(2, "weak")])
    assert 'id="no-strong"' in page and 'class="hit possible"' in page and 'class="hit weak"' in page
    assert '<span class="level" title="confidence 0.30">weak</span>' in page
    strong = templates.get_template("search.html").render(query="a dog", index_dir="i",
                                                          matches=[match(1, "strong"), match(2, "weak")])
    assert 'id="no-strong"' not in strong
    plain = templates.get_template("search.html").render(query="a dog", index_dir="i", matches=[match(1, None)])
    assert 'class="level"' not in plain and 'id="no-strong"' not in plain


def test_calibrate_command_writes_the_section_and_prints_the_figures(tmp_path, monkeypatch):
    """The command end to end on a toy split (its vectors stubbed): 40 photos, 5 captions each, every caption
    nearest its own photo but for noise, so the fit has both matches and misses."""
    from click.testing import CliRunner

    from imgtxt.cli.main import app

    rng = np.random.default_rng(0)
    images = rng.normal(size=(40, 8)).astype(np.float32)
    captions = (np.repeat(images, 5, axis=0) + rng.normal(scale=1.5, size=(200, 8))).astype(np.float32)
    monkeypatch.setattr(calibrate, "split_vectors", lambda *args, **kwargs: (images, captions))
    from imgtxt.paths import default_model_dir

    model = Path(shutil.copytree(default_model_dir(), tmp_path / "m"))   # loading it needs no torch
    config = json.loads((model / "model.json").read_text())
    config.pop("calibration", None)
    (model / "model.json").write_text(json.dumps(config))
    (tmp_path / "data").mkdir()
    runner = CliRunner()
    refused = runner.invoke(app, ["calibrate", str(model), "--data-dir", str(tmp_path / "data"), "--split", "test"])
    assert refused.exit_code != 0 and "held out" in refused.stderr
    dry = runner.invoke(app, ["calibrate", str(model), "--data-dir", str(tmp_path / "data"), "--dry-run"])
    assert dry.exit_code == 0, dry.stderr
    assert "own photo removed" in dry.stdout and "calibration" not in json.loads((model / "model.json").read_text())
    done = runner.invoke(app, ["calibrate", str(model), "--data-dir", str(tmp_path / "data")])
    assert done.exit_code == 0, done.stderr
    section = json.loads((model / "model.json").read_text())["calibration"]
    # the thresholds as fitted: at most 10% / 50% of own-photo-removed captions reach strong / possible
    assert section["val"]["own_photo_removed"]["strong"] <= 10.0
    assert section["val"]["own_photo_removed"]["strong"] + section["val"]["own_photo_removed"]["possible"] <= 50.0
    assert section["fitted_on"]["captions"] == 200 and set(section["val"]["held_out"]) == {
        "own_photo_present", "own_photo_removed", "right_top1"}
    from imgtxt.model.modelfile import TrainedModel

    assert TrainedModel.load(model).calibration.slope == section["slope"]


def test_score_above_share_keeps_equal_scores_together_by_hand():
    """A threshold between two equal scores would be that score, and `>=` would let the whole run through."""
    scores = np.array([0.9, 0.5, 0.5, 0.5, 0.1])
    assert calibrate.score_above_share(scores, 0.4) == pytest.approx(0.7)     # 2 allowed; 0.5 x3 stay out: 1
    assert calibrate.score_above_share(scores, 0.8) == pytest.approx(0.3)     # 4 allowed: 0.9 and the three 0.5s
    assert calibrate.score_above_share(np.full(4, 0.5), 0.5) == pytest.approx(0.5 + 1e-6)   # none can pass


def test_fit_thresholds_on_a_gallery_with_tied_runner_ups_by_hand():
    """4 captions x 4 photos, own photo q. Own photo removed, the best of the rest: 0.6, 0.6, 0.6, 0.2. Strong may
    let 1 in 4 through and possible 2 in 4, but the three 0.6s pass or fail together: letting them through would
    be 3 in 4, so both thresholds sit just above 0.6 and every own-photo-removed top result is weak."""
    scores = np.array([[0.9, 0.6, 0.1, 0.0],
                       [0.6, 0.8, 0.0, 0.1],
                       [0.6, 0.0, 0.7, 0.1],
                       [0.2, 0.1, 0.0, 0.5]])
    c = calibrate.fit(scores, np.arange(4), top=2, strong_false=0.25, possible_false=0.5)
    assert c.score_at(c.strong) == pytest.approx(0.6 + 1e-6, abs=1e-9)
    assert c.score_at(c.possible) == pytest.approx(0.6 + 1e-6, abs=1e-9)
    removed = calibrate.measure(c, scores, np.arange(4))["own_photo_removed"]
    assert removed == {"strong": 0.0, "possible": 0.0, "weak": 100.0}


def test_fit_edges_the_whole_share_and_bad_arguments():
    scores = np.array([0.3, 0.9, 0.1, 0.5])
    assert calibrate.score_above_share(scores, 1.0) == pytest.approx(0.1)   # everything through: the lowest score
    gallery = np.array([[0.9, 0.2, 0.1, 0.3],
                        [0.4, 0.8, 0.2, 0.1],
                        [0.7, 0.1, 0.5, 0.2],
                        [0.3, 0.2, 0.1, 0.6]])
    own = np.arange(4)
    for strong, possible in ((0.0, 0.0), (0.25, 0.25), (0.5, 1.0)):          # the bounds are allowed
        calibrate.fit(gallery, own, top=1, strong_false=strong, possible_false=possible)
    for strong, possible in ((-0.1, 0.5), (0.6, 0.5), (0.1, 1.5)):
        with pytest.raises(ValueError) as error:
            calibrate.fit(gallery, own, top=1, strong_false=strong, possible_false=possible)
        assert str(error.value) == "the shares must satisfy 0 <= strong <= possible <= 1"
    # scores 100 times larger: the same fit with a slope 100 times smaller (below 1 here), still accepted
    small = calibrate.fit(gallery * 100, own, top=1, strong_false=0.25, possible_false=0.5)
    assert 0 < small.slope < 1 and small.score_at(small.strong) == pytest.approx(55.0)
    with pytest.raises(ValueError, match="higher scores are not better matches"):
        calibrate.fit(-gallery, own, top=4, strong_false=0.25, possible_false=0.5)   # own photos score lowest
