"""Caltech 101 photos for the mixed benchmark: things Flickr8k never shows, and reference photos that make the search
confidence rate queries for such things on the scale of the others.

Caltech 101 (Fei-Fei, Fergus and Perona, 2004; CC BY 4.0, CaltechDATA doi:10.22002/D1.20086) holds 9,144 photos
of 101 object categories and a background set. Any copy of its `101_ObjectCategories` folder works (the file names
are the same in all of them; docs/results.md says where to get one). From each category, sorted by file name:
  - the first GALLERY photos join the mixed benchmark's gallery (not the background set, nor the two face sets:
    Flickr8k's photos are full of faces, so a face query has no one right answer), searched with CATEGORIES:
    "a pizza" (kind `object`) and "a photo of a pizza" (kind `photo-of`); a Flickr8k val photo counts as right
    too when one of its captions says one of the category's words;
  - the next REFERENCE photos of every folder (102 x 3 = 306) go to the reference photos of the search confidence
    (imgtxt calibrate-search --reference-photos), so no photo is both.
Copies get neutral names (caltech-NNNN.jpg: a search also ranks by file-name words), listed in MANIFEST.tsv.
"""
from __future__ import annotations

import csv
import re
import shutil
from pathlib import Path

GALLERY = 3
REFERENCE = 3
NOT_IN_GALLERY = ("BACKGROUND_Google", "Faces", "Faces_easy")

# the query (a person's words for the category) -> (its Caltech folders, words of a Flickr8k caption that show it)
CATEGORIES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "an accordion": (("accordion",), ("accordion",)),
    "an airplane": (("airplanes",), ("airplane", "airplanes", "jet", "plane", "planes")),
    "an anchor": (("anchor",), ("anchor",)),
    "an ant": (("ant",), ("ant", "ants")),
    "a barrel": (("barrel",), ("barrel", "barrels")),
    "a bass fish": (("bass",), ()),
    "a beaver": (("beaver",), ("beaver",)),
    "binoculars": (("binocular",), ("binoculars",)),
    "a bonsai tree": (("bonsai",), ("bonsai",)),
    "a brain": (("brain",), ("brain",)),
    "a brontosaurus": (("brontosaurus",), ("dinosaur",)),
    "a buddha statue": (("buddha",), ("buddha",)),
    "a butterfly": (("butterfly",), ("butterflies", "butterfly")),
    "a camera": (("camera",), ("camera", "cameras")),
    "a cannon": (("cannon",), ("cannon",)),
    "a car": (("car_side",), ("car", "cars")),
    "a ceiling fan": (("ceiling_fan",), ()),
    "a cellphone": (("cellphone",), ("cellphone", "phone")),
    "a chair": (("chair", "windsor_chair"), ("chair", "chairs")),
    "a chandelier": (("chandelier",), ("chandelier",)),
    "a cougar": (("cougar_body", "cougar_face"), ("cougar",)),
    "a crab": (("crab",), ("crab", "crabs")),
    "a crayfish": (("crayfish",), ("crayfish",)),
    "a crocodile": (("crocodile", "crocodile_head"), ("alligator", "crocodile")),
    "a cup": (("cup",), ("cup", "mug")),
    "a dalmatian": (("dalmatian",), ("dalmatian", "dalmatians")),
    "a dollar bill": (("dollar_bill",), ("dollar",)),
    "a dolphin": (("dolphin",), ("dolphin", "dolphins")),
    "a dragonfly": (("dragonfly",), ("dragonfly",)),
    "an electric guitar": (("electric_guitar",), ("guitar",)),
    "an elephant": (("elephant",), ("elephant", "elephants")),
    "an emu": (("emu",), ("emu", "ostrich")),
    "a euphonium": (("euphonium",), ("horn", "tuba")),
    "a water jug": (("ewer",), ("jug", "pitcher")),
    "a ferry": (("ferry",), ("ferry",)),
    "a flamingo": (("flamingo", "flamingo_head"), ("flamingo", "flamingos")),
    "garfield": (("garfield",), ("garfield",)),
    "a gerenuk": (("gerenuk",), ()),
    "a gramophone": (("gramophone",), ()),
    "a grand piano": (("grand_piano",), ("piano",)),
    "a sea turtle": (("hawksbill",), ("turtle",)),
    "headphones": (("headphone",), ("headphones",)),
    "a hedgehog": (("hedgehog",), ("hedgehog",)),
    "a helicopter": (("helicopter",), ("helicopter",)),
    "an ibis": (("ibis",), ("ibis",)),
    "inline skates": (("inline_skate",), ("rollerblade", "rollerblades", "rollerblading", "skates")),
    "a joshua tree": (("joshua_tree",), ()),
    "a kangaroo": (("kangaroo",), ("kangaroo",)),
    "a sailboat": (("ketch", "schooner"), ("sail", "sailboat", "sailboats")),
    "a lamp": (("lamp",), ("lamp",)),
    "a laptop": (("laptop",), ("computer", "laptop")),
    "a leopard": (("Leopards",), ("leopard",)),
    "a llama": (("llama",), ("llama", "llamas")),
    "a lobster": (("lobster",), ("lobster",)),
    "a lotus flower": (("lotus",), ("lotus",)),
    "a mandolin": (("mandolin",), ("mandolin",)),
    "a mayfly": (("mayfly",), ()),
    "a menorah": (("menorah",), ("menorah",)),
    "a metronome": (("metronome",), ()),
    "a minaret": (("minaret",), ("minaret", "mosque")),
    "a motorbike": (("Motorbikes",), ("motorbike", "motorbikes", "motorcycle", "motorcycles")),
    "a nautilus shell": (("nautilus",), ("shell",)),
    "an octopus": (("octopus",), ("octopus",)),
    "an okapi": (("okapi",), ()),
    "a pagoda": (("pagoda",), ("pagoda",)),
    "a panda": (("panda",), ("panda",)),
    "a pigeon": (("pigeon",), ("pigeon", "pigeons")),
    "a pizza": (("pizza",), ("pizza",)),
    "a platypus": (("platypus",), ()),
    "a pyramid": (("pyramid",), ("pyramid", "pyramids")),
    "a revolver": (("revolver",), ("gun", "pistol", "revolver")),
    "a rhino": (("rhino",), ("rhino", "rhinoceros")),
    "a rooster": (("rooster",), ("chicken", "chickens", "rooster")),
    "a saxophone": (("saxophone",), ("sax", "saxophone")),
    "scissors": (("scissors",), ("scissors",)),
    "a scorpion": (("scorpion",), ("scorpion",)),
    "a seahorse": (("sea_horse",), ("seahorse",)),
    "snoopy": (("snoopy",), ("snoopy",)),
    "a soccer ball": (("soccer_ball",), ("soccer", "soccer ball")),
    "a stapler": (("stapler",), ("stapler",)),
    "a starfish": (("starfish",), ("starfish",)),
    "a stegosaurus": (("stegosaurus",), ("dinosaur",)),
    "a stop sign": (("stop_sign",), ("stop sign",)),
    "a strawberry": (("strawberry",), ("strawberries", "strawberry")),
    "a sunflower": (("sunflower",), ("sunflower", "sunflowers")),
    "a tick": (("tick",), ()),
    "a trilobite fossil": (("trilobite",), ("fossil",)),
    "an umbrella": (("umbrella",), ("umbrella", "umbrellas")),
    "a wristwatch": (("watch",), ("wristwatch",)),
    "a water lily": (("water_lilly",), ("lilies", "lily")),
    "a wheelchair": (("wheelchair",), ("wheelchair",)),
    "a wild cat": (("wild_cat",), ("bobcat", "lynx")),
    "a wrench": (("wrench",), ("wrench",)),
    "a yin yang symbol": (("yin_yang",), ()),
}

ANIMALS = ("ant", "bass", "beaver", "butterfly", "cougar_body", "cougar_face", "crab", "crayfish", "crocodile",
           "crocodile_head", "dalmatian", "dolphin", "dragonfly", "elephant", "emu", "flamingo", "flamingo_head",
           "gerenuk", "hawksbill", "hedgehog", "ibis", "kangaroo", "Leopards", "llama", "lobster", "mayfly",
           "octopus", "okapi", "panda", "pigeon", "platypus", "rhino", "rooster", "scorpion", "sea_horse",
           "starfish", "tick", "wild_cat")
# The object dev set's queries that Caltech photos answer too (looked at: its cups are coffee cups on saucers).
DEV_QUERIES_ALSO: dict[str, tuple[str, ...]] = {
    "a cup of coffee": ("cup",), "a photo of a cup of coffee": ("cup",), "an espresso on a saucer": ("cup",),
    "a photo of an espresso": ("cup",), "a photo of a camera": ("camera",), "a chinese pagoda": ("pagoda",),
    "a photo of a pagoda": ("pagoda",), "a photo of a flower": ("sunflower", "water_lilly", "lotus"),
    "a photo of a cat": ("wild_cat",), "an animal": ANIMALS,
}


class CaltechError(Exception):
    """The Caltech folder cannot be used (one line)."""


def folders(caltech: Path) -> list[Path]:
    """The category folders of a `101_ObjectCategories` folder, checked against CATEGORIES."""
    caltech = Path(caltech)
    if not caltech.is_dir():
        raise CaltechError(f"{caltech}: not a folder (the Caltech 101 101_ObjectCategories folder)")
    found = sorted(p for p in caltech.iterdir() if p.is_dir())
    needed = {c for classes, _ in CATEGORIES.values() for c in classes} | set(NOT_IN_GALLERY)
    missing = sorted(needed - {p.name for p in found})
    if missing:
        raise CaltechError(f"{caltech}: no folder {', '.join(missing[:3])}: not Caltech 101's 101_ObjectCategories")
    return [p for p in found if p.name in needed]


def photos_of(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))


def copy(caltech: Path, gallery: Path, reference: Path) -> dict[str, list[str]]:
    """Copy the gallery and reference photos (neutral names, MANIFEST.tsv in each folder); {category folder: its
    gallery file names}."""
    names: dict[str, list[str]] = {}
    rows: dict[Path, list] = {gallery: [], reference: []}
    for target in rows:
        target.mkdir(parents=True, exist_ok=True)
    for folder in folders(caltech):
        files = photos_of(folder)
        if len(files) < GALLERY + REFERENCE:
            raise CaltechError(f"{folder}: fewer than {GALLERY + REFERENCE} photos")
        chosen = [(reference, f) for f in files[GALLERY:GALLERY + REFERENCE]]
        if folder.name not in NOT_IN_GALLERY:
            chosen = [(gallery, f) for f in files[:GALLERY]] + chosen
        for target, source in chosen:
            name = f"caltech-{len(rows[target]) + 1:04d}{source.suffix.lower()}"
            if not (target / name).exists():
                shutil.copyfile(source, target / name)
            rows[target].append([name, folder.name, source.name])
            if target == gallery:
                names.setdefault(folder.name, []).append(name)
    for target, listed in rows.items():
        with open(target / "MANIFEST.tsv", "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f, delimiter="\t", lineterminator="\n")
            writer.writerow(["file", "category", "Caltech 101 file"])
            writer.writerows(listed)
    return names


def flickr_showing(words: tuple[str, ...], captions: list[str], photos: list[str], per_photo: int) -> list[str]:
    """The photos with a caption that says one of `words` (a word or words in a row)."""
    texts = [" " + " ".join(re.findall(r"[a-z]+", c.lower())) + " " for c in captions]
    return sorted({photos[i // per_photo] for i, t in enumerate(texts) if any(f" {w} " in t for w in words)})


def query_rows(gallery_names: dict[str, list[str]], captions: list[str], photos: list[str],
               per_photo: int) -> list[tuple[str, list[str], str]]:
    """(query, right photos, kind) of each category, as "a pizza" (object) and "a photo of a pizza" (photo-of)."""
    rows = []
    for query, (classes, words) in CATEGORIES.items():
        right = [n for c in classes for n in gallery_names[c]] + flickr_showing(words, captions, photos, per_photo)
        rows += [(query, right, "object"), (f"a photo of {query}", right, "photo-of")]
    return rows


def dev_also(query: str, gallery_names: dict[str, list[str]]) -> list[str]:
    """The gallery photos that answer an object dev set query too."""
    return [n for c in DEV_QUERIES_ALSO.get(query, ()) for n in gallery_names[c]]
