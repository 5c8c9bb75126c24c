"""The seed systems' maths against values worked by hand, one test per way it could silently be wrong: each calls
the library (never a copy of its formula) and fails when the named error is planted in it."""
import math

import numpy as np
import pytest
import torch

from imgtxt.model.text_encoders import rcn, sse
from imgtxt.research import amecon
from imgtxt.research.presets import Phase, TrainConfig, preset
from imgtxt.research.text_modules import rcn as rcn_torch
from imgtxt.research.train import phase_lr, training_loss

# ------------------------------------------------------------------------------------------------ RCN


def test_mask_update_uses_alpha_ij_not_alpha_ji():
    # alpha (B=1): row i holds alpha_i1, alpha_i2 = [[1/2, 1/2], [1/3, 2/3]] (not symmetric, so a transposed alpha
    # gives other masks). m_1 = .5 (.2, .4) + .5 (.8, .1) = (.5, .25); m_2 = 1/3 (.2, .4) + 2/3 (.8, .1) = (.6, .2)
    alpha = np.array([[[0.5, 0.5], [1 / 3, 2 / 3]]])
    proposals = np.array([[[0.2, 0.4]], [[0.8, 0.1]]])      # (C, B, V)
    expected = [[0.5, 0.25], [0.6, 0.2]]
    np.testing.assert_allclose(rcn.update_masks(alpha, proposals)[:, 0], expected)
    got = rcn_torch.update_masks(torch.tensor(alpha), torch.tensor(proposals))
    np.testing.assert_allclose(got[:, 0].numpy(), expected)


def test_mask_update_is_what_the_forward_pass_applies(monkeypatch):
    """The forward passes route through update_masks (so the test above covers them): r recursions, r updates."""
    calls = {"numpy": 0, "torch": 0}
    np_update, torch_update = rcn.update_masks, rcn_torch.update_masks
    monkeypatch.setattr(rcn, "update_masks", lambda a, p: (calls.__setitem__("numpy", calls["numpy"] + 1),
                                                           np_update(a, p))[1])
    monkeypatch.setattr(rcn_torch, "update_masks", lambda a, p: (calls.__setitem__("torch", calls["torch"] + 1),
                                                                 torch_update(a, p))[1])
    torch.manual_seed(0)
    model = rcn_torch.RCNEncoder(20, 4, 5, capsules=2, recursions=3)
    model(torch.tensor([[3, 4, 5]]), torch.tensor([3]))
    rcn.encode([[3, 4, 5]], {k: v.detach().numpy() for k, v in model.export_tensors().items()}, 3)
    assert calls == {"numpy": 3, "torch": 3}


@pytest.mark.parametrize("recursions", [0, 1, 4])
def test_r_recursions_run_the_embedding_grus_r_plus_1_times_and_the_mask_grus_r_times(monkeypatch, recursions):
    # The paper keeps v(5) with r = 4: masks m(0) = 1 .. m(4), embeddings v(1) .. v(5).
    seen = {"numpy": [], "torch": []}
    np_scan, torch_scan = rcn.gru_scan, rcn_torch.gru_scan
    monkeypatch.setattr(rcn, "gru_scan", lambda *a: (seen["numpy"].append(a[-1]), np_scan(*a))[1])
    monkeypatch.setattr(rcn_torch, "gru_scan", lambda *a: (seen["torch"].append(a[-1]), torch_scan(*a))[1])
    torch.manual_seed(0)
    model = rcn_torch.RCNEncoder(20, 4, 5, capsules=2, recursions=recursions)
    model(torch.tensor([[3, 4, 5]]), torch.tensor([3]))
    rcn.encode([[3, 4, 5]], {k: v.detach().numpy() for k, v in model.export_tensors().items()}, recursions)
    for side in ("numpy", "torch"):
        assert seen[side].count("tanh") == recursions + 1, side
        assert seen[side].count("sigmoid") == recursions, side


def test_mask_gru_candidate_is_a_sigmoid():
    """One capsule, one recursion; the mask GRU has zero weights, its update gate shut (z = sigmoid(-30)) and its
    candidate's pre-activation -2: the mask is sigmoid(-2) = 0.1192 in every coordinate (tanh would give -0.964),
    alpha = 1 (one capsule), so the sentence vector is the embedding GRU's on 0.1192 x, L2-normalised."""
    torch.manual_seed(0)
    model = rcn_torch.RCNEncoder(10, 3, 4, capsules=1, recursions=1)
    with torch.no_grad():
        for p in model.mask_gru.values():
            p.zero_()
        model.mask_gru["bias_ih"][0, 3:6] = -30.0       # z
        model.mask_gru["bias_ih"][0, 6:9] = -2.0        # candidate
    gru = torch.nn.GRU(3, 4, batch_first=True)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(gru, f"{name}_l0").copy_(model.emb_gru[name][0])
    tokens = torch.tensor([[2, 5, 7]])
    mask = 1.0 / (1.0 + math.exp(2.0))
    with torch.no_grad():
        _, h = gru(mask * model.embed(tokens))
        expected = torch.nn.functional.normalize(h[-1], dim=1)
        got = model(tokens, torch.tensor([3]))
    np.testing.assert_allclose(got.numpy(), expected.numpy(), atol=1e-5)
    weights = {k: v.detach().numpy() for k, v in model.export_tensors().items()}
    np.testing.assert_allclose(rcn.encode([[2, 5, 7]], weights, 1), expected.numpy(), atol=1e-5)


def test_regulariser_is_added_to_the_training_loss():
    scores = torch.tensor([[0.9, 0.5, 0.8], [0.3, 0.6, 0.7], [0.1, 0.2, 0.4]])
    cfg = TrainConfig([Phase("max", 1e-3)], margin=0.2)
    # max of hinges by hand (tests/test_losses.py): rows .1 + .3 + 0, columns 0 + .1 + .6 = 1.1
    assert training_loss(scores, "max", cfg).item() == pytest.approx(1.1)
    assert training_loss(scores, "max", cfg, penalty=torch.tensor(5.0)).item() == pytest.approx(6.1)


def test_single_loss_is_the_thesis_one_negative_loss():
    # B = 2, each pair's one negative is the other (tests/test_thesis_models.py works these by hand)
    scores = torch.tensor([[0.5, 0.6], [0.2, 0.4]])
    for negatives, expected in (("i2t", 0.25), ("t2i", 0.35), ("both", 0.60)):
        cfg = TrainConfig([Phase("single", 1e-3)], margin=0.15, negatives=negatives)
        assert training_loss(scores, "single", cfg).item() == pytest.approx(expected)
        assert training_loss(scores, "single", cfg, penalty=torch.tensor(1.0)).item() == pytest.approx(1 + expected)


def test_rcn_penalty_is_lambda_times_eq14_of_the_last_masks():
    torch.manual_seed(0)
    a = rcn_torch.RCNEncoder(20, 4, 5, capsules=3, recursions=2, reg_lambda=0.05)
    b = rcn_torch.RCNEncoder(20, 4, 5, capsules=3, recursions=2, reg_lambda=0.1)
    b.load_state_dict(a.state_dict())
    tokens, lengths = torch.tensor([[3, 4, 5], [6, 7, 0]]), torch.tensor([3, 2])
    a(tokens, lengths)
    b(tokens, lengths)
    weights = {k: v.detach().numpy() for k, v in a.export_tensors().items()}
    _, masks = rcn.rcn_forward(tokens.numpy(), lengths.numpy(), weights, 2)
    assert a.penalty.item() == pytest.approx(0.05 * rcn.mask_variance_penalty(masks).sum(), rel=1e-4)
    assert b.penalty.item() == pytest.approx(2 * a.penalty.item(), rel=1e-5)


def test_training_adds_the_rcn_penalty(tmp_path, monkeypatch):
    from test_model import feature_config, synthetic

    from imgtxt.model.fne import FeatureStats
    from imgtxt.model.text_encoders import prepare
    from imgtxt.research import train as train_module
    from imgtxt.research.train import TrainData

    penalties = []
    real = train_module.training_loss
    monkeypatch.setattr(train_module, "training_loss",
                        lambda s, kind, cfg, also, penalty: (penalties.append(penalty), real(s, kind, cfg, also,
                                                                                            penalty))[1])
    feats, caps = synthetic(0)
    setup = prepare("rcn", caps, {"min_count": 1, "word_dim": 4, "capsules": 2, "recursions": 1, "reg_lambda": 0.05})
    tokens = [setup.tokenize(c) for c in caps]
    data = TrainData(feats, tokens, feats, tokens, None, caps, feature_config(48),
                     FeatureStats(np.zeros(48, np.float32), np.ones(48, np.float32)), text_setup=setup)
    cfg = TrainConfig([Phase("max", 1e-3)], embed_dim=8, batch_size=64, max_epochs=1, patience=9)
    train_module.train(tmp_path / "run", data, cfg)
    assert penalties and all(p is not None and p.item() > 0 for p in penalties)


# ------------------------------------------------------------------------------------------------ thesis SSE


def _sse_weights(top: bool) -> dict:
    # vocabulary of 3 (0 pad, 1 unknown, 2 a word with vector (1)); window 1; kernels 2 with weights 2 and 0.5
    w = {"sse.word_embedding": np.array([[0.0], [0.0], [1.0]], np.float32),
         "sse.conv.weight": np.array([[[2.0]], [[0.5]]], np.float32), "sse.conv.bias": np.zeros(2, np.float32)}
    if top:
        w.update({"sse.top.weight": np.eye(2, dtype=np.float32), "sse.top.bias": np.zeros(2, np.float32)})
    return w


@pytest.mark.parametrize("top", [True, False])
def test_sse_applies_tanh_to_the_convolution(top):
    # conv = tanh(2, .5) = (.9640, .4621); averaged over one position; ReLU + identity top; L2 norm:
    # (.9640, .4621) / 1.0690 = (.9018, .4323). Without the tanh: (2, .5) / 2.0616 = (.9701, .2425).
    expected = np.array([[0.9018, 0.4323]])
    np.testing.assert_allclose(sse.sse_forward(np.array([[2]]), np.array([1]), _sse_weights(top)), expected,
                               atol=1e-4)
    from imgtxt.research.text_modules.sse import Encoder

    enc = Encoder({"vocab_size": 3, "word_dim": 1, "window": 1, "kernels": 2, "top": top}, 2)
    enc.import_tensors(_sse_weights(top))
    with torch.no_grad():
        np.testing.assert_allclose(enc(torch.tensor([[2]]), torch.tensor([1])).numpy(), expected, atol=1e-4)


def test_sse_top_is_relu_then_linear():
    # negative averaged kernels are cut by the ReLU before the top layer: kernel weights (-2, .5) -> (-.964, .462)
    # -> ReLU (0, .462) -> top [[1, 1], [0, 1]] -> (.462, .462) -> L2 (.7071, .7071)
    w = _sse_weights(True)
    w["sse.conv.weight"] = np.array([[[-2.0]], [[0.5]]], np.float32)
    w["sse.top.weight"] = np.array([[1.0, 1.0], [0.0, 1.0]], np.float32)
    np.testing.assert_allclose(sse.sse_forward(np.array([[2]]), np.array([1]), w), [[0.7071, 0.7071]], atol=1e-4)


# ------------------------------------------------------------------------------------------------ curriculum


def _bow_data():
    from test_model import feature_config, synthetic

    from imgtxt.model.fne import FeatureStats
    from imgtxt.model.text_encoders import prepare
    from imgtxt.research.train import TrainData

    feats, caps = synthetic(0)
    setup = prepare("bow", caps, {"ngrams": "uni", "weighting": "binary", "hidden": 0})
    tokens = [setup.tokenize(c) for c in caps]
    return TrainData(feats, tokens, feats, tokens, None, caps, feature_config(48),
                     FeatureStats(np.zeros(48, np.float32), np.ones(48, np.float32)), text_setup=setup)


def test_curriculum_phase_2_starts_from_phase_1_best_and_uses_the_max_loss(tmp_path, monkeypatch):
    import json

    from imgtxt.model.tensor_file import LazyTensors
    from imgtxt.research import train as train_module

    kinds, loads = [], []
    real_loss, real_load = train_module.training_loss, train_module.load_weights

    def spy_loss(scores, kind, cfg, also, penalty):
        kinds.append(kind)
        return real_loss(scores, kind, cfg, also, penalty)

    def spy_load(model, folder):
        real_load(model, folder)
        record = json.loads((folder / "model.json").read_text())["metrics"]
        saved = LazyTensors(folder / "model.safetensors")
        now = {k: v.detach().numpy() for k, v in model.export_tensors().items()}
        loads.append((record["phase"], record["rsum"], all(np.allclose(np.asarray(saved[k], np.float32), now[k])
                                                           for k in now)))

    monkeypatch.setattr(train_module, "training_loss", spy_loss)
    monkeypatch.setattr(train_module, "load_weights", spy_load)
    cfg = TrainConfig([Phase("sum", 3e-3), Phase("max", 3e-3)], embed_dim=16, batch_size=64, max_epochs=2,
                      patience=9)
    train_module.train(tmp_path / "run", _bow_data(), cfg)
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    best_phase1 = max(r["rsum"] for r in log if r["phase"] == 1)
    assert len(loads) == 1 and loads[0] == (1, pytest.approx(best_phase1), True)
    per_epoch = len(kinds) // 4                                   # 64 images, batch 64 -> 1 batch per epoch
    assert kinds == ["sum"] * (2 * per_epoch) + ["max"] * (2 * per_epoch)




def test_curriculum_phase_2_starts_with_a_fresh_optimizer(tmp_path, monkeypatch):
    """The paper does not say whether phase 2 keeps the optimiser's state; imgtxt starts it afresh: Adam's moments
    of phase 1 belong to its last epoch's weights and to the sum loss, phase 2 starts from the best epoch's
    weights with the max loss. So phase 2's first step finds an Adam with no state, at phase 2's lr."""
    from imgtxt.research import train as train_module

    created, steps = [], []

    class SpyAdam(torch.optim.Adam):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            created.append(self)

        def step(self, closure=None):
            steps.append((created.index(self), len(self.state), self.param_groups[0]["lr"]))
            return super().step(closure)

    monkeypatch.setattr(torch.optim, "Adam", SpyAdam)
    cfg = TrainConfig([Phase("sum", 3e-3), Phase("max", 1e-3)], embed_dim=16, batch_size=64, max_epochs=2,
                      patience=9)
    train_module.train(tmp_path / "run", _bow_data(), cfg)
    assert len(created) == 2                                         # one per phase
    assert [s[0] for s in steps] == [0, 0, 1, 1]                     # 1 batch an epoch, 2 epochs a phase
    assert steps[0][1] == 0 and steps[1][1] > 0                      # phase 1's Adam fills its state...
    assert steps[2][1:] == (0, 1e-3)                                 # ...phase 2's starts empty, at its own lr



def test_epoch_pairs_one_caption_per_image_or_every_caption_once():
    from imgtxt.research.train import epoch_pairs
    rng = np.random.default_rng(0)
    one = epoch_pairs(rng, 50, 5, "one")
    assert sorted(one[:, 0]) == list(range(50)) and one[:, 0].tolist() != list(range(50))   # each image, shuffled
    assert (one[:, 1] // 5 == one[:, 0]).all()                                              # with its own caption
    drawn = np.concatenate([epoch_pairs(rng, 50, 5, "one")[:, 1] % 5 for _ in range(20)])
    assert set(drawn.tolist()) == {0, 1, 2, 3, 4}                                           # any of the five
    every = epoch_pairs(rng, 50, 5, "all")
    assert sorted(every[:, 1]) == list(range(250)) and every[:, 1].tolist() != list(range(250))
    assert (every[:, 1] // 5 == every[:, 0]).all()


def test_each_phase_stops_after_its_patience_and_trains_every_pair(tmp_path, monkeypatch, capsys):
    import json

    from imgtxt.research import train as train_module

    batches, losses = [], []
    real_loss, real_validate = train_module.training_loss, train_module.validate

    def spy_loss(scores, kind, cfg, also, penalty):
        loss = real_loss(scores, kind, cfg, also, penalty)
        batches.append(scores.shape[0])
        losses.append(loss.item())
        assert also is None                             # one caption per image: no two rows share an image
        return loss

    monkeypatch.setattr(train_module, "training_loss", spy_loss)
    # validation never improves after the first epoch
    monkeypatch.setattr(train_module, "validate", lambda *a: {**real_validate(*a), "rsum": 50.0})
    cfg = TrainConfig([Phase("sum", 1e-3), Phase("max", 1e-3)], embed_dim=16, batch_size=62, max_epochs=20,
                      patience=2)
    train_module.train(tmp_path / "run", _bow_data(), cfg)
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    # phase 1: the best epoch, then 2 without a gain; phase 2 starts its patience afresh: 2 epochs
    assert [r["phase"] for r in log] == [1, 1, 1, 2, 2]
    assert batches == [62, 2] * 5                       # 64 images: the short batch of 2 is trained too
    for i, record in enumerate(log):
        assert record["train_loss"] == pytest.approx(losses[2 * i] + losses[2 * i + 1])
        assert record["loss_kind"] == ("sum" if record["phase"] == 1 else "max") and record["lr"] == 1e-3
        assert record["val"]["rsum"] == 50.0 and 0 <= record["train_seconds"] < 600
    assert "phase 2: max loss from the best phase-1 model" in capsys.readouterr().err.splitlines()


def test_with_every_caption_a_batch_masks_captions_of_the_same_image(tmp_path, monkeypatch):
    from imgtxt.research import train as train_module

    masks = []
    real_loss = train_module.training_loss

    def spy_loss(scores, kind, cfg, also, penalty):
        masks.append(also)
        return real_loss(scores, kind, cfg, also, penalty)

    monkeypatch.setattr(train_module, "training_loss", spy_loss)
    cfg = TrainConfig([Phase("sum", 1e-3)], embed_dim=16, batch_size=62, max_epochs=1, patience=9,
                      captions_per_image="all")
    train_module.train(tmp_path / "run", _bow_data(), cfg)
    assert len(masks) == 6                              # 320 captions in batches of 62 (the last 10)
    for m in masks:
        assert m.dtype == torch.bool and m.diagonal().all() and (m == m.t()).all()
        assert m.sum(dim=1).max() <= 5                  # an image has five captions
    # 62 of 320 captions of 64 images: same-image pairs are all but certain in a batch
    assert sum(int(m.sum() - m.shape[0]) for m in masks) > 0


def test_gradients_are_clipped_only_when_asked(tmp_path, monkeypatch):
    from imgtxt.research import train as train_module

    calls = []
    real_clip = torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, norm: calls.append(norm) or
                        real_clip(params, norm))
    for clip, expected in ((0.5, [0.5]), (0.0, [])):     # 64 images, batch 64: one step
        calls.clear()
        cfg = TrainConfig([Phase("sum", 1e-3)], embed_dim=16, batch_size=64, max_epochs=1, grad_clip=clip)
        train_module.train(tmp_path / f"run-{clip}", _bow_data(), cfg)
        assert calls == expected


def test_average_best_keeps_the_best_epochs_and_averages_them(tmp_path, monkeypatch):
    import json

    from imgtxt.research import train as train_module

    real_validate = train_module.validate
    for keep in (1, 2):
        rsums = iter([10.0, 30.0, 20.0, 40.0])            # epochs 1-3, then the average of the kept epochs
        monkeypatch.setattr(train_module, "validate", lambda *a: {**real_validate(*a), "rsum": next(rsums)})
        cfg = TrainConfig([Phase("sum", 1e-3)], embed_dim=16, batch_size=64, max_epochs=3, patience=9,
                          average_best=keep)
        run = tmp_path / f"run-{keep}"
        best = train_module.train(run, _bow_data(), cfg)
        if keep == 1:                                      # the default: no snapshots, no average
            assert not (run / "snapshots").exists() and best["epoch"] == 2 and best["rsum"] == 30.0
        else:
            assert sorted(p.name for p in (run / "snapshots").iterdir()) == ["p1-e002.pt", "p1-e003.pt"]
            averaged = json.loads((run / "averaged.json").read_text())
            assert averaged["averaged_epochs"] == [2, 3] and best["rsum"] == 40.0


def test_a_run_continued_past_its_end_averages_its_new_best_epochs(tmp_path, monkeypatch):
    import dataclasses
    import json

    from imgtxt.research import train as train_module

    real_validate = train_module.validate
    run = tmp_path / "run"
    # three epochs and their average, then two more epochs (the best two now 4 and 5) and their average
    rsums = iter([10.0, 30.0, 20.0, 35.0, 40.0, 50.0, 60.0])
    monkeypatch.setattr(train_module, "validate", lambda *a: {**real_validate(*a), "rsum": next(rsums)})
    cfg = TrainConfig([Phase("sum", 1e-3)], embed_dim=16, batch_size=64, max_epochs=3, patience=9, average_best=2)
    assert train_module.train(run, _bow_data(), cfg)["rsum"] == 35.0
    assert json.loads((run / "averaged.json").read_text())["averaged_epochs"] == [2, 3]
    best = train_module.train(run, _bow_data(), dataclasses.replace(cfg, max_epochs=5))
    assert json.loads((run / "averaged.json").read_text())["averaged_epochs"] == [4, 5]
    assert best["rsum"] == 60.0 and best["averaged_epochs"] == [4, 5]


def test_a_pretrained_text_layer_trains_at_text_lr(tmp_path):
    import dataclasses

    from imgtxt.research import train as train_module
    from imgtxt.research.text_modules import torch_encoder

    data = _bow_data()
    # the BoW's first layer handed over as pretrained (as MiniLM's layers are): its own group, at text_lr
    first = torch_encoder(data.text_setup.config, 16).export_tensors()["bow.in.weight"].detach().numpy()
    setup = dataclasses.replace(data.text_setup, init_tensors={**data.text_setup.init_tensors, "bow.in.weight": first})
    cfg = TrainConfig([Phase("sum", 1e-3)], embed_dim=16, batch_size=64, max_epochs=2, patience=9,
                      lr_decay_epochs=1, text_lr=1e-5)
    train_module.train(tmp_path / "run", dataclasses.replace(data, text_setup=setup), cfg)
    groups = torch.load(tmp_path / "run" / "state.pt", weights_only=False)["optimizer"]["param_groups"]
    # epoch 2 is after the step decay: the phase's lr 1e-4, the pretrained layer's 1e-5 / 10
    assert [g["lr"] for g in groups if g.get("pretrained")] == [pytest.approx(1e-6)]
    assert [g["lr"] for g in groups if not g.get("pretrained")] == [pytest.approx(1e-4)] * 2

# ------------------------------------------------------------------------------------------------ AMECON


def test_amecon_loss_is_sigmoid_cross_entropy_summed_over_concepts_averaged_over_samples():
    # logits (0, 2) against codes (1, 0): log(1 + e^0) + log(1 + e^2) = 0.6931 + 2.1269 = 2.8200 (eq. 6 sums the
    # C concepts; the mean over them would be 1.4100; squared error of the sigmoid 0.5129)
    loss = amecon.image_mlp_loss(torch.tensor([[0.0, 2.0]]), torch.tensor([[1.0, 0.0]]))
    assert loss.item() == pytest.approx(2.8200, abs=1e-4)
    # a second sample, logits (0, 0) against codes (0, 0): 2 x 0.6931; the mean over the 2 samples is 2.1031
    loss = amecon.image_mlp_loss(torch.tensor([[0.0, 2.0], [0.0, 0.0]]), torch.tensor([[1.0, 0.0], [0.0, 0.0]]))
    assert loss.item() == pytest.approx((2.8200 + 1.3863) / 2, abs=1e-4)


def test_amecon_training_minimises_that_loss(monkeypatch):
    used = []
    real = amecon.image_mlp_loss
    monkeypatch.setattr(amecon, "image_mlp_loss", lambda lg, y: (used.append(1), real(lg, y))[1])
    feats = np.random.default_rng(0).random((8, 6)).astype(np.float32)
    labels = (np.random.default_rng(1).random((16, 4)) < 0.3).astype(np.float32)
    amecon.train_image_mlp(feats, labels, np.arange(16) // 2, hidden=(5,), epochs=1, batch=8, log=lambda m: None)
    assert len(used) == 2


def test_amecon_sgd_recipe_is_the_papers():
    assert amecon.OPTIMIZERS["sgd"] == {"lr": 1e-4, "momentum": 0.9, "weight_decay": 5e-4}
    assert amecon.OPTIMIZERS["adam"] == {"lr": 1e-3}      # the variant's (docs/seed-systems.md)


def test_region_extractor_max_pools_full_image_and_four_corners():
    from imgtxt.research.amecon_train import RegionExtractor

    class TopLeftPixel:      # a fake CNN: the top-left pixel of each (resized) crop
        dim, resize_size, layer_names, layer_dims, baseline_slice, backbone = 3, 9, [], [], (0, 3), None

        def __call__(self, images):
            self.shapes = images.shape
            return images[:, 0, 0, :].astype(np.float32)

    # 9 x 9 image of 3 x 3 blocks: block (0,0) 10, (0,1) 20, (1,0) 30, (1,1) 40, the rest 0. Regions at 2/3 scale
    # start at (0,0) full, (0,0), (0,3), (3,0), (3,3): their top-left pixels 10, 10, 20, 30, 40 -> max 40.
    image = np.zeros((9, 9, 3), np.uint8)
    for (r, c), v in {(0, 0): 10, (0, 1): 20, (1, 0): 30, (1, 1): 40}.items():
        image[3 * r:3 * r + 3, 3 * c:3 * c + 3] = v
    fake = TopLeftPixel()
    out = RegionExtractor(fake)(np.stack([image, image[::-1, ::-1]]))
    assert fake.shapes == (10, 9, 9, 3)
    assert out[0].tolist() == [40, 40, 40]
    image[3:6, 3:6] = 5
    assert RegionExtractor(fake)(image[None])[0].tolist() == [30, 30, 30]


# ------------------------------------------------------------------------------------------------ presets


def test_thesis_preset_is_the_thesis_recipe():
    cfg = preset("THESIS")
    assert (cfg.phases[0].loss, cfg.phases[0].lr, cfg.margin, cfg.embed_dim) == ("single", 1e-3, 0.15, 1000)
    assert (cfg.optimizer, cfg.linear_decay_epochs, cfg.captions_per_image) == ("sgd", 100, "all")
    assert (cfg.image_hidden, cfg.image_bias, cfg.negatives, cfg.grad_clip) == (1000, True, "i2t", 0.0)


def test_rcn_preset_is_the_papers():
    cfg = preset("RCN")
    assert (cfg.batch_size, cfg.image_bias, cfg.phases[0].loss, cfg.phases[0].lr) == (16, True, "max", 2e-4)
    assert (cfg.margin, cfg.word_dim, cfg.embed_dim, cfg.optimizer) == (0.2, 300, 1024, "adam")
    assert cfg.grad_clip == 0.0 and preset("RCN-B128").grad_clip == 0.0 and preset("MH").grad_clip == 2.0


def test_thesis_lr_falls_linearly_to_one_percent_over_100_epochs():
    cfg = preset("THESIS")
    assert phase_lr(cfg, 1e-3, 0) == pytest.approx(1e-3)
    assert phase_lr(cfg, 1e-3, 50) == pytest.approx(1e-3 * (1 - 0.99 * 0.5))
    assert phase_lr(cfg, 1e-3, 100) == pytest.approx(1e-5)
    assert phase_lr(cfg, 1e-3, 150) == pytest.approx(1e-5)
    assert phase_lr(preset("MH"), 2e-4, 150) == pytest.approx(2e-4)


def test_step_decay_divides_the_lr_by_ten_from_its_epoch():
    cfg = TrainConfig([Phase("max", 2e-4)], lr_decay_epochs=15)
    assert [phase_lr(cfg, 2e-4, e) for e in (0, 14, 15, 40)] == pytest.approx([2e-4, 2e-4, 2e-5, 2e-5])


def test_changing_a_returned_preset_leaves_the_preset_alone():
    cfg = preset("THESIS")
    cfg.phases[0].lr = 1e-2
    assert preset("THESIS").phases[0].lr == 1e-3


def test_region_features_are_computed_once_and_cached(tmp_path, monkeypatch):
    from PIL import Image

    from imgtxt.model.cnn_torch import FeatureSettings
    from imgtxt.research.amecon_train import region_features
    from imgtxt.research.datasets import Split

    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    paths = []
    for i, colour in enumerate([(200, 10, 10), (10, 200, 10), (10, 10, 200)]):
        image = np.zeros((30, 30, 3), np.uint8)
        image[:] = colour
        image[20:, 20:] = 255                          # a white corner, seen at full size by the bottom-right region
        paths.append(tmp_path / f"{i}.png")
        Image.fromarray(image).save(paths[-1])

    class Backbone:
        id = "fake@0"

    class ChannelMeans:           # a fake CNN: the mean of each channel; counts the images it sees
        dim, resize_size, layer_names, layer_dims, baseline_slice, backbone = 3, 30, ["x"], [3], (0, 3), Backbone()
        seen = 0

        def __call__(self, images):
            ChannelMeans.seen += len(images)
            return images.reshape(len(images), -1, 3).mean(axis=1).astype(np.float32)

    split = Split("flickr8k", "val", paths, ["a caption"] * 15)
    settings = FeatureSettings("efficientnet_lite0", "all", 1, "fp32")
    first, _ = region_features(split, settings, extractor=ChannelMeans())
    assert ChannelMeans.seen == 15                      # 3 images x 5 regions
    # the bottom-right region at 2/3 scale (rows and columns 10..29) is 1/4 white: its red mean for image 0 is
    # (3 * 200 + 255) / 4 = 213.75, more than the full image's (8 * 200 + 255) / 9 = 206.1: max-pooled -> 213.75
    assert first[0, 0] == pytest.approx(213.75, abs=1.0)
    again, _ = region_features(split, settings, extractor=ChannelMeans())
    assert ChannelMeans.seen == 15                      # read from the cache
    np.testing.assert_array_equal(np.asarray(first), np.asarray(again))
