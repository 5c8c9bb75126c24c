"""Would a search confidence that also reads the library's own scores separate right from wrong top results better
than the shipped one, which reads only the query's scores over the model's reference photos?

    python bench/confidence_features.py --data-dir ../shared/data/flickr8k [--model DIR] [--work DIR] [--json]

(pip install -e '.[devset]' first, as for bench/mixed_library.py: the dev photos, and scikit-learn's logistic.)

On bench/mixed_library.py's benchmark (Flickr8k val photos and the object dev set in one gallery; captions,
phrases, object queries, "a photo of a" queries), each query's top result is described by
  reference  (score - baseline) / scale: the shipped per-query confidence's input (search_confidence.py);
  margin     (top score - second score) / scale in this gallery;
  gap10      (top score - tenth score) / scale in this gallery;
  z50        the top score's z-score among the gallery's next 49 scores.
Per kind: the AUC of each feature for right against wrong top results, and for right top results against the
top result once the query's right photos are removed. Then logistic fits (each kind weighing the same; fitted
and measured on the same queries, which favours them) of `reference` with each library feature, each rated at the
lowest strong threshold that leaves removed-subject top results not strong in >= 90% of each kind: of the strong
top results the share right, of the right ones the share strong (the targets: >= 90 and >= 50).
A library feature also makes a result's level depend on what else the library holds, which the shipped
confidence avoids (a 6-photo folder and a 100,000-photo one rate a result alike).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mixed_library  # noqa: E402
import object_devset  # noqa: E402

FEATURES = ("reference", "margin", "gap10", "z50")
COMBOS = (("reference",), ("reference", "margin"), ("reference", "gap10"), ("reference", "z50"), FEATURES)
REMOVED_NOT_STRONG = 0.90


def auc(positive: np.ndarray, negative: np.ndarray) -> float | None:
    """P(a positive scores above a negative), ties counting half (the calibration's own Mann-Whitney)."""
    from imgtxt.research.calibrate import _auc

    return _auc(positive, negative) if len(positive) and len(negative) else None


def features(bench, q: int, keep: np.ndarray | None = None) -> tuple[int, np.ndarray]:
    """(the top photo, its FEATURES) for query q, among the photos `keep` (all by default)."""
    scores = bench.scores[q] if keep is None else np.where(keep, bench.scores[q], -np.inf)
    top = np.sort(scores)[::-1][:50]
    scale = 1.0 if bench.scales is None else float(bench.scales[q])
    return int(np.argmax(scores)), np.array([(top[0] - bench.baselines[q]) / scale, (top[0] - top[1]) / scale,
                                             (top[0] - top[9]) / scale,
                                             (top[0] - top[1:].mean()) / (top[1:].std() + 1e-6)])


def measure(bench) -> dict:
    from sklearn.linear_model import LogisticRegression

    kinds = np.array(bench.kinds)
    right, found, removed = [], [], []
    for q in range(len(kinds)):
        top, f = features(bench, q)
        keep = np.ones(bench.photos, bool)
        keep[list(bench.right[q])] = False
        right.append(top in bench.right[q])
        found.append(f)
        removed.append(features(bench, q, keep)[1])
    right, found, removed = np.array(right), np.array(found), np.array(removed)
    names = list(dict.fromkeys(bench.kinds))
    out: dict = {"auc": {}, "fits": {}}
    for kind in names:
        m = kinds == kind
        out["auc"][kind] = {name: {"right_vs_wrong": auc(found[m & right, j], found[m & ~right, j]),
                                   "right_vs_removed": auc(found[m & right, j], removed[m, j])}
                            for j, name in enumerate(FEATURES)}
    weight = np.array([1.0 / np.sum(kinds == k) for k in kinds])
    for combo in COMBOS:
        cols = [FEATURES.index(c) for c in combo]
        x = np.vstack([found[:, cols], removed[:, cols]])
        y = np.concatenate([right, np.zeros(len(removed), bool)])
        fit = LogisticRegression(C=10.0, max_iter=1000).fit(x, y, sample_weight=np.concatenate([weight, weight]))
        s, s_removed = fit.decision_function(found[:, cols]), fit.decision_function(removed[:, cols])
        threshold = max(float(np.quantile(s_removed[kinds == k], REMOVED_NOT_STRONG)) for k in names)
        rows = {}
        for kind in names:
            m = kinds == kind
            strong = s[m] >= threshold
            rows[kind] = {"auc": auc(s[m & right], s[m & ~right]),
                          "strong_right": round(100 * float(right[m][strong].mean()), 1) if strong.any() else None,
                          "right_strong": round(100 * float(strong[right[m]].mean()), 1) if right[m].any() else None}
        out["fits"]["+".join(combo)] = rows
    return out


def print_result(r: dict) -> None:
    print("AUC, right vs wrong top result (right top result vs the top once its right photos are removed):")
    print(f"{'kind':<10}" + "".join(f"{name:>20}" for name in FEATURES))
    for kind, row in r["auc"].items():
        print(f"{kind:<10}" + "".join(f"{row[n]['right_vs_wrong'] or 0:>12.3f} ({row[n]['right_vs_removed'] or 0:.3f})"
                                      for n in FEATURES))
    print("\nlogistic fits, in sample: AUC; strong right %; right strong %")
    for combo, rows in r["fits"].items():
        cells = "; ".join(f"{k} {v['auc'] or 0:.3f}, {v['strong_right']}, {v['right_strong']}" for k, v in rows.items())
        print(f"{combo:<28}{cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True, help="Flickr8k (train: reference photos; val: the gallery)")
    parser.add_argument("--model", type=Path, help="model folder (default: shipped)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "imgtxt-mixed-library")
    mixed_library.add_caltech_option(parser)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from imgtxt import paths
    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.model.search_confidence import of_model
    from imgtxt.research import search_confidence_fit as fitting

    try:
        photos, queries = mixed_library.prepare(args.work, args.data_dir, "confidence_features", args.caltech)
    except object_devset.DevSetError as e:
        raise SystemExit(f"confidence_features: {e}") from None
    model = TrainedModel.load(args.model or paths.default_model_dir())
    per_query = of_model(model)
    if per_query is None:
        raise SystemExit("confidence_features: the model has no per-query search confidence (imgtxt calibrate-search)")
    # over the reference photos the model ships with, as its searches are rated
    bench = fitting.build(model, "flickr8k", args.data_dir, per_query.reference, "val", queries, photos, quiet=True)
    bench = fitting.with_baseline(bench, fitting.Form(per_query.rank, per_query.concept_weight,
                                                      per_query.concept_scale))
    result = {"model_id": model.model_id, **measure(bench)}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(result["model_id"])
        print_result(result)


if __name__ == "__main__":
    main()
