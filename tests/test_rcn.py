"""Recurrent Capsule Network: routing worked by hand, the regulariser, numpy == torch, GRU special case."""
import numpy as np
import pytest
import torch

from imgtxt.model.text_encoders import rcn
from imgtxt.research.text_modules.rcn import RCNEncoder, mask_variance_penalty, route


def test_routing_by_hand():
    # 2 capsules, 1 sentence, 2-d embeddings: v1 = (1, 0), v2 = (1, 1)
    v = np.array([[[1.0, 0.0]], [[1.0, 1.0]]])          # (C=2, B=1, H=2)
    alpha, combined = rcn.route(v)
    # gram = [[1, 1], [1, 2]]; alpha row i = gram_i / sum(gram_i): [[1/2, 1/2], [1/3, 2/3]]
    np.testing.assert_allclose(alpha[0], [[0.5, 0.5], [1 / 3, 2 / 3]])
    # beta = gram / 5; v = sum_i (sum_j beta_ij) v_i = (2/5) v1 + (3/5) v2 = (1, 0.6)
    np.testing.assert_allclose(combined[0], [1.0, 0.6])
    t_alpha, t_combined = route(torch.tensor(v))
    np.testing.assert_allclose(t_alpha.numpy(), alpha)
    np.testing.assert_allclose(t_combined.numpy(), combined)


def test_mask_update_is_alpha_weighted_sum_of_proposals():
    alpha = np.array([[[0.5, 0.5], [1 / 3, 2 / 3]]])       # (B=1, C, C)
    proposals = np.array([[[0.2, 0.4]], [[0.8, 0.1]]])      # (C, B, V)
    masks = np.einsum("bij,jbv->ibv", alpha, proposals)
    np.testing.assert_allclose(masks[:, 0], [[0.5, 0.25], [0.6, 0.2]])


def test_regulariser_eq14_by_hand():
    # masks (C=2, B=1, V=2): m1 = (1, 0), m2 = (0, 1); mean = (.5, .5)
    # sum ||m_i - mean||^2 = .5 + .5 = 1; N_c ||mean||^2 = 2 * .5 = 1; min ||m_i|| = 1 -> V = 1 / (1 * 1) = 1
    m = np.array([[[1.0, 0.0]], [[0.0, 1.0]]])
    assert rcn.mask_variance_penalty(m)[0] == pytest.approx(1.0, rel=1e-5)
    assert mask_variance_penalty(torch.tensor(m))[0].item() == pytest.approx(1.0, rel=1e-5)
    # identical masks -> no spread -> a huge penalty; a zero mask -> huge too
    same = np.array([[[1.0, 1.0]], [[1.0, 1.0]]])
    assert rcn.mask_variance_penalty(same)[0] > 1e5
    zero = np.array([[[1.0, 0.0]], [[0.0, 0.0]]])
    assert rcn.mask_variance_penalty(zero)[0] > 1e5


def _weights(model):
    return {k: v.detach().numpy().astype(np.float32) for k, v in model.export_tensors().items()}


@pytest.mark.parametrize("capsules,recursions", [(1, 0), (3, 2)])
def test_numpy_equals_torch(capsules, recursions):
    torch.manual_seed(0)
    model = RCNEncoder(20, 6, 8, capsules=capsules, recursions=recursions, reg_lambda=0.05).eval()
    tokens = [[3, 4, 5], [7], list(range(2, 20)) + [5, 6], []]     # one longer than 16 words: cut
    ids, lengths = rcn.pad(tokens)
    with torch.no_grad():
        expected = model(torch.from_numpy(ids), torch.from_numpy(lengths)).numpy()
    got = rcn.encode(tokens, _weights(model), recursions)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert ids.shape[1] == 16


def test_one_capsule_no_recursion_is_a_plain_gru():
    torch.manual_seed(0)
    model = RCNEncoder(20, 6, 8, capsules=1, recursions=0)
    gru = torch.nn.GRU(6, 8, batch_first=True)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(gru, f"{name}_l0").copy_(model.emb_gru[name][0])
    tokens = torch.tensor([[3, 4, 5]])
    _, h = gru(model.embed(tokens))
    expected = torch.nn.functional.normalize(h[-1], dim=1)
    assert torch.allclose(model(tokens, torch.tensor([3])), expected, atol=1e-6)


def test_penalty_is_differentiable_and_scaled_by_lambda():
    torch.manual_seed(0)
    model = RCNEncoder(20, 6, 8, capsules=3, recursions=1, reg_lambda=0.05)
    model(torch.tensor([[3, 4, 5], [6, 7, 0]]), torch.tensor([3, 2]))
    assert model.penalty.item() > 0
    model.penalty.backward()
    assert model.mask_gru["weight_ih"].grad.abs().sum() > 0
    model0 = RCNEncoder(20, 6, 8, capsules=3, recursions=1, reg_lambda=0.0)
    model0(torch.tensor([[3, 4, 5]]), torch.tensor([3]))
    assert model0.penalty.item() == 0


def test_equal_size_gru():
    h = rcn.equal_size_gru_hidden(5000, 300, 1024, 4)
    assert 3 * h * 300 + 3 * h * h + 6 * h >= rcn.parameter_count(5000, 300, 1024, 4) - 5000 * 300
    assert h > 1024


def test_rcn_kind_trains_saves_and_loads_with_numpy_equal_to_torch(tmp_path):
    from test_model import feature_config, synthetic

    from imgtxt.model.fne import FeatureStats
    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.model.text_encoders import prepare
    from imgtxt.research.train import Phase, TrainConfig, TrainData, train

    feats, caps = synthetic(0)
    setup = prepare("rcn", caps, {"min_count": 1, "word_dim": 8, "capsules": 2, "recursions": 1,
                                  "reg_lambda": 0.05})
    tokens = [setup.tokenize(c) for c in caps]
    data = TrainData(feats, tokens, feats, tokens, None, caps, feature_config(48),
                     FeatureStats(np.zeros(48, np.float32), np.ones(48, np.float32)), text_setup=setup)
    cfg = TrainConfig([Phase("max", 3e-3)], embed_dim=16, batch_size=32, max_epochs=3, patience=9,
                      captions_per_image="all")
    best = train(tmp_path / "run", data, cfg)
    assert best["rsum"] > 60        # chance on 64 images is ~50
    model = TrainedModel.load(tmp_path / "run" / "best")
    assert model.config["text"]["kind"] == "rcn"
    from imgtxt.research.joint_model import JointConfig, JointModel, pad_batch
    joint = JointModel(JointConfig(**model.config["joint"])).eval()
    from imgtxt.research.checkpoints import load_weights as _load_weights
    _load_weights(joint, tmp_path / "run" / "best")
    texts = ["a red dog", "the blue cat runs .", "zebra"]
    with torch.no_grad():
        expected = joint.text(*pad_batch([setup.tokenize(t) for t in texts])).numpy()
    np.testing.assert_allclose(model.encode_text(texts), expected, atol=1e-5)
    assert model.check_query("zebra") and model.check_query("a red dog") is None


def test_parameter_count_is_the_encoders_and_the_equal_size_gru_is_the_smallest_as_large():
    # vocab 10, words 4, hidden 3, 2 capsules: 10*4 + 2 * (mask GRU 4->4: 120 + embedding GRU 4->3: 81) = 442
    assert rcn.parameter_count(10, 4, 3, 2) == 442
    assert sum(p.numel() for p in RCNEncoder(10, 4, 3, capsules=2).parameters()) == 442

    def gru_size(h):
        return sum(p.numel() for p in torch.nn.GRU(4, h).parameters())
    # words 4: hidden 4 and 2 capsules need a GRU of 480 parameters (exactly h = 10), 1 capsule 240 (h = 7: 273);
    # hidden 2 and 1 capsule 168 (h = 6: 216; h = 5 has 165, three short)
    for hidden, capsules, expected in ((4, 2, 10), (4, 1, 7), (2, 1, 6)):
        target = rcn.parameter_count(10, 4, hidden, capsules) - 10 * 4
        h = rcn.equal_size_gru_hidden(10, 4, hidden, capsules)
        assert h == expected and gru_size(h) >= target > gru_size(h - 1)


def test_routing_denominators_keep_their_sign_and_a_zero_becomes_plus_eps():
    from imgtxt.research.text_modules.rcn import _safe as torch_safe
    eps = rcn.ROUTING_EPS
    den = [0.0, 1e-9, -1e-9, 0.5, -0.5]
    expected = [eps, eps, -eps, 0.5, -0.5]
    np.testing.assert_array_equal(rcn._safe(np.array(den)), expected)
    # torch builds the guard in float32 before casting to the input's dtype
    np.testing.assert_allclose(torch_safe(torch.tensor(den, dtype=torch.float64)).numpy(), expected, rtol=1e-7)


def test_penalty_guard_eps_by_hand():
    # masks small enough that the 1e-6 guard counts: C = 2 capsules of one 1-word sentence, 2e-3 and 1e-3.
    # mean 1.5e-3; spread = 2 * (5e-4)^2 / (2 * (1.5e-3)^2 + 1e-6) = 5e-7 / 5.5e-6; smallest norm 1e-3
    masks = np.array([[[2e-3]], [[1e-3]]])
    expected = 1.0 / ((5e-7 / 5.5e-6) * 1e-3 + 1e-6)
    np.testing.assert_allclose(rcn.mask_variance_penalty(masks), [expected], rtol=1e-9)
    np.testing.assert_allclose(mask_variance_penalty(torch.from_numpy(masks)).numpy(), [expected], rtol=1e-9)


def test_an_empty_sentence_is_one_unknown_word():
    tokens, lengths = rcn.pad([[], [5, 6]])
    assert tokens.tolist() == [[1, 0], [5, 6]] and lengths.tolist() == [1, 2]


def test_encoder_defaults_are_the_papers_rcn_0():
    model = RCNEncoder(20, 6, 8)
    assert model.emb_gru["weight_ih"].shape[0] == model.mask_gru["weight_ih"].shape[0] == 4
    assert model.recursions == 4 and model.reg_lambda == 0


def test_word_vectors_start_uniform_and_the_unknown_word_learns():
    torch.manual_seed(0)
    model = RCNEncoder(20, 6, 8, capsules=2, recursions=1)
    w = model.embed.weight
    assert -0.1 <= w.min() < -0.09 and 0.09 < w.max() <= 0.1
    # id 0 pads (no gradient), id 1 is the unknown word: a real input that must be trained
    model(torch.tensor([[1, 3, 0]]), torch.tensor([2])).sum().backward()
    assert w.grad[0].abs().sum() == 0 and w.grad[1].abs().sum() > 0


def test_no_recursion_no_mask_penalty():
    # with r = 0 the masks never move from 1: eq. 14 would be 1 / eps, so there is no regulariser to add
    model = RCNEncoder(20, 6, 8, capsules=2, recursions=0, reg_lambda=0.05)
    model(torch.tensor([[3, 4]]), torch.tensor([2]))
    assert model.penalty.item() == 0
