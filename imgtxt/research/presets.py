"""Training presets: the 2019 FNE paper's Table 1 (Vilalta et al., Studying the Impact of the Full-Network Embedding
on Multimodal Pipelines; every column, per dataset, and the one-layer "-bl" rows), the setting of A. I. Baqapuri's
2016 thesis, Deep Learning applied to Image and Text matching (THESIS), and the Recurrent Capsule Network paper's
(RCN), as TrainConfig objects that the CLI may override field by field."""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace


@dataclass
class Phase:
    loss: str           # "sum" or "max" of hinges over the batch, or "single" (one random negative, thesis)
    lr: float


@dataclass
class TrainConfig:
    phases: list[Phase]
    similarity: str = "cosine"
    margin: float = 0.2
    word_dim: int = 1024
    embed_dim: int = 1024
    use_abs: bool = False
    image_dropout: float = 0.0
    weight_decay: float = 0.0       # L2 penalty on the image projection only
    batch_size: int = 128
    grad_clip: float = 2.0
    max_epochs: int = 200           # per phase
    patience: int = 10              # epochs without a better val rsum before a phase ends
    captions_per_image: str = "one" # "one": one random caption per image per epoch (paper); "all": five
    lr_decay_epochs: int = 0        # divide lr by 10 after this many epochs of a phase (0 = never)
    seed: int = 0
    negatives: str = "both"         # "single" loss: swap the caption (i2t), the image (t2i), or both
    text_lr: float = 0.0            # lr of a pretrained text encoder's trained layers (0 = the phase's lr)
    average_best: int = 1           # at the end, average the weights of the best K epochs (kept if better)
    optimizer: str = "adam"         # "adam" (FNE, RCN) or "sgd" (thesis: plain SGD, no momentum, no weight decay)
    linear_decay_epochs: int = 0    # lr falls linearly to 1% of the phase's lr over this many epochs (thesis: 100)
    image_hidden: int = 0           # image side: a ReLU hidden layer of this size before the map (thesis: 1,000)
    image_bias: bool = False        # image side: an affine map (RCN, thesis) instead of a linear one (FNE)


    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        d = dict(d)
        d["phases"] = [Phase(**p) for p in d["phases"]]
        return cls(**d)


# The 2019 FNE paper's Table 1, every column: loss, similarity, margin, abs, learning rate(s), word embedding size,
# and the joint-space size per dataset. The "-bl" rows are the one-layer (FC7) baselines' own settings.
# Sizes are the paper's; on a CPU they are slow, so the CLI lets --embed-dim/--word-dim override them
# (and README says which were used for each number).
_TABLE1 = {
    #          phases (loss, lr)                       similarity margin abs   word  embed f8k/f30k/coco
    "SH":     ([("sum", 2e-4)],                          "cosine", 0.2, False, 1024, (1536, 1536, 1536)),
    "SH-BL":  ([("sum", 2e-4)],                          "cosine", 0.2, False, 1000, (2048, 2048, 2048)),
    "MH":     ([("max", 2e-4)],                          "cosine", 0.2, False, 1024, (1024, 1536, 2048)),
    "MH-BL":  ([("max", 2e-4)],                          "cosine", 0.2, False, 300, (1024, 1024, 1024)),
    "SOE":    ([("sum", 1e-3)],                          "order", 0.05, True, 1024, (1024, 1024, 1536)),
    "SOE-BL": ([("sum", 1e-3)],                          "order", 0.05, True, 300, (1024, 1024, 1024)),
    "MOE":    ([("max", 1e-3)],                          "order", 0.05, True, 1536, (1536, 1536, 2048)),
    # As printed: MOE-bl has margin 0.2, lr 2e-4 and no absolute value although it uses order similarity.
    "MOE-BL": ([("max", 2e-4)],                          "order", 0.2, False, 300, (1024, 1024, 1024)),
    "PH":     ([("sum", 2e-4), ("max", 2e-4)],           "cosine", 0.2, False, 1024, (1536, 1536, 1536)),
    "POE":    ([("sum", 1e-3), ("max", 1e-4)],           "order", 0.05, True, 1024, (1024, 1024, 2048)),
}
_DATASET_COLUMN = {"flickr8k": 0, "flickr30k": 1, "coco": 2}
PRESET_NAMES = tuple(_TABLE1)


def _table1(name: str, dataset: str) -> TrainConfig:
    phases, similarity, margin, use_abs, word_dim, embed = _TABLE1[name]
    cfg = TrainConfig([Phase(loss, lr) for loss, lr in phases], similarity, margin, word_dim=word_dim,
                      embed_dim=embed[_DATASET_COLUMN[dataset]], use_abs=use_abs)
    if name == "SH-BL" and dataset == "coco":        # footnote a: word embedding 2000, lr 0.00025 on MSCOCO
        cfg = replace(cfg, word_dim=2000, phases=[Phase("sum", 2.5e-4)])
    if name == "MH" and dataset in ("flickr8k", "flickr30k"):
        cfg = replace(cfg, max_epochs=400)           # section 4.3.1: MH kept improving after 200 epochs
    return cfg


PRESETS: dict[str, TrainConfig] = {name: _table1(name, "flickr8k") for name in _TABLE1}

# The 2016 thesis (Baqapuri, EPFL; Table 6.1, sections 5.1, 6.3, "our model: BoW"): one random negative per pair, margin 0.15,
# SGD without momentum or weight decay at lr 0.001 falling linearly to 1% over 100 epochs, all five captions per
# epoch, a 1,000-unit ReLU hidden layer on the image side, joint space 1,000. Negatives: the thesis trained one model
# per direction (I2T negatives for its annotation numbers, T2I for its search numbers), never both at once; i2t is
# the preset's, `negatives="t2i"` the search model. No gradient clipping (the thesis states none).
# The RCN paper (section IV): Adam 2e-4, mini-batches of 16, the VSE++ max-of-hinges loss with margin 0.2,
# word vectors 300, joint space 1,024, an affine map from the image features; no gradient clipping (the paper states
# none; the FNE presets clip at 2, as the 2019 FNE paper does in its GRUs).
OTHER_PRESETS = {
    "THESIS": TrainConfig([Phase("single", 1e-3)], "cosine", 0.15, word_dim=300, embed_dim=1000, optimizer="sgd",
                          linear_decay_epochs=100, captions_per_image="all", negatives="i2t", image_hidden=1000,
                          image_bias=True, grad_clip=0.0),
    "RCN": TrainConfig([Phase("max", 2e-4)], "cosine", 0.2, word_dim=300, embed_dim=1024, batch_size=16,
                       image_bias=True, grad_clip=0.0),
}
# Today's variants, kept under names: THESIS-ADAM is the thesis loss as imgtxt first ran it (Adam, linear image
# map, one caption per image, both negatives); RCN-B128 the RCN runs' batch and linear map.
OTHER_PRESETS["THESIS-ADAM"] = TrainConfig([Phase("single", 1e-3)], "cosine", 0.15, word_dim=300, embed_dim=1000)
OTHER_PRESETS["RCN-B128"] = replace(OTHER_PRESETS["RCN"], batch_size=128, image_bias=False)


def preset(name: str, dataset: str = "flickr8k", **overrides) -> TrainConfig:
    """The paper's settings for a Table 1 column on a dataset; overrides that are None keep the paper's."""
    name = name.upper()
    if name in OTHER_PRESETS:
        # A fresh copy of the phases too: a caller changing cfg.phases[0].lr must not change the preset.
        base = OTHER_PRESETS[name]
        base = replace(base, phases=[Phase(p.loss, p.lr) for p in base.phases])
        return replace(base, **{k: v for k, v in overrides.items() if v is not None})
    if name not in _TABLE1:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(_TABLE1)}, {', '.join(OTHER_PRESETS)}")
    if dataset not in _DATASET_COLUMN:
        raise ValueError(f"no Table 1 column for dataset {dataset!r}; known: {', '.join(_DATASET_COLUMN)}")
    return replace(_table1(name, dataset), **{k: v for k, v in overrides.items() if v is not None})


def with_learning_rates(cfg: TrainConfig, lr: float | None = None, phase2_lr: float | None = None) -> TrainConfig:
    """A copy of cfg with every phase at `lr` and/or the curriculum's max-loss phase at `phase2_lr` (new Phase
    objects: the presets' own must not change)."""
    phases = [Phase(p.loss, lr if lr is not None else p.lr) for p in cfg.phases]
    if phase2_lr is not None:
        if len(phases) < 2:
            raise ValueError("--phase2-lr needs a curriculum preset (PH, POE)")
        phases[1].lr = phase2_lr
    return replace(cfg, phases=phases)
