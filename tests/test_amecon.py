"""AMECON: hard coding, caption codes, region boxes and pooling, k-means, the MLP's numpy twin, save/load."""
import numpy as np
import pytest

from imgtxt.research import amecon


def test_content_words_drop_stop_words():
    assert amecon.content_words("A dog is running on the beach!") == ["dog", "running", "beach"]


def test_hard_coding_to_m_nearest_and_max_pooling():
    centres = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [5.0, 5.0]])
    vectors = np.array([[0.9, 0.1],    # nearest: 1 (0.02), 0 (0.82), 2 (1.62)
                        [4.0, 4.0]])   # nearest: 3, then 1 vs 2 tie (25) -> lower index first, 1
    codes = amecon.hard_codes(vectors, centres, m=2)
    assert codes.tolist() == [[1, 0], [3, 1]]
    out = amecon.text_codes(["the dog", "dog and cat", "zebra"], {"dog": 0, "cat": 1}, codes, 4)
    assert out.tolist() == [[1, 1, 0, 0], [1, 1, 0, 1], [0, 0, 0, 0]]


def test_region_boxes_full_plus_four_corners_at_two_thirds():
    boxes = amecon.region_boxes(300, 600)
    assert boxes == [(0, 0, 300, 600), (0, 0, 200, 400), (0, 200, 200, 600), (100, 0, 300, 400), (100, 200, 300, 600)]
    image = np.arange(9 * 12 * 3).reshape(9, 12, 3)
    crops = amecon.region_crops(image)
    assert [c.shape for c in crops] == [(9, 12, 3)] + [(6, 8, 3)] * 4
    assert (crops[4] == image[3:, 4:]).all()


def test_region_pooling_is_max_per_image():
    f = np.array([[1, 0], [0, 2], [3, 0], [0, 0], [1, 1],      # image 0's five regions
                  [0, 0], [0, 0], [0, 0], [0, 9], [5, 0]], dtype=np.float32)
    assert amecon.pool_regions(f).tolist() == [[3, 2], [5, 9]]


def test_kmeans_finds_separated_groups():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(c, 0.05, (30, 2)) for c in ([0, 0], [3, 0], [0, 3])]).astype(np.float32)
    centres = amecon.kmeans(x, 3, seed=1)
    assert sorted(np.round(centres).tolist()) == [[0, 0], [0, 3], [3, 0]]


def test_kmeans_plus_plus_seeds_one_centre_per_group():
    # no Lloyd iteration: the k-means++ draws alone (D^2 sampling) land in four different groups for every seed;
    # the groups are 0.1 apart, so that the total squared distance is below 1 as well
    rng = np.random.default_rng(0)
    groups = np.array([[0, 0], [0.1, 0], [0, 0.1], [0.1, 0.1]])
    x = np.concatenate([rng.normal(c, 1e-4, (20, 2)) for c in groups])
    for seed in range(5):
        centres = amecon.kmeans(x, 4, iterations=0, seed=seed).astype(np.float64)
        assert sorted(amecon.squared_distances(centres, groups).argmin(axis=1).tolist()) == [0, 1, 2, 3]


def test_kmeans_reseeds_an_emptied_cluster():
    # two distinct points for three centres: the seeding repeats one, Lloyd empties it, and it is re-seeded
    x = np.array([[0.0, 0.0]] * 5 + [[1.0, 1.0]] * 5)
    centres = amecon.kmeans(x, 3)
    assert centres.shape == (3, 2) and {tuple(c) for c in centres.tolist()} == {(0.0, 0.0), (1.0, 1.0)}


def test_squared_distances_by_hand():
    a = np.array([[1.0, 0.0], [0.0, 2.0]])
    b = np.array([[0.0, 0.0], [1.0, 1.0], [3.0, 0.0]])
    assert amecon.squared_distances(a, b).tolist() == [[1, 1, 4], [4, 2, 13]]


def test_hard_codes_default_to_the_papers_three_nearest():
    centres = np.array([[0.0], [1.0], [2.0], [3.0], [4.0]])
    assert amecon.hard_codes(np.array([[0.1], [3.9]]), centres).tolist() == [[0, 1, 2], [4, 3, 2]]


def test_ppmi_vectors_put_cooccurring_words_together():
    caps = ["dog runs grass"] * 5 + ["cat sleeps sofa"] * 5 + ["dog grass"] * 3 + ["cat sofa"] * 3
    words = amecon.vocabulary(caps)
    v = amecon.ppmi_svd_vectors(caps, words, dim=2)
    i = {w: k for k, w in enumerate(words)}
    assert v[i["dog"]] @ v[i["grass"]] > v[i["dog"]] @ v[i["sofa"]]


def test_mlp_numpy_twin_and_save_load(tmp_path):
    import torch
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(20, 6)).astype(np.float32)
    labels = (rng.random((40, 5)) > 0.5).astype(np.float32)
    weights = amecon.train_image_mlp(feats, labels, np.arange(40) // 2, hidden=(8, 8), epochs=2, batch=16,
                                     log=lambda m: None)
    # numpy forward == torch forward with the same weights (eval mode: no dropout)
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8), torch.nn.ReLU(),
                              torch.nn.Linear(8, 5))
    with torch.no_grad():
        for k, layer in zip(range(3), [net[0], net[2], net[4]]):
            layer.weight.copy_(torch.from_numpy(weights[f"mlp.{k}.weight"]))
            layer.bias.copy_(torch.from_numpy(weights[f"mlp.{k}.bias"]))
        standardised = (feats - weights["mlp_in.mean"]) / weights["mlp_in.std"]
        expected = torch.sigmoid(net(torch.from_numpy(standardised))).numpy()
    np.testing.assert_allclose(amecon.mlp_forward(feats, weights), expected, atol=1e-6)
    codes = np.array([[0, 1], [2, 3]], np.int32)
    amecon.save(tmp_path / "m", {**weights, "codes": codes}, ["dog", "cat"], {"concepts": 5, "features": {}})
    model = amecon.AmeconModel(tmp_path / "m")
    assert amecon.AmeconModel.is_amecon(tmp_path / "m")
    assert model.encode_text(["a cat"]).tolist() == [[0, 0, 1, 1, 0]]
    np.testing.assert_allclose(model.encode_images(feats), expected, atol=1e-6)
    # kNN: an image whose probabilities equal a caption's code is its nearest
    s = amecon.t2i_scores(np.array([[0, 0, 1, 1, 0], [1, 1, 0, 0, 0]], np.float32), model.encode_text(["cat"]))
    assert s[0, 0] == 0 and s[1, 0] == -4
    from imgtxt.model.modelfile import ModelError, TrainedModel
    with pytest.raises(ModelError, match="AMECON"):
        TrainedModel.load(tmp_path / "m")


def test_randomized_svd_matches_full_svd_on_low_rank():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(40, 5)) @ rng.normal(size=(5, 40))
    u, s = amecon.randomized_svd(a, 5)
    np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False)[:5], rtol=1e-6)
    np.testing.assert_allclose(np.abs(u.T @ np.linalg.svd(a)[0][:, :5]), np.eye(5), atol=1e-6)


def test_image_mlp_learns_from_l2_normalised_features():
    """The features imgtxt feeds AMECON are L2-normalised (~0.03 per dimension over 1,280): the MLP must still
    tell images apart. Without input standardisation it did not (train-image t2i recall at chance)."""
    rng = np.random.default_rng(0)
    n_images, n_concepts, dim = 200, 40, 1280
    concepts = rng.random((n_images, n_concepts)) < 0.1
    mixing = rng.normal(size=(n_concepts, dim))
    raw = concepts @ mixing + 0.5 * rng.normal(size=(n_images, dim))
    feats = (raw / np.linalg.norm(raw, axis=1, keepdims=True)).astype(np.float32)
    labels = np.repeat(concepts, 2, axis=0).astype(np.float32)      # two captions an image, the same code
    weights = amecon.train_image_mlp(feats, labels, np.arange(2 * n_images) // 2, hidden=(64, 64), epochs=3,
                                     batch=32, log=lambda m: None, optimizer="adam")
    probs = amecon.mlp_forward(feats, weights)
    scores = amecon.t2i_scores(probs, labels[::2])                  # (images, one caption per image)
    rank_of_own = (scores > scores[np.arange(n_images), np.arange(n_images)][None, :]).sum(axis=0)
    assert (rank_of_own < 10).mean() > 0.5                           # chance: 10 / 200



def test_a_stopped_mlp_run_continues_to_the_weights_of_an_uninterrupted_one(tmp_path):
    """3 epochs at once == 1 epoch, then the same call with epochs=3 (dropout and shuffling included: both RNGs
    are in the state); a state of other settings is refused with one line."""
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(20, 6)).astype(np.float32)
    labels = (rng.random((40, 5)) > 0.5).astype(np.float32)
    args = (feats, labels, np.arange(40) // 2)
    kwargs = {"hidden": (8, 8), "batch": 16, "log": lambda m: None, "optimizer": "sgd", "lr": 0.05}
    straight = amecon.train_image_mlp(*args, epochs=3, **kwargs)
    state = tmp_path / "state.pt"
    first_run: dict = {}
    one = amecon.train_image_mlp(*args, epochs=1, state_path=state, stats=first_run, **kwargs)
    assert first_run["epochs_run"] == 1 and state.exists()
    assert not np.allclose(one["mlp.0.weight"], straight["mlp.0.weight"])   # the comparison below can fail
    second_run: dict = {}
    resumed = amecon.train_image_mlp(*args, epochs=3, state_path=state, stats=second_run, **kwargs)
    assert second_run["epochs_run"] == 2
    for name, value in straight.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    with pytest.raises(ValueError, match="other settings"):
        amecon.train_image_mlp(*args, epochs=4, state_path=state, **{**kwargs, "lr": 0.01})
