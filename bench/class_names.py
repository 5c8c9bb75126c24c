"""Do everyday names reach the right ImageNet classes? The text side of a model's ConSE bridge, alone.

    python bench/class_names.py [--model DIR ...] [--json]

A search for "a photo of a horse" finds a photo of a horse through the ConSE part only if the query's sentence
vector is close to the vector of the class the CNN's classifier names for that photo ("sorrel"). For each of
55 everyday names (NAMES: a hand-made list, each with the ImageNet classes a person would accept for it), the
query "a photo of a <name>" is compared with the model's 1,000 stored class vectors; the rank of the best
accepted class is reported (1 = the nearest), with top-1 / top-3 / top-10 rates. No photo and no CNN is used.

The list was written for this measurement, partly after seeing the names-only class vectors miss some of
these names (horse, sheep, goat, apple, duck, mountain): it is a dev list, biased towards those misses.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

NAMES: dict[str, tuple[str, ...]] = {   # name -> accepted classes (first WordNet lemma, timm's order)
    "horse": ("sorrel",), "sheep": ("ram", "bighorn"), "cow": ("ox",), "goat": ("ibex",), "pig": ("hog",),
    "dog": ("@dogs",), "cat": ("tabby", "tiger cat", "Persian cat", "Siamese cat", "Egyptian cat"),
    "bird": ("@birds",), "apple": ("Granny Smith",), "duck": ("drake", "red-breasted merganser"),
    "mountain": ("alp", "volcano"), "glasses": ("sunglasses", "sunglass"),
    "ball": ("soccer ball", "tennis ball", "golf ball", "volleyball", "basketball", "rugby ball", "baseball",
             "croquet ball", "ping-pong ball"),
    "bag": ("plastic bag", "backpack", "mailbag", "purse", "sleeping bag"),
    "car": ("sports car", "convertible", "cab", "racer", "limousine", "minivan", "beach wagon", "jeep", "Model T"),
    "boat": ("speedboat", "canoe", "yawl", "fireboat", "lifeboat", "gondola", "catamaran", "trimaran", "schooner",
             "paddlewheel"),
    "bicycle": ("mountain bike", "bicycle-built-for-two"), "phone": ("cellular telephone", "dial telephone", "pay-phone"),
    "table": ("dining table",), "chair": ("folding chair", "rocking chair", "barber chair", "throne"),
    "bear": ("brown bear", "American black bear", "ice bear", "sloth bear"),
    "monkey": ("squirrel monkey", "howler monkey", "proboscis monkey", "capuchin", "spider monkey", "titi", "marmoset",
               "colobus", "macaque", "langur", "baboon", "patas", "guenon"),
    "rabbit": ("wood rabbit", "hare", "Angora"), "chicken": ("cock", "hen"),
    "butterfly": ("admiral", "ringlet", "monarch", "cabbage butterfly", "sulphur butterfly", "lycaenid"),
    "owl": ("great grey owl",), "parrot": ("African grey", "macaw", "sulphur-crested cockatoo", "lorikeet"),
    "turtle": ("loggerhead", "leatherback turtle", "mud turtle", "terrapin", "box turtle"),
    "whale": ("grey whale", "killer whale"), "bus": ("school bus", "trolleybus", "minibus"),
    "truck": ("trailer truck", "tow truck", "pickup", "fire engine", "garbage truck", "moving van", "police van"),
    "airplane": ("airliner", "warplane"), "ship": ("container ship", "liner", "aircraft carrier", "schooner", "fireboat"),
    "motorcycle": ("moped", "motor scooter"), "piano": ("grand piano", "upright"),
    "shoe": ("running shoe", "clog", "cowboy boot", "Loafer", "sandal"),
    "hat": ("cowboy hat", "sombrero", "bonnet", "mortarboard", "shower cap"),
    "flower": ("daisy", "yellow lady's slipper"),
    "mushroom": ("mushroom", "agaric", "gyromitra", "stinkhorn", "earthstar", "hen-of-the-woods", "bolete"),
    "frog": ("bullfrog", "tree frog", "tailed frog"),
    "lizard": ("common iguana", "American chameleon", "whiptail", "agama", "frilled lizard", "alligator lizard",
               "Gila monster", "green lizard", "African chameleon", "Komodo dragon", "banded gecko"),
    "train": ("bullet train", "steam locomotive", "electric locomotive", "passenger car", "freight car", "streetcar"),
    "coffee": ("espresso", "coffee mug", "coffeepot"), "bread": ("French loaf", "bagel", "pretzel"),
    "pumpkin": ("jack-o'-lantern", "acorn squash", "butternut squash"), "guitar": ("acoustic guitar", "electric guitar"),
    "computer": ("desktop computer", "laptop", "notebook", "hand-held computer"), "sofa": ("studio couch",),
    "bed": ("four-poster", "crib", "cradle"),
    "house": ("boathouse", "mobile home", "barn", "cinema", "palace", "monastery"),
    "clock": ("analog clock", "digital clock", "wall clock"),
    "insect": ("ladybug", "ant", "bee", "fly", "grasshopper", "cricket", "mantis", "cockroach", "dragonfly",
               "damselfly", "leaf beetle", "ground beetle", "weevil", "walking stick", "cicada", "leafhopper"),
    "jacket": ("trench coat", "fur coat", "lab coat", "suit", "sweatshirt"),
    "fruit": ("Granny Smith", "strawberry", "orange", "lemon", "fig", "pineapple", "banana", "jackfruit",
              "custard apple", "pomegranate"),
    "vegetable": ("head cabbage", "broccoli", "cauliflower", "zucchini", "spaghetti squash", "acorn squash",
                  "butternut squash", "cucumber", "artichoke", "bell pepper", "cardoon", "mushroom", "corn"),
}
RANGES = {"@dogs": range(151, 269), "@birds": [*range(7, 25), *range(80, 101), *range(127, 147)]}


def accepted_classes(first_lemmas: list[str]) -> dict[str, list[int]]:
    index = {name: i for i, name in enumerate(first_lemmas)}
    out = {}
    for name, classes in NAMES.items():
        rows: list[int] = []
        for c in classes:
            if c in RANGES:
                rows += list(RANGES[c])
            elif c in index:
                rows.append(index[c])
            else:
                raise SystemExit(f"{c!r} (for {name!r}) is not an ImageNet class's first lemma")
        out[name] = rows
    return out


def ranks(model, accepted: dict[str, list[int]]) -> dict[str, int]:
    """Rank (1 = nearest) of the best accepted class for each query, by the model's stored class vectors."""
    h, d = model.config["joint"]["embed_dim"], model.content_dim
    queries = model.encode_text([f"a photo of a {name}" for name in accepted])[:, h:d]
    scores = queries @ model.concepts.class_vectors.T
    out = {}
    for row, (name, rows) in zip(scores, accepted.items()):
        order = np.argsort(-row, kind="stable")
        position = np.empty(len(order), np.int64)
        position[order] = np.arange(1, len(order) + 1)
        out[name] = int(position[rows].min())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", action="append", type=Path, help="a model folder with a ConSE bridge (repeatable; "
                        "default: the shipped model)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from imgtxt.model.modelfile import TrainedModel, default_model_dir
    from imgtxt.research.concepts_fit import class_lemmas

    accepted = accepted_classes([names[0] for names in class_lemmas()])
    results = {}
    for folder in args.model or [default_model_dir()]:
        model = TrainedModel.load(folder)
        if model.concepts is None:
            raise SystemExit(f"{folder}: no ConSE bridge (concepts) in this model")
        r = ranks(model, accepted)
        values = np.array(list(r.values()))
        results[model.model_id] = {"class_text": model.config["concepts"].get("class_text"),
                                   **{f"top{k}": round(float(np.mean(values <= k)), 3) for k in (1, 3, 10)},
                                   "median": float(np.median(values)), "ranks": r}
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for model_id, res in results.items():
        print(f"{model_id} ({res['class_text']}): top-1 {res['top1']:.0%}  top-3 {res['top3']:.0%}  "
              f"top-10 {res['top10']:.0%}  median rank {res['median']:.0f}")
        far = {n: k for n, k in res["ranks"].items() if k > 3}
        print("  beyond 3rd: " + (", ".join(f"{n} {k}" for n, k in far.items()) or "none"), file=sys.stdout)


if __name__ == "__main__":
    main()
