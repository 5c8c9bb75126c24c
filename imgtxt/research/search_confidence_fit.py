"""`imgtxt calibrate-search`: fit the per-query search confidence (imgtxt/model/search_confidence.py) on a mixed
benchmark of query kinds, and measure it there.

The benchmark: one gallery of a split's photos (Flickr8k val) plus, optionally, photos of another kind (the
everyday-object dev set that bench/mixed_library.py copies), searched with
  - `caption`: each of the split's captions; its own photo is right;
  - `phrase`: short phrases that open the split's captions ("a black dog", "two men"), each right for every photo
    with a caption that contains it (caption_phrases);
  - the kinds of a queries file (query, right photo files, kind: tab-separated), e.g. object names; a right
    photo is a file of the photos folder or one of the split's own photos (by file name).
Each result is measured by (score - baseline) / scale: the baseline is the query's rank-th best score over
reference photos (reference_photos.py: the training split's, one in 6, and maybe a folder of other photos) plus
concept_weight x c, the scale 1 + concept_scale x c, c being the weight of the query's ConSE part. The Form (rank from RANKS, concept_weight from
CONCEPT_WEIGHTS, concept_scale from CONCEPT_SCALES) is chosen on the benchmark's top results (choose_form): the one
whose levels come closest to the targets for every kind. The logistic is then fitted on every query's top 10 results,
each kind weighing the same (5,000 captions must not drown 36 object queries); `strong` is the lowest threshold
that no kind's own-subject-removed top result reaches more than `strong_removed` of the time, `possible` the same
with `possible_removed`. The figures are also given out of sample: the whole fit (form included) on half the
queries of each kind, measured on the other half (two folds, mean).
"""
from __future__ import annotations

import csv
import dataclasses
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from imgtxt.model.calibration import Calibration

from .calibrate import _auc, embed_photos, score_above_share, split_vectors
from .datasets import CAPTIONS_PER_IMAGE, load_split
from .metrics import pessimistic_rank

RANK = 10       # the baseline before a form is chosen: the 10th best reference score (the top 1%)
RANKS = (1, 3, 5, 10, 25, 50, 100)                      # the baseline's rank, chosen on the benchmark
CONCEPT_WEIGHTS = tuple(round(0.005 * i, 3) for i in range(31))   # 0 .. 0.15 per unit of ConSE weight
CONCEPT_SCALES = (0.0, 0.1, 0.25, 0.5, 1.0)
TARGETS = {"strong_right": 90.0, "right_strong": 50.0}  # per kind, of the top result (%)
POSSIBLE_SAY = 0.5   # what the share of right top results rated at least possible adds to a form's target score
TOP = 10        # the results a user is shown by default
PHRASE_STARTS = ("a", "an", "two", "three", "the")
PHRASE_SKIP_ENDS = {"is", "are", "in", "on", "of", "with", "and", "the", "a", "an", "at", "wearing", "his", "her"}


@dataclass
class Benchmark:
    """A (queries, photos) score matrix, each query's right photos and kind, and each query's baseline (with what
    it is made of: the best reference scores and the weight of the query's ConSE part)."""
    scores: np.ndarray          # (queries, photos)
    baselines: np.ndarray       # (queries,)
    right: list[frozenset]      # column indices
    kinds: list[str]
    photos: int
    reference_top: np.ndarray | None = None   # (queries, up to max(RANKS)) best reference scores, best first
    concepts: np.ndarray | None = None        # (queries,) the norm of each query vector's ConSE part
    scales: np.ndarray | None = None          # (queries,) what score - baseline is divided by (None: 1)

    def above(self, rows, scores) -> np.ndarray:
        """(scores - baseline) / scale of the queries `rows` (scores: one per row, or a row per row)."""
        scores = np.asarray(scores, np.float64)
        extra = (slice(None),) + (None,) * (scores.ndim - 1)
        x = scores - self.baselines[rows][extra]
        return x if self.scales is None else x / self.scales[rows][extra]


@dataclass(frozen=True)
class Form:
    """The baseline's form (search_confidence.py)."""
    rank: int
    concept_weight: float = 0.0
    concept_scale: float = 0.0


@dataclass
class Fit:
    calibration: Calibration
    form: Form | None           # None: the benchmark's own baselines were used as they are
    table: list[dict]           # per rank: its best form and how close it came to the targets


def with_baseline(bench: Benchmark, form: Form) -> Benchmark:
    """The benchmark measured against baselines and scales of this form."""
    top = bench.reference_top
    baselines = top[:, min(form.rank, top.shape[1]) - 1] + form.concept_weight * bench.concepts
    return dataclasses.replace(bench, baselines=np.asarray(baselines, np.float64),
                               scales=1.0 + form.concept_scale * bench.concepts)


def caption_phrases(captions: list[str], limit: int = 150, min_photos: int = 3,
                    max_photos: int = 40) -> list[tuple[str, frozenset]]:
    """Short phrases opening the captions ("a black dog"), most frequent first, each with the photos (caption
    index // 5) whose captions contain it; phrases found for fewer than `min_photos` or more than `max_photos`
    photos are left out (too rare to measure, or too common to mean anything)."""
    words = [re.findall(r"[a-z']+", c.lower()) for c in captions]
    counts: Counter = Counter()
    for w in words:
        for length in (2, 3):
            if len(w) >= length and w[0] in PHRASE_STARTS and w[length - 1] not in PHRASE_SKIP_ENDS:
                counts[" ".join(w[:length])] += 1
    photos: dict[str, set] = defaultdict(set)
    padded = [" " + " ".join(w) + " " for w in words]
    for phrase in counts:
        needle = " " + phrase + " "
        for i, text in enumerate(padded):
            if needle in text:
                photos[phrase].add(i // CAPTIONS_PER_IMAGE)
    kept = [(p, frozenset(photos[p])) for p, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
            if min_photos <= len(photos[p]) <= max_photos]
    return kept[:limit]


def read_queries(path: Path | str) -> list[tuple[str, list[str], str]]:
    """A queries file: one `query<TAB>right photo file names, comma-separated<TAB>kind` per line."""
    rows = []
    with open(path, encoding="utf-8", newline="") as f:
        for line_no, row in enumerate(csv.reader(f, delimiter="\t"), 1):
            if not row or row[0].startswith("#"):
                continue
            if len(row) != 3 or not row[0].strip() or not row[1].strip() or not row[2].strip():
                raise ValueError(f"{path}:{line_no}: expected query, right photos, kind (tab-separated)")
            rows.append((row[0].strip(), [n.strip() for n in row[1].split(",") if n.strip()], row[2].strip()))
    if not rows:
        raise ValueError(f"{path}: no queries in it")
    return rows


def build(model, dataset: str, data_dir: Path | str, reference: np.ndarray, split: str = "val",
          queries_file: Path | str | None = None, photos_dir: Path | str | None = None,
          quiet: bool = False) -> Benchmark:
    """The benchmark's score matrix over the split's photos (+ the photos of `photos_dir`)."""
    images, captions = split_vectors(model, dataset, data_dir, split, quiet=quiet)
    split_data = load_split(dataset, data_dir, split)
    texts = split_data.captions
    right = [frozenset([i // CAPTIONS_PER_IMAGE]) for i in range(len(captions))]
    kinds = ["caption"] * len(captions)
    phrases = caption_phrases(texts)
    query_vectors = [captions, model.encode_query([p for p, _ in phrases])]
    right += [photos for _, photos in phrases]
    kinds += ["phrase"] * len(phrases)
    gallery = [images]
    if queries_file is not None:
        if photos_dir is None:
            raise ValueError("a queries file needs the folder of its photos (--photos)")
        extra = read_queries(queries_file)
        # a right photo may also be one of the split's own (a val photo that shows the object too)
        in_split = {p.name: i for i, p in enumerate(split_data.image_paths)}
        names = sorted({name for _, files, _ in extra for name in files} - set(in_split))
        missing = [n for n in names if not (Path(photos_dir) / n).is_file()]
        if missing:
            raise ValueError(f"{photos_dir}: missing photos named in {queries_file}: {', '.join(missing[:5])}")
        column = {**in_split, **{name: len(images) + i for i, name in enumerate(names)}}
        gallery.append(embed_photos(model, [Path(photos_dir) / n for n in names], "benchmark photos", quiet=quiet))
        query_vectors.append(model.encode_query([q for q, _, _ in extra]))
        right += [frozenset(column[n] for n in files) for _, files, _ in extra]
        kinds += [kind for _, _, kind in extra]
    queries, photos = np.concatenate(query_vectors), np.concatenate(gallery)
    scores = np.asarray(model.scores(photos, queries), np.float32).T
    reference_scores = np.asarray(model.scores(reference, queries), np.float32).T
    keep = min(max(RANKS), reference_scores.shape[1])
    top = -np.sort(np.partition(-reference_scores, keep - 1, axis=1)[:, :keep], axis=1)   # best first
    part = slice(model.config["joint"]["embed_dim"], model.content_dim)   # search_confidence.concept_part
    concepts = np.linalg.norm(queries[:, part], axis=1).astype(np.float64)
    bench = Benchmark(scores, np.zeros(len(queries)), right, kinds, int(photos.shape[0]),
                      top.astype(np.float64), concepts)
    return with_baseline(bench, Form(RANK))


# ------------------------------------------------------------------------------------------- the fit

def fit_weighted_logistic(x: np.ndarray, y: np.ndarray, w: np.ndarray, iterations: int = 100) -> tuple[float, float]:
    """(slope, intercept) of P(y = 1 | x) maximising the w-weighted log-likelihood (Newton; a tiny ridge keeps it
    finite when the classes separate)."""
    x, y, w = (np.asarray(a, np.float64) for a in (x, y, w))
    if not 0 < (w * y).sum() < w.sum():
        raise ValueError("a calibration needs both matching and non-matching pairs")
    design = np.stack([x, np.ones_like(x)], axis=1)
    theta = np.zeros(2)
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(design @ theta)))
        gradient = design.T @ (w * (p - y)) + 1e-6 * theta
        hessian = (design * (w * p * (1 - p))[:, None]).T @ design + 1e-6 * np.eye(2)
        step = np.linalg.solve(hessian, gradient)
        theta -= step
        if np.abs(step).max() < 1e-10:
            break
    return float(theta[0]), float(theta[1])


def top_results(bench: Benchmark, rows: np.ndarray, top: int = TOP) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For the queries `rows`: their top results' (score - baseline, right or not, query row), flattened."""
    k = min(top, bench.scores.shape[1])
    scores = bench.scores[rows]
    cols = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    x = bench.above(rows, np.take_along_axis(scores, cols, axis=1))
    y = np.array([[c in bench.right[r] for c in row] for r, row in zip(rows, cols)], np.float64)
    return x.ravel(), y.ravel(), np.repeat(rows, k)


def subject_removed(bench: Benchmark, rows: np.ndarray) -> np.ndarray:
    """Each query's best (score - baseline) / scale over the gallery without its right photos."""
    out = np.empty(len(rows))
    for i, r in enumerate(rows):
        scores = np.array(bench.scores[r], np.float64)
        scores[list(bench.right[r])] = -np.inf
        out[i] = scores.max()
    return bench.above(rows, out)


def top_one(bench: Benchmark, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For the queries `rows`: the top score, whether it is right, and the top score with the right photos removed
    (raw scores: no baseline)."""
    scores = bench.scores[rows]
    top = scores.argmax(axis=1)
    right = np.array([c in bench.right[r] for r, c in zip(rows, top)])
    removed = subject_removed(dataclasses.replace(bench, baselines=np.zeros(len(bench.kinds)), scales=None), rows)
    return scores[np.arange(len(rows)), top].astype(np.float64), right, removed


def target_score(x_top: np.ndarray, right: np.ndarray, x_removed: np.ndarray, kinds: np.ndarray,
                 strong_removed: float, possible_removed: float) -> float:
    """How close the levels come to the targets when set by the strictest kind: per kind, of the top results called
    strong the share right (against 90%) and of the right ones the share called strong (against 50%), each capped
    at its target, averaged over the two and over the kinds (a kind with no strong result scores 0); plus
    POSSIBLE_SAY x the share of right top results rated at least possible, averaged over the kinds (so that no
    form buys strong's figures by pushing a kind's right results from possible down to weak)."""
    order = list(dict.fromkeys(kinds))
    strong = max(score_above_share(x_removed[kinds == k], strong_removed) for k in order)
    possible = max(score_above_share(x_removed[kinds == k], possible_removed) for k in order)
    total, kept = [], []
    for k in order:
        sel = kinds == k
        hits, good = x_top[sel] >= strong, right[sel]
        kept.append(float((x_top[sel][good] >= possible).mean()) if good.any() else 0.0)
        if not hits.any():
            total.append(0.0)
            continue
        precision = 100 * good[hits].mean()
        recall = 100 * hits[good].mean() if good.any() else 0.0
        total.append((min(precision / TARGETS["strong_right"], 1) + min(recall / TARGETS["right_strong"], 1)) / 2)
    return float(np.mean(total) + POSSIBLE_SAY * np.mean(kept))


def choose_form(bench: Benchmark, rows: np.ndarray, strong_removed: float,
                possible_removed: float) -> tuple[Form, list[dict]]:
    """The Form whose levels come closest to the targets (target_score) on the queries `rows`; ties go to the
    first in RANKS, then to the smaller weight, then to the smaller scale. Also each rank's best form."""
    score, right, removed = top_one(bench, rows)
    kinds = np.array(bench.kinds)[rows]
    top, concepts = bench.reference_top[rows], bench.concepts[rows]
    best, table = None, []
    for rank in RANKS:
        if rank > top.shape[1]:
            break
        row = None
        for weight in CONCEPT_WEIGHTS:
            baseline = top[:, rank - 1] + weight * concepts
            for scale in CONCEPT_SCALES:
                divisor = 1.0 + scale * concepts
                value = target_score((score - baseline) / divisor, right, (removed - baseline) / divisor, kinds,
                                     strong_removed, possible_removed)
                if row is None or value > row["target_score"] + 1e-12:
                    row = {"rank": rank, "concept_weight": weight, "concept_scale": scale, "target_score": value}
                if best is None or value > best[0] + 1e-12:
                    best = (value, Form(rank, weight, scale))
        table.append({**row, "target_score": round(row["target_score"], 4)})
    return best[1], table


def fit(bench: Benchmark, rows: np.ndarray | None = None, strong_removed: float = 0.10,
        possible_removed: float = 0.50, form: Form | None = None) -> Fit:
    """The search confidence fitted on the queries `rows`: the baseline's form (chosen unless given; a benchmark
    without reference scores keeps its own baselines), the logistic of (score - baseline) / scale, the levels."""
    rows = np.arange(len(bench.kinds)) if rows is None else rows
    table = []
    if bench.reference_top is not None:
        if form is None:
            form, table = choose_form(bench, rows, strong_removed, possible_removed)
        bench = with_baseline(bench, form)
    else:
        form = None
    kinds = np.array(bench.kinds)
    x, y, query = top_results(bench, rows)
    share = Counter(kinds[query])
    weights = np.array([1.0 / share[k] for k in kinds[query]])
    slope, intercept = fit_weighted_logistic(x, y, weights)
    if slope <= 0:
        raise ValueError(f"the fitted slope is {slope:.3g}: higher scores are not better matches here")
    base = Calibration(slope, intercept, 0.5, 0.5)
    absent = subject_removed(bench, rows)
    levels = []
    for allowed in (strong_removed, possible_removed):
        # the strictest kind decides: no kind may get more than its share of unearned levels
        x_min = max(score_above_share(absent[kinds[rows] == k], allowed) for k in sorted(set(kinds[rows])))
        levels.append(base.confidence(x_min))
    return Fit(Calibration(slope, intercept, levels[0], min(levels)), form, table)


def measure(calibration: Calibration, bench: Benchmark, rows: np.ndarray | None = None) -> dict:
    """Per kind: R@1/5/10 in the gallery, and what the levels say of each query's top result (%)."""
    rows = np.arange(len(bench.kinds)) if rows is None else rows
    kinds = np.array(bench.kinds)
    absent = subject_removed(bench, rows)
    out = {}
    for kind in dict.fromkeys(kinds[rows]):
        sel = rows[kinds[rows] == kind]
        ranks, top_x, right = [], [], []
        for r in sel:
            scores = bench.scores[r]
            ranks.append(pessimistic_rank(scores, list(bench.right[r])))   # a tie counts against it
            top = int(scores.argmax())
            top_x.append(bench.above([r], [scores[top]])[0])
            right.append(top in bench.right[r])
        ranks, top_x, right = np.array(ranks), np.array(top_x), np.array(right)
        levels = np.array([calibration.level(calibration.confidence(v)) for v in top_x])
        absent_levels = np.array([calibration.level(calibration.confidence(v))
                                  for v in absent[kinds[rows] == kind]])
        strong = levels == "strong"
        out[kind] = {
            "queries": int(len(sel)),
            "r1": round(100 * float(np.mean(ranks <= 1)), 1), "r5": round(100 * float(np.mean(ranks <= 5)), 1),
            "r10": round(100 * float(np.mean(ranks <= 10)), 1),
            "strong_right": round(100 * float(right[strong].mean()), 1) if strong.any() else None,
            "right_strong": round(100 * float(strong[right].mean()), 1) if right.any() else None,
            "right_possible": round(100 * float((levels[right] != "weak").mean()), 1) if right.any() else None,
            "removed_not_strong": round(100 * float(np.mean(absent_levels != "strong")), 1),
            "removed_weak": round(100 * float(np.mean(absent_levels == "weak")), 1),
            "auc": round(_auc(top_x[right], absent[kinds[rows] == kind]), 4) if right.any() else None,
        }
    return out


def measured(fitted: Fit, bench: Benchmark, rows: np.ndarray | None = None) -> dict:
    """measure() against the baselines of the fitted form."""
    if fitted.form is not None:
        bench = with_baseline(bench, fitted.form)
    return measure(fitted.calibration, bench, rows)


def held_out(bench: Benchmark, strong_removed: float, possible_removed: float, form: Form | None = None) -> dict:
    """measure() out of sample: fitted (the form included, unless given) on the even queries of each kind,
    measured on the odd ones, and the other way round; the two folds' figures averaged."""
    kinds = np.array(bench.kinds)
    position = np.zeros(len(kinds), int)
    for kind in set(kinds):
        sel = np.flatnonzero(kinds == kind)
        position[sel] = np.arange(len(sel))
    folds = [np.flatnonzero(position % 2 == parity) for parity in (0, 1)]
    runs = [measured(fit(bench, a, strong_removed, possible_removed, form), bench, b)
            for a, b in (folds, folds[::-1])]
    out = {}
    for kind in runs[0]:
        out[kind] = {key: (None if runs[0][kind][key] is None or runs[1][kind][key] is None
                           else round((runs[0][kind][key] + runs[1][kind][key]) / 2, 4 if key == "auc" else 1))
                     for key in runs[0][kind]}
    return out


def format_figures(figures: dict, title: str) -> str:
    head = (f"{'kind':<10}{'queries':>8}{'R@1':>7}{'R@5':>7}{'R@10':>7}{'strong right':>14}"
            f"{'right strong':>14}{'right >= possible':>19}{'removed, not strong':>21}{'removed, weak':>15}{'AUC':>8}")
    lines = [title, head]

    def cell(v, width, digits=1):
        return f"{'-':>{width}}" if v is None else f"{v:>{width}.{digits}f}"

    for kind, f in figures.items():
        lines.append(f"{kind:<10}{f['queries']:>8}" + cell(f["r1"], 7) + cell(f["r5"], 7) + cell(f["r10"], 7)
                     + cell(f["strong_right"], 14) + cell(f["right_strong"], 14) + cell(f["right_possible"], 19)
                     + cell(f["removed_not_strong"], 21) + cell(f["removed_weak"], 15) + cell(f["auc"], 8, 3))
    return "\n".join(lines)
