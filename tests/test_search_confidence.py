"""The per-query search confidence: a result measured against its query's baseline over reference photos, the fit
on a mixed benchmark (hand-made cases with hand-computed values), and the levels a search shows with it."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import write_photo

from imgtxt.model import search_confidence
from imgtxt.model.calibration import Calibration
from imgtxt.research import calibrate
from imgtxt.research import search_confidence_fit as fitting


def sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-z))


# ------------------------------------------------------------------------------------------- the measure

def test_baseline_is_the_ranked_reference_score_and_confidence_reads_the_difference():
    reference = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [-1.0, 0.0]], np.float32)
    confidence = search_confidence.SearchConfidence(Calibration(2.0, -1.0, 0.8, 0.4), reference, rank=2)
    query = np.array([[0.8, 0.6]], np.float32)   # reference scores 0.8, 0.6, 0.96, -0.8: the 2nd best is 0.8
    assert confidence.baseline(query) == pytest.approx(0.8)
    assert confidence.confidence(1.3, 0.8) == pytest.approx(sigmoid(2.0 * 0.5 - 1.0))   # = 0.5
    assert confidence.level(confidence.confidence(1.3, 0.8)) == "possible"
    # strong from 0.8: 2x - 1 = ln 4 -> x = (1 + ln 4) / 2 above the baseline
    assert confidence.score_at("strong", 0.8) == pytest.approx(0.8 + (1 + math.log(4)) / 2)
    assert confidence.score_at("weak", 0.8) == -math.inf
    assert search_confidence.SearchConfidence(Calibration(1, 0, .8, .4), reference, rank=10).rank == 4


def test_the_baseline_rises_with_the_weight_of_the_query_concept_part():
    # vectors: one joint coordinate, then a two-wide ConSE part
    reference = np.array([[1.0, 0.0, 0.0], [0.5, 1.0, 0.0], [0.0, 0.0, 1.0]], np.float32)
    confidence = search_confidence.SearchConfidence(Calibration(4.0, -2.0, 0.7, 0.3), reference, rank=1,
                                                    concept_weight=0.2, concepts=slice(1, 3))
    query = np.array([0.5, 0.3, 0.4], np.float32)   # reference scores 0.5, 0.55, 0.4; ConSE part's norm 0.5
    assert confidence.baseline(query) == pytest.approx(0.55 + 0.2 * 0.5)
    # within one query a higher score never gets a lower confidence or level
    scores = [0.2, 0.6, 0.9, 1.0, 1.5]
    confidences = [confidence.confidence(s, 0.65) for s in scores]
    assert confidences == sorted(confidences) and confidences[1] == pytest.approx(sigmoid(4.0 * -0.05 - 2.0))
    order = {"weak": 0, "possible": 1, "strong": 2}
    levels = [order[confidence.level(c)] for c in confidences]
    assert levels == sorted(levels) and levels[0] == 0 and levels[-1] == 2
    # without a ConSE part (an empty slice) the weight changes nothing
    plain = search_confidence.SearchConfidence(Calibration(4.0, -2.0, 0.7, 0.3), reference, rank=1,
                                               concept_weight=0.2, concept_scale=3.0)
    assert plain.of_query(query) == pytest.approx((0.55, 1.0))
    # a concept scale of 2: the margin is divided by 1 + 2 x 0.5 = 2
    scaled = search_confidence.SearchConfidence(Calibration(4.0, -2.0, 0.7, 0.3), reference, rank=1,
                                                concept_weight=0.2, concepts=slice(1, 3), concept_scale=2.0)
    baseline, scale = scaled.of_query(query)
    assert (baseline, scale) == (pytest.approx(0.65), pytest.approx(2.0))
    assert scaled.confidence(1.05, baseline, scale) == pytest.approx(sigmoid(4.0 * 0.2 - 2.0))
    # strong from 0.7: 4x - 2 = ln(7/3) -> x = (2 + ln(7/3)) / 4, times the scale, above the baseline
    assert scaled.score_at("strong", baseline, scale) == pytest.approx(0.65 + 2 * (2 + math.log(7 / 3)) / 4)


# ------------------------------------------------------------------------------------------- the fit

def bench(kinds, scores, right, baselines=None, reference_top=None, concepts=None):
    scores = np.array(scores, np.float32)
    return fitting.Benchmark(scores, np.zeros(len(scores)) if baselines is None else np.array(baselines, float),
                             [frozenset(r) for r in right], list(kinds), scores.shape[1],
                             None if reference_top is None else np.array(reference_top, float),
                             None if concepts is None else np.array(concepts, float))


def test_subject_removed_and_top_results_are_measured_above_the_baseline():
    b = bench(["a", "a"], [[0.9, 0.5, 0.2], [0.3, 0.8, 0.7]], [{0}, {1, 2}], baselines=[0.1, 0.2])
    assert fitting.subject_removed(b, np.arange(2)).tolist() == pytest.approx([0.4, 0.1])   # 0.5 - 0.1, 0.3 - 0.2
    x, y, query = fitting.top_results(b, np.arange(2), top=2)
    assert sorted(zip(x.round(4).tolist(), y.tolist(), query.tolist())) == [
        (0.4, 0.0, 0), (0.5, 1.0, 1), (0.6, 1.0, 1), (0.8, 1.0, 0)]


def test_weighted_logistic_gives_each_kind_the_same_say():
    # kind A: 3 pairs at x=0, one right; kind B: 1 pair at x=0, right. Weighted 1/3 and 1: at x=0 the weighted
    # share of right pairs is (1/3 + 1) / (1 + 1) = 2/3, so the intercept is ln 2 (a free slope fits the rest).
    x = np.array([0, 0, 0, 0, 1, 1], float)
    y = np.array([1, 0, 0, 1, 1, 0], float)
    w = np.array([1 / 3, 1 / 3, 1 / 3, 1, 1, 1])
    slope, intercept = fitting.fit_weighted_logistic(x, y, w)
    assert intercept == pytest.approx(math.log(2), abs=1e-5)
    assert slope == pytest.approx(-math.log(2), abs=1e-5)   # x=1: one in two
    with pytest.raises(ValueError, match="both"):
        fitting.fit_weighted_logistic(x, np.ones(6), w)


def test_levels_are_set_by_the_strictest_kind():
    # Kind "many": 10 queries whose right photo (column 0) scores 1.0 and whose best other photo scores 0.1, 0.2,
    # .., 1.0; kind "few": 2 queries whose best other photo scores 0.95 and 0.05 (baselines 0). strong lets at
    # most 10% of each kind's subject-removed tops through: many -> 1 of 10, between 1.0 and 0.9 = 0.95; few ->
    # 0 of 2, just above 0.95 (0.95 + 1e-6). The strictest kind wins.
    many = [[1.0, 0.1 * (i + 1), 0.0] for i in range(10)]
    few = [[1.0, 0.95, 0.0], [1.0, 0.05, 0.0]]
    b = bench(["many"] * 10 + ["few"] * 2, many + few, [{0}] * 12)
    c = fitting.fit(b, strong_removed=0.10, possible_removed=0.50).calibration
    assert c.score_at(c.strong) == pytest.approx(max(0.95, 0.95 + 1e-6), abs=1e-7)
    # possible (at most half): many -> between 0.6 and 0.5 = 0.55; few -> 1 of 2 -> between 0.95 and 0.05 = 0.5
    assert c.score_at(c.possible) == pytest.approx(0.55, abs=1e-6)
    assert calibrate.score_above_share(np.array([0.95, 0.05]), 0.1) == pytest.approx(0.95 + 1e-6)


def form_bench():
    """Two sentences (ConSE weight 0) and two names (ConSE weight 2); every reference score 0 (rank 1 only).
    sentence 1: right photo 0.5, other 0.2; sentence 2: right 0.46, other 0.1;
    name 1: right 0.8, other 0.6; name 2: other 0.7 above right 0.3."""
    scores = [[0.5, 0.2], [0.46, 0.1], [0.8, 0.6], [0.3, 0.7]]
    return bench(["sentence", "sentence", "name", "name"], scores, [{0}] * 4,
                 reference_top=np.zeros((4, 1)), concepts=[0, 0, 2, 2])


def test_the_baseline_form_is_chosen_by_how_close_the_levels_come_to_the_targets(monkeypatch):
    monkeypatch.setattr(fitting, "CONCEPT_WEIGHTS", (0.0, 0.1))
    monkeypatch.setattr(fitting, "CONCEPT_SCALES", (0.0,))
    b = form_bench()
    # Both levels let at most 1 of each kind's 2 subject-removed tops through (0.5 and 0.5).
    # weight 0: removed tops sentence 0.2, 0.1 -> threshold 0.15; name 0.7, 0.6 -> 0.65. The strictest, 0.65: no
    #   sentence is strong (0 for that kind); both names are (0.8 right, 0.7 wrong): precision 50% (50/90 of its
    #   target), recall 100% (capped at 1) -> 0.7778; mean 0.3889. Right tops at least possible: sentences 0 of
    #   2, names 1 of 1 -> mean 0.5, which adds 0.5 x 0.5.
    # weight 0.1: names' baseline 0.2: tops 0.6, 0.5, removed 0.5, 0.4 -> 0.45; strictest 0.45: both sentences
    #   strong and right (1), names as before (0.7778): mean 0.8889; every right top possible: + 0.5 x 1.
    score, right, removed = fitting.top_one(b, np.arange(4))
    kinds = np.array(b.kinds)
    assert fitting.POSSIBLE_SAY == 0.5
    assert fitting.target_score(score, right, removed, kinds, 0.5, 0.5) == pytest.approx(
        (0 + (50 / 90 + 1) / 2) / 2 + 0.5 * 0.5)
    form, table = fitting.choose_form(b, np.arange(4), 0.5, 0.5)
    assert form == fitting.Form(1, 0.1, 0.0)
    assert table == [{"rank": 1, "concept_weight": 0.1, "concept_scale": 0.0,
                      "target_score": round((1 + (50 / 90 + 1) / 2) / 2 + 0.5, 4)}]
    fitted = fitting.fit(b, strong_removed=0.5, possible_removed=0.5)
    assert fitted.form == fitting.Form(1, 0.1, 0.0)
    # strong from the strictest kind's threshold, 0.45 above the baseline
    assert fitted.calibration.score_at(fitted.calibration.strong) == pytest.approx(0.45, abs=1e-6)   # float32 scores
    given = fitting.fit(b, strong_removed=0.5, possible_removed=0.5, form=fitting.Form(1))
    assert (given.form, given.table) == (fitting.Form(1, 0.0, 0.0), [])
    assert given.calibration.score_at(given.calibration.strong) == pytest.approx(0.65, abs=1e-6)
    assert fitting.with_baseline(b, fitting.Form(1, 0.1)).baselines.tolist() == pytest.approx([0, 0, 0.2, 0.2])


def test_a_concept_scale_divides_the_margin_of_queries_that_lean_on_the_concept_part(monkeypatch):
    monkeypatch.setattr(fitting, "CONCEPT_WEIGHTS", (0.0,))
    monkeypatch.setattr(fitting, "CONCEPT_SCALES", (0.0, 1.0))
    b = fitting.with_baseline(form_bench(), fitting.Form(1, 0.0, 1.0))
    assert b.scales.tolist() == [1, 1, 3, 3]   # 1 + 1.0 x the ConSE weight (0, 0, 2, 2)
    # names' tops 0.8 and 0.7 become 0.2667 and 0.2333; with the right photos removed 0.2 and 0.2333
    assert fitting.subject_removed(b, np.arange(4)).tolist() == pytest.approx([0.2, 0.1, 0.2, 0.7 / 3], abs=1e-6)
    x, y, query = fitting.top_results(b, np.array([2]), top=2)
    assert x.tolist() == pytest.approx([0.8 / 3, 0.6 / 3], abs=1e-6)
    # scale 1: the names' threshold falls between 0.2333 and 0.2, the strictest; the sentences (0.5, 0.46) are
    # strong and right; names as with weight 0.1 above: 0.8889 + 0.5 -> chosen over scale 0 (0.6389)
    form, table = fitting.choose_form(form_bench(), np.arange(4), 0.5, 0.5)
    assert form == fitting.Form(1, 0.0, 1.0) and table[0]["target_score"] == pytest.approx(1.3889, abs=1e-4)


def test_measure_per_kind_by_hand():
    c = Calibration(10.0, -5.0, sigmoid(10 * 0.7 - 5), sigmoid(10 * 0.4 - 5))   # strong from x 0.7, possible 0.4
    b = bench(["k", "k", "k"], [[0.9, 0.5], [0.6, 0.8], [0.3, 0.75]], [{0}, {0}, {1}])
    f = fitting.measure(c, b)["k"]
    # ranks 1, 2, 1; tops 0.9 (right, strong), 0.8 (wrong, strong), 0.75 (right, strong)
    assert (f["r1"], f["r5"]) == (pytest.approx(66.7), 100.0)
    assert f["strong_right"] == pytest.approx(66.7) and f["right_strong"] == 100.0 and f["right_possible"] == 100.0
    # subject removed: 0.5 (possible), 0.8 (strong), 0.3 (weak) -> 2 of 3 not strong, 1 of 3 weak
    assert f["removed_not_strong"] == pytest.approx(66.7) and f["removed_weak"] == pytest.approx(33.3)


def test_measure_counts_a_wrong_photo_tied_with_the_right_one_against_it():
    c = Calibration(10.0, -5.0, 0.9, 0.5)
    b = bench(["k", "k"], [[0.5, 0.5, 0.1], [0.5, 0.5, 0.5]], [{1}, {0, 1}])
    f = fitting.measure(c, b)["k"]
    # query 0: its photo ties a wrong one -> rank 2; query 1: two right photos tie one wrong one -> rank 2
    assert (f["r1"], f["r5"]) == (0.0, 100.0)


def test_caption_phrases_by_hand():
    captions = ["A black dog runs .", "a black dog on grass", "A cat sleeps", "two men talk", "a man",
                "A black dog jumps", "a black cat", "a cat", "two men sit", "x",
                "a black dog here", "the man", "two men", "a cat", "y"]
    # photos: 0 (captions 0-4), 1 (5-9), 2 (10-14)
    phrases = dict(fitting.caption_phrases(captions, min_photos=2, max_photos=3))
    assert phrases["a black dog"] == {0, 1, 2}
    assert phrases["two men"] == {0, 1, 2}
    assert phrases["a black"] == {0, 1, 2}
    assert phrases["a cat"] == {0, 1, 2}
    assert "a man" not in phrases   # one photo
    assert "the man" not in phrases   # one photo


def test_queries_file_is_read_or_refused_in_one_line(tmp_path):
    good = tmp_path / "q.tsv"
    good.write_text("a cup of coffee\tcoffee.png\tobject\n# a comment\na woman\tastronaut.png,hopper.jpg\tobject\n")
    assert fitting.read_queries(good) == [("a cup of coffee", ["coffee.png"], "object"),
                                          ("a woman", ["astronaut.png", "hopper.jpg"], "object")]
    bad = tmp_path / "bad.tsv"
    bad.write_text("a cup of coffee\tcoffee.png\n")
    with pytest.raises(ValueError, match=r"bad.tsv:1: expected query, right photos, kind"):
        fitting.read_queries(bad)


# ------------------------------------------------------------------------------------------- in a search

def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


QUERY = "a dog running on the beach"


@pytest.fixture()
def per_query(library, tmp_path, tiny_model_dir):
    """Six photos indexed with a calibrated copy of the tiny model that carries a search confidence whose reference
    is three of the photos' own vectors (rank 2)."""
    from imgtxt.model.modelfile import TrainedModel

    model = Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))
    for i in range(6):
        write_photo(tmp_path / "p" / f"{i}.jpg", seed=60 + i)
    library.run("index", tmp_path / "p", "--quiet", "--model", model)
    calibrate.write_calibration(model, calibrate.Fitted(Calibration(1.0, 0.0, 0.9, 0.6), {}, {}))
    loaded = TrainedModel.load(model)
    reference = np.stack([loaded.embed_photo(tmp_path / "p" / f"{i}.jpg") for i in (0, 2, 4)])
    search_confidence.write(model, reference, Calibration(8.0, 0.0, sigmoid(8 * 0.02), sigmoid(8 * -0.02)), 2,
                            {"fitted_on": {"test": True}})
    query = loaded.encode_query([QUERY])[0]
    stored = search_confidence.load(TrainedModel.load(model))   # the int8 rows, as a search reads them
    baseline = float(np.sort(stored.reference @ query)[-2])
    return model, baseline


def test_search_levels_are_measured_against_the_query_baseline(library, per_query):
    model, baseline = per_query
    hits = json_lines(library.run("search", QUERY, "--json", "--model", model).stdout)
    assert len(hits) == 6
    for hit in hits:
        x = hit["score"] - baseline
        assert hit["confidence"] == pytest.approx(sigmoid(8 * x), abs=2e-3)   # scores are printed to 4 places
        if abs(x) > 0.021:
            assert hit["level"] == ("strong" if x > 0.02 else "possible" if x > -0.02 else "weak")
    strong = json_lines(library.run("search", QUERY, "--json", "--min-score", "strong", "--model", model).stdout)
    assert [h["path"] for h in strong] == [h["path"] for h in hits if h["level"] == "strong"]


def test_a_damaged_reference_falls_back_to_the_plain_calibration(library, per_query):
    model, _ = per_query
    path = model / search_confidence.FILE
    path.write_bytes(path.read_bytes()[:-7] + b"1234567")
    result = library.run("search", QUERY, "--json", "--model", model)
    assert "query_reference.safetensors: damaged" in result.stderr
    for hit in json_lines(result.stdout):   # the plain calibration: sigmoid(score), strong from 0.9
        assert hit["confidence"] == pytest.approx(sigmoid(hit["score"]), abs=1e-4)


def test_writing_needs_a_calibrated_model(tiny_model_dir, tmp_path):
    model = Path(shutil.copytree(tiny_model_dir, tmp_path / "m"))
    with pytest.raises(ValueError, match="calibrate the model"):
        search_confidence.write(model, np.ones((2, 3), np.float32), Calibration(1, 0, .8, .4), 1, {})


@pytest.mark.parametrize("change, reason", [
    ({"feature": "raw"}, "calibration.search must be"),
    ({"rank": 0}, "rank must be a positive integer"),
    ({"rank": True}, "rank must be a positive integer"),
    ({"file": None}, "needs its file and sha256"),
    ({"concept_weight": "0.1"}, "concept_weight must be a number"),
    ({"concept_weight": float("nan")}, "concept_weight must be a number"),
    ({"concept_weight": True}, "concept_weight must be a number"),
    ({"concept_scale": -1}, "concept_scale must be a number of at least 0"),
])
def test_a_bad_search_section_is_named_and_ignored(change, reason):
    section = {"feature": "above_reference", "rank": 10, "file": "query_reference.safetensors", "sha256": "x"}
    assert reason in search_confidence.check_config({**section, **change})
    assert search_confidence.check_config(section) is None


@pytest.fixture(scope="module")
def shipped():
    from imgtxt import paths
    from imgtxt.model.modelfile import TrainedModel

    return TrainedModel.load(paths.default_model_dir())


@pytest.mark.parametrize("query", ["a cup of coffee", "a photo of a cat", "a man riding a bike in the woods"])
def test_min_score_by_level_is_where_the_shipped_model_rates_that_level(shipped, query):
    # `--min-score LEVEL` becomes a score threshold for the search: exactly where the query's confidence (its
    # baseline and, for a query that leans on the ConSE part, its scale above 1) reaches the level
    from imgtxt.library.confidence import min_score_of
    from imgtxt.library.query import encode_query

    model = shipped
    per_query = search_confidence.of_model(model)
    baseline, scale = per_query.of_query(encode_query(model, query))
    if query != "a man riding a bike in the woods":
        assert scale > 1.1   # the query leans on the ConSE part (its weight above 1): the scale is exercised
    for level in ("strong", "possible"):
        score, confidence = min_score_of(model, level, query)
        assert confidence == per_query.calibration.threshold(level)
        assert per_query.confidence(score + 1e-6, baseline, scale) >= confidence
        assert per_query.confidence(score - 1e-4, baseline, scale) < confidence
        assert per_query.level(per_query.confidence(score + 1e-6, baseline, scale)) in (level, "strong")


def test_calibrate_search_fixes_a_form_only_with_its_rank(library, tmp_path):
    result = library.run("calibrate-search", tmp_path, "--concept-scale", "0.1", "--dry-run", ok=False)
    assert result.exit_code == 2 and "--concept-weight and --concept-scale fix the form with --rank" in result.stderr
    assert "Traceback" not in result.stderr
