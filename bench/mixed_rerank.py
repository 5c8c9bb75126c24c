"""One ranking across query kinds: alternatives to today's search score, measured out of sample on the mixed
benchmark (bench/mixed_library.py's gallery and queries).

    python bench/mixed_rerank.py --data-dir ../shared/data/flickr8k [--model DIR] [--work DIR] [--top 100]
                                 [--seeds 0 1 2] [--caption-weight 3] [--json]

Every alternative re-ranks each query's `--top` best photos under today's score (imgtxt/research/rank_fusion.py):
  today       joint + gate x ConSE + hubness, as shipped;
  rrf         reciprocal-rank fusion of today's ranking and the ConSE ranking, the latter weighted by
              w * clip((name-likeness - s) / 0.3, 0, 1); k, w, s chosen on a grid;
  gate        today's form with the query gate's gain, start and span chosen on the mixed benchmark;
  hub         today's form with the hubness term scaled (0 to 2x);
  logistic    a weighted logistic over rank_fusion.FEATURES within the candidates, captions weighing
              `--caption-weight` times each other kind (default 3, so that Flickr8k val does not drop).
Grids and fits are chosen on three folds of the queries and measured on the fourth (queries of one photo share a
fold), for each of `--seeds` fold draws; the table gives R@1/5/10 per kind out of sample, mean over the seeds,
and "mean sum", the kinds' mean of R@1+R@5+R@10. The last line is Flickr8k val t2i among the 1,000 val photos
alone (what `imgtxt eval` measures; i2t is untouched by a search-side re-ranking) for each alternative fitted on
all queries.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mixed_library  # the gallery, its photos and the queries file

KINDS = ("caption", "phrase", "object", "photo-of")


def load(model_dir: Path, data_dir: str, photos: Path, queries: Path, with_gallery: bool = False):
    """(score parts, kinds, right photos, fold groups, Flickr8k photo count[, the gallery's vectors])."""
    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.research import rank_fusion
    from imgtxt.research import search_confidence_fit as fitting
    from imgtxt.research.calibrate import embed_photos, split_vectors
    from imgtxt.research.datasets import load_split

    model = TrainedModel.load(model_dir)
    split = load_split("flickr8k", data_dir, "val")
    images, _ = split_vectors(model, "flickr8k", data_dir, "val", quiet=True)
    phrases = fitting.caption_phrases(split.captions)
    extra = fitting.read_queries(queries)
    in_split = {p.name: i for i, p in enumerate(split.image_paths)}
    names = sorted({n for _, files, _ in extra for n in files} - set(in_split))
    column = {**in_split, **{n: len(images) + i for i, n in enumerate(names)}}
    gallery = np.concatenate([images, embed_photos(model, [photos / n for n in names], "photos", quiet=True)])
    texts = list(split.captions) + [p for p, _ in phrases] + [q for q, _, _ in extra]
    kinds = ["caption"] * len(split.captions) + ["phrase"] * len(phrases) + [k for _, _, k in extra]
    right = ([frozenset([i // 5]) for i in range(len(split.captions))] + [s for _, s in phrases]
             + [frozenset(column[n] for n in files) for _, files, _ in extra])
    # a fold keeps together the queries of one photo (5 captions; an object photo's queries)
    groups = ([f"c{i // 5}" for i in range(len(split.captions))] + [f"p{i}" for i in range(len(phrases))]
              + [f"o{min(c for c in r if c >= len(images))}" for r in right[len(split.captions) + len(phrases):]])
    parts = rank_fusion.score_parts(model, gallery, model.encode_text(texts))
    out = parts, np.array(kinds), right, groups, len(images)
    return (*out, gallery, model) if with_gallery else out


class Candidates:
    """Each query's top-n photos under today's score, their parts and which of them are right."""

    def __init__(self, parts, right, n: int, columns: np.ndarray | None = None):
        from imgtxt.research import rank_fusion as rf

        today = parts.today if columns is None else parts.today[:, columns]
        cols = rf.top_candidates(today, n)
        self.columns = cols if columns is None else columns[cols]
        def take(a):
            return np.take_along_axis(a if columns is None else a[:, columns], cols, axis=1)

        self.joint, self.conse, self.today = take(parts.joint), take(parts.conse), take(today)
        self.hub, self.gate, self.name_like = parts.hub[self.columns], parts.gate, parts.name_like
        self.is_right = np.array([[c in r for c in row] for row, r in zip(self.columns, right)])
        # a right photo outside the candidates keeps its rank under today's score
        self.outside = np.array([1 + int((t > max(t[c] for c in r)).sum()) for t, r in zip(
            parts.today if columns is None else parts.today[:, columns],
            right if columns is None else [frozenset(np.flatnonzero(np.isin(columns, list(r)))) for r in right])])
        self.features = rf.rerank_features(self.joint, self.conse, self.hub, self.name_like)
        self.today_rank = np.arange(self.joint.shape[1])[None, :].repeat(len(self.joint), 0)
        self.conse_rank = rf.ranks_within(self.conse)

    def ranks(self, scores: np.ndarray, rows: np.ndarray) -> np.ndarray:
        from imgtxt.research.metrics import pessimistic_rank

        out = np.empty(len(rows), int)
        for i, r in enumerate(rows):
            hit = self.is_right[r]
            # a wrong candidate tied with the best right one counts against it
            out[i] = pessimistic_rank(scores[r], hit) if hit.any() else self.outside[r]
        return out


def recalls(cands: Candidates, scores: np.ndarray, rows: np.ndarray, kinds: np.ndarray) -> dict:
    out = {}
    for kind in KINDS:
        sel = rows[kinds[rows] == kind]
        if len(sel):
            r = cands.ranks(scores, sel)
            out[kind] = [100 * float(np.mean(r <= k)) for k in (1, 5, 10)]
    return out


def mean_sum(figures: dict) -> float:
    return float(np.mean([sum(v) for v in figures.values()]))


def families(cands: Candidates, kinds: np.ndarray, caption_weight: float):
    """name -> (list of settings, settings -> (Q, n) scores, fitted: whether settings come from a fit)."""
    from imgtxt.research import rank_fusion as rf

    def gated(s, span=0.3):
        return np.clip((cands.name_like - s) / span, 0, 1)[:, None]

    def gate(p):
        gain, start, span = p
        return cands.joint + (1 + gain * gated(start, span)) * cands.conse + cands.hub

    def logistic(rows):
        w = rf.kind_weights(kinds[rows], {"caption": caption_weight})
        x = cands.features[rows].reshape(-1, cands.features.shape[-1])
        coef, mean, scale = rf.fit_weighted_logistic(x, cands.is_right[rows].ravel(),
                                                     np.repeat(w, cands.features.shape[1]), l2=0.1)
        return rf.rerank_scores(cands.features, coef, mean, scale)

    return {
        "today": ([None], lambda p: cands.today, False),
        "rrf": (list(itertools.product([10, 30, 60], [0.5, 1, 2, 4], [0.45, 0.55, 0.65, 0.75])),
                lambda p: rf.reciprocal_rank_fusion([cands.today_rank, cands.conse_rank],
                                                    [1.0, p[1] * gated(p[2])], k=p[0]), False),
        "gate": (list(itertools.product([2, 3, 5, 8, 12], [0.45, 0.5, 0.527, 0.6, 0.7], [0.15, 0.3, 0.45])),
                 gate, False),
        "hub": ([0.0, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0],
                lambda p: cands.joint + cands.gate[:, None] * cands.conse + p * cands.hub, False),
        "logistic": ([None], logistic, True),
    }


def cross_validate(cands, kinds, groups, seeds, caption_weight: float) -> dict:
    from imgtxt.research import rank_fusion as rf

    everyone = np.arange(len(kinds))
    out = {}
    for name, (grid, score, fitted) in families(cands, kinds, caption_weight).items():
        cached = {} if fitted else {p: score(p) for p in grid}
        per_seed = []
        for seed in seeds:
            fold = rf.folds_of(kinds, groups, 4, seed)
            sums = {k: np.zeros(3) for k in KINDS}
            for f in range(4):
                train, test = everyone[fold != f], everyone[fold == f]
                if fitted:
                    scores = score(train)
                else:
                    scores = cached[max(grid, key=lambda p: mean_sum(recalls(cands, cached[p], train, kinds)))]
                for kind, v in recalls(cands, scores, test, kinds).items():
                    sums[kind] += np.array(v) * np.sum(kinds[test] == kind)
            per_seed.append({k: sums[k] / np.sum(kinds == k) for k in KINDS})
        figures = {k: [round(float(np.mean([s[k][i] for s in per_seed])), 1) for i in range(3)] for k in KINDS}
        out[name] = {"out_of_sample": figures, "mean_sum": round(mean_sum(figures), 1)}
        chosen = everyone if fitted else max(grid, key=lambda p: mean_sum(recalls(cands, cached[p], everyone, kinds)))
        out[name]["all_queries_setting"] = None if fitted else chosen
    return out


def val_t2i(parts, right, kinds, flickr: int, n: int, results: dict, full: Candidates,
            caption_weight: float) -> None:
    """Each alternative's settings chosen on all queries, then Flickr8k val t2i among the val photos alone."""
    captions = np.flatnonzero(kinds == "caption")
    sub = type(parts)(parts.joint[captions], parts.conse[captions], parts.hub, parts.gate[captions],
                      parts.name_like[captions])
    own = Candidates(sub, [right[r] for r in captions], n, np.arange(flickr))
    own_kinds = kinds[captions]
    for name, (grid, score, fitted) in families(own, own_kinds, caption_weight).items():
        if fitted:   # fitted on the whole mixed benchmark, applied to the val-only candidates
            from imgtxt.research import rank_fusion as rf

            w = rf.kind_weights(kinds, {"caption": caption_weight})
            x = full.features.reshape(-1, full.features.shape[-1])
            coef, mean, scale = rf.fit_weighted_logistic(x, full.is_right.ravel(),
                                                         np.repeat(w, full.features.shape[1]), l2=0.1)
            scores = rf.rerank_scores(own.features, coef, mean, scale)
            results[name]["coefficients"] = dict(zip(rf.FEATURES, np.round(coef, 3).tolist()))
        else:
            scores = score(results[name]["all_queries_setting"])
        r = own.ranks(scores, np.arange(len(captions)))
        results[name]["val_t2i"] = [round(100 * float(np.mean(r <= k)), 2) for k in (1, 5, 10)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True, help="Flickr8k (val: the gallery and the captions)")
    parser.add_argument("--model", type=Path, help="model folder (default: the shipped model)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "imgtxt-mixed-library")
    mixed_library.add_caltech_option(parser)
    parser.add_argument("--top", type=int, default=100, help="candidates re-ranked per query")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="fold draws")
    parser.add_argument("--caption-weight", type=float, default=3.0, help="captions' weight in the logistic's fit")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from imgtxt import paths

    photos, queries = mixed_library.prepare(args.work, args.data_dir, "mixed_rerank", args.caltech)
    parts, kinds, right, groups, flickr = load(args.model or paths.default_model_dir(), args.data_dir, photos, queries)
    cands = Candidates(parts, right, args.top)
    results = cross_validate(cands, kinds, groups, args.seeds, args.caption_weight)
    val_t2i(parts, right, kinds, flickr, args.top, results, cands, args.caption_weight)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"out of sample, 4 folds x seeds {args.seeds}; top {args.top} candidates re-ranked")
    print(f"{'':<10}" + "".join(f"{k:>20}" for k in KINDS) + f"{'mean sum':>10}{'val t2i (all fit)':>22}")
    for name, r in results.items():
        row = "".join(f"{' / '.join(f'{v:.1f}' for v in r['out_of_sample'][k]):>20}" for k in KINDS)
        print(f"{name:<10}{row}{r['mean_sum']:>10.1f}{' / '.join(f'{v:.2f}' for v in r['val_t2i']):>22}")
    for name, r in results.items():
        extra = r.get("coefficients") or r["all_queries_setting"]
        if extra is not None:
            print(f"{name}: {extra}")


if __name__ == "__main__":
    main()
