"""The search score's fitted weights (the ConSE bridge's weight, the hubness weight and its form) chosen again on
the mixed benchmark (bench/mixed_library.py's gallery and queries), beside Flickr8k val.

    python bench/mixed_settings.py --data-dir ../shared/data/flickr8k [--model DIR] [--gate-gains | --hub-banks]
                                   [--work DIR] [--json]

Today's search score is joint cosine + gate x ConSE score + the photo's hubness term (docs/method.md). Both the
ConSE weight and the hubness term are fitted on Flickr8k val alone (`imgtxt add-concepts`, `imgtxt tune-search`).
Here each is varied around the model's own setting, the others kept, and every query of the mixed benchmark is
ranked over the whole gallery:
  ConSE weight   the model's x 1, 4/3, 5/3, 2, 8/3 (the photo's ConSE part scales with it; confidence weight kept);
  hubness        weight 0, 0.25, 0.5, 0.75 (the photo's offset as the model measures it), in two forms:
                 linear  -w (offset - center), today's: a photo far from every training caption is lifted;
                 penalty -w max(offset - center, 0): hubs are pushed down, nothing is lifted;
  query gate     (--gate-gains) its gain 0 to 12, start and span kept: `imgtxt tune-search` takes the largest
                 gain whose val rsum stays within 0.25 of no gate, so val only vetoes; here the gain is
                 measured where it shows, on object and name queries.
  hubness bank   (--hub-banks) what a photo's offset is measured against: the model's own bank (every
                 bank_stride-th line of captions.txt, which takes one class line in bank_stride), the training
                 captions alone, those plus every class line ("A photo of a <class>."), every line; the centre
                 recomputed over the val photos, the model's weight and top_k kept. A bank without an object
                 photo's class line gives it a low offset, which the linear form turns into a lift.
For each setting: R@1/5/10 per query kind in the mixed gallery and their "mean sum" (the kinds' mean of
R@1+R@5+R@10); Flickr8k val t2i among the 1,000 val photos alone (R@1+R@5+R@10; what a search-side weight moves;
the ConSE weight moves val i2t too, which `imgtxt add-concepts` prints); and "intrusions": of the caption and the
phrase queries, the share whose 10 best photos hold an object photo (the dev set's 20 photos among 1,020: a photo
the classifier is sure of taking a scene query's places). In sample: a selection, not a measurement.
"""
from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mixed_library  # the gallery's photos and the queries file
import mixed_rerank  # the score's parts over the gallery

KINDS = ("caption", "phrase", "object", "photo-of")
CONSE_FACTORS = (1.0, 4 / 3, 5 / 3, 2.0, 8 / 3)
HUB_WEIGHTS = (0.0, 0.25, 0.5, 0.75)
GATE_GAINS = (0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 12.0)
FORMS = ("linear", "penalty")


def first_right_ranks(scores: np.ndarray, right: list, rows: np.ndarray) -> np.ndarray:
    """1-based rank of each row's best right photo (a wrong photo tied with it counts against it: tie-safe)."""
    from imgtxt.research.metrics import pessimistic_rank

    return np.array([pessimistic_rank(scores[r], list(right[r])) for r in rows])


def hub_term(distance: np.ndarray, form: str, weight: float) -> np.ndarray:
    """A photo's hubness term from its offset above the val photos' mean (`distance`)."""
    return -weight * (distance if form == "linear" else np.maximum(distance, 0.0))


def sweep(parts, kinds: np.ndarray, right: list, flickr: int, conse_weight: float, hub_weight: float) -> list[dict]:
    if hub_weight <= 0:
        raise SystemExit("mixed_settings: the model has no hubness term to vary (imgtxt tune-search first)")
    distance = -parts.hub / hub_weight   # parts.hub = -w (offset - center)
    out = []
    for factor, form, weight in itertools.product(CONSE_FACTORS, FORMS, HUB_WEIGHTS):
        if form == "penalty" and weight == 0:
            continue
        scores = parts.joint + factor * parts.gate[:, None] * parts.conse + hub_term(distance, form, weight)[None, :]
        row = {"conse_weight": round(conse_weight * factor, 3), "hub_form": form, "hub_weight": weight,
               "model_setting": factor == 1.0 and form == "linear" and weight == hub_weight}
        out.append({**row, **figures(scores, kinds, right, flickr)})
    return out


def figures(scores: np.ndarray, kinds: np.ndarray, right: list, flickr: int) -> dict:
    """R@1/5/10 per kind in the mixed gallery, their mean sum, val t2i among the val photos, intrusions."""
    rows = np.arange(len(kinds))
    row = {}
    for kind in KINDS:
        r = first_right_ranks(scores, right, rows[kinds == kind])
        row[kind] = [round(100 * float(np.mean(r <= k)), 1) for k in (1, 5, 10)]
    row["mean_sum"] = round(float(np.mean([sum(row[k]) for k in KINDS])), 1)
    r = first_right_ranks(scores[:, :flickr], right, rows[kinds == "caption"])
    row["val_t2i_sum"] = round(sum(100 * float(np.mean(r <= k)) for k in (1, 5, 10)), 2)
    for kind in ("caption", "phrase"):
        top = np.argsort(-scores[rows[kinds == kind]], axis=1, kind="stable")[:, :10]
        row[f"intrusions_{kind}"] = round(100 * float(np.mean((top >= flickr).any(axis=1))), 1)
    return row


def hub_bank_sweep(parts, gallery: np.ndarray, model, kinds: np.ndarray, right: list, flickr: int) -> list[dict]:
    """The photo offsets measured against other banks, the model's weight, top_k and linear form kept."""
    from imgtxt.model import search_tuning

    hub = model.hubness
    if not hub:
        raise SystemExit("mixed_settings: the model has no hubness term (imgtxt tune-search first)")
    lines = model.caption_bank()
    # class lines read "A photo of a tench."; training captions end " ." (two of them open "A photo of a")
    classes = np.array([re.fullmatch(r"A photo of an? .*[^ ]\.", line) is not None for line in lines])
    full = model.caption_bank_vectors(1)
    stride = hub.get("bank_stride", 1)
    captions = full[~classes]
    banks = {"the model's": full[::stride], "captions alone": captions[::stride],
             "captions + every class line": np.concatenate([captions[::stride], full[classes]]),
             "every line": full}
    content = gallery[:, :model.content_dim]
    base = parts.joint + parts.gate[:, None] * parts.conse
    out = []
    for name, bank in banks.items():
        offsets = search_tuning.photo_offsets(content, bank, hub["top_k"])
        center = float(offsets[:flickr].mean())
        scores = base - hub["weight"] * (offsets - center)[None, :]
        out.append({"bank": name, "bank_rows": len(bank), "model_setting": name == "the model's",
                    "offset_flickr": round(center, 4), "offset_objects": round(float(offsets[flickr:].mean()), 4),
                    **figures(scores, kinds, right, flickr)})
    return out


def gate_sweep(parts, kinds: np.ndarray, right: list, flickr: int, gate: dict) -> list[dict]:
    """The query gate's gain varied, its start and span and every other weight kept: a query's ConSE part is
    scaled by 1 + gain x clip((name-likeness - start) / span, 0, 1) (imgtxt.model.search_tuning.gate_scale)."""
    opening = np.clip((parts.name_like - gate["start"]) / gate["span"], 0.0, 1.0)
    out = []
    for gain in GATE_GAINS:
        scores = parts.joint + (1.0 + gain * opening)[:, None] * parts.conse + parts.hub[None, :]
        out.append({"gate_gain": gain, "model_setting": gain == gate["gain"],
                    **figures(scores, kinds, right, flickr)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True, help="Flickr8k (val: the gallery and the captions)")
    parser.add_argument("--model", type=Path, help="model folder (default: the shipped model)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "imgtxt-mixed-library")
    mixed_library.add_caltech_option(parser)
    parser.add_argument("--gate-gains", action="store_true", help="vary the query gate's gain instead")
    parser.add_argument("--hub-banks", action="store_true", help="vary the bank the hubness offsets are measured against")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from imgtxt import paths
    from imgtxt.model.modelfile import TrainedModel

    photos, queries = mixed_library.prepare(args.work, args.data_dir, "mixed_settings", args.caltech)
    model_dir = args.model or paths.default_model_dir()
    config = TrainedModel.load(model_dir).config
    parts, kinds, right, _, flickr, gallery, model = mixed_rerank.load(model_dir, args.data_dir, photos, queries,
                                                                       with_gallery=True)
    if args.hub_banks:
        print_rows(hub_bank_sweep(parts, gallery, model, kinds, right, flickr), args.json,
                   f"{'bank':>28} {'rows':>6} {'offset val / obj':>17} ",
                   lambda r: f"{r['bank']:>28} {r['bank_rows']:>6} {r['offset_flickr']:>8.4f} /{r['offset_objects']:>7.4f} ")
        return
    if args.gate_gains:
        gate = config.get("search", {}).get("query_gate")
        if not gate:
            raise SystemExit("mixed_settings: the model has no query gate (imgtxt tune-search first)")
        print_rows(gate_sweep(parts, kinds, right, flickr, gate), args.json,
                   f"{'gain':>6} ", lambda r: f"{r['gate_gain']:>6.1f} ")
        return
    rows = sweep(parts, kinds, right, flickr, config["concepts"]["weight"],
                 config.get("search", {}).get("hubness", {}).get("weight", 0.0))
    print_rows(rows, args.json, f"{'ConSE':>6} {'hubness':>13} ",
               lambda r: f"{r['conse_weight']:>6.3f} {r['hub_form']:>8} {r['hub_weight']:<4} ")


def print_rows(rows: list[dict], as_json: bool, head: str, setting) -> None:
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    print(head + "".join(f"{k:>19}" for k in KINDS) + f"{'mean sum':>9}{'val t2i':>9}{'intrusions cap / phr':>22}")
    for r in rows:
        mark = " <- the model's" if r["model_setting"] else ""
        print(setting(r) + "".join(f"{' / '.join(f'{v:.1f}' for v in r[k]):>19}" for k in KINDS)
              + f"{r['mean_sum']:>9.1f}{r['val_t2i_sum']:>9.2f}"
              + f"{r['intrusions_caption']:>12.1f} / {r['intrusions_phrase']:<7.1f}{mark}")


if __name__ == "__main__":
    main()
