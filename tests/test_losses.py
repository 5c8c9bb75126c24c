"""Each loss against a small example computed by hand."""
import pytest
import torch

from imgtxt.research.losses import SIMILARITIES, cosine_similarity, hinge_loss, order_similarity

# 3 images x 3 captions; the diagonal holds the matching pairs.
SCORES = torch.tensor([[0.9, 0.5, 0.8],
                       [0.3, 0.6, 0.7],
                       [0.1, 0.2, 0.4]])
MARGIN = 0.2


def test_sum_of_hinges_by_hand():
    # image->caption, row i: sum_k!=i max(0, m - s_ii + s_ik)
    # row0: (.2-.9+.5)=-.2->0, (.2-.9+.8)=.1 -> .1
    # row1: (.2-.6+.3)=-.1->0, (.2-.6+.7)=.3 -> .3
    # row2: (.2-.4+.1)=-.1->0, (.2-.4+.2)=0   -> 0
    # caption->image, column j: sum_k!=j max(0, m - s_jj + s_kj)
    # col0: (.2-.9+.3)->0, (.2-.9+.1)->0 -> 0
    # col1: (.2-.6+.5)=.1, (.2-.6+.2)=-.2->0 -> .1
    # col2: (.2-.4+.8)=.6, (.2-.4+.7)=.5 -> 1.1
    expected = 0.1 + 0.3 + 0 + 0 + 0.1 + 1.1
    assert torch.isclose(hinge_loss(SCORES, MARGIN, "sum"), torch.tensor(expected))


def test_max_of_hinges_by_hand():
    # hardest negative only: rows .1, .3, 0; columns 0, .1, .6
    expected = 0.1 + 0.3 + 0 + 0 + 0.1 + 0.6
    assert torch.isclose(hinge_loss(SCORES, MARGIN, "max"), torch.tensor(expected))


def test_order_similarity_by_hand():
    images = torch.tensor([[0.6, 0.8], [1.0, 0.0]])
    captions = torch.tensor([[0.6, 0.8], [0.0, 1.0], [0.8, 0.6]])
    s = order_similarity(images, captions)
    # S(c, i) = -||max(0, c - i)||^2
    expected = torch.tensor([
        [0.0, -(0.2 ** 2), -(0.2 ** 2)],
        [-(0.8 ** 2), -(1.0 ** 2), -(0.6 ** 2)],
    ])
    assert torch.allclose(s, expected)


def test_order_embedding_losses_use_order_similarity():
    images = torch.tensor([[0.6, 0.8], [1.0, 0.0]])
    captions = torch.tensor([[0.6, 0.8], [0.8, 0.6]])
    s = order_similarity(images, captions)  # [[0, -.04], [-.64, -.36]]
    margin = 0.05
    # SOE: rows: max(0,.05-0-.04)=.01 ; max(0,.05+.36-.64)=0 ; cols: max(0,.05-0-.64)=0 ; max(0,.05+.36-.04)=.37
    assert torch.isclose(hinge_loss(s, margin, "sum"), torch.tensor(0.01 + 0.37))
    assert torch.isclose(hinge_loss(s, margin, "max"), torch.tensor(0.01 + 0.37))


def test_cosine_is_dot_product_of_normalised_vectors():
    a = torch.nn.functional.normalize(torch.randn(4, 8), dim=1)
    b = torch.nn.functional.normalize(torch.randn(5, 8), dim=1)
    assert torch.allclose(cosine_similarity(a, b), torch.nn.functional.cosine_similarity(
        a.unsqueeze(1), b.unsqueeze(0), dim=2), atol=1e-6)


def test_perfect_scores_give_zero_loss():
    scores = torch.eye(4) * 1.0
    assert hinge_loss(scores, 0.2, "sum") == 0
    assert hinge_loss(scores, 0.2, "max") == 0
    with pytest.raises(ValueError, match=r"^reduce must be 'sum' or 'max', not 'mean'$"):
        hinge_loss(scores, 0.2, "mean")


def test_similarities_by_name():
    # the names a model config gives (JointModel reads the similarity from this table)
    assert SIMILARITIES == {"cosine": cosine_similarity, "order": order_similarity}


def test_chunked_order_similarity_equals_unchunked_with_gradients():
    from imgtxt.research.losses import order_similarity_unchunked
    torch.manual_seed(0)
    images = torch.rand(7, 5, dtype=torch.float64, requires_grad=True)
    captions = torch.rand(9, 5, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(7, 9, dtype=torch.float64)
    ref = order_similarity_unchunked(images, captions)
    (ref * weights).sum().backward()
    g_ref = images.grad.clone(), captions.grad.clone()
    for budget in (1, 2 * 9 * 5, 10 ** 6):   # one image per block, two, all at once
        images.grad = captions.grad = None
        out = order_similarity(images, captions, chunk_elements=budget)
        assert torch.allclose(out, ref)
        (out * weights).sum().backward()
        assert torch.allclose(images.grad, g_ref[0]) and torch.allclose(captions.grad, g_ref[1])
    assert torch.autograd.gradcheck(lambda a, b: order_similarity(a, b, 2 * 9 * 5), (images, captions))
    # one side frozen (a pretrained text side, or features): the other still gets its gradient
    for grad_images in (True, False):
        a = images.detach().requires_grad_(grad_images)
        b = captions.detach().requires_grad_(not grad_images)
        (order_similarity(a, b, 2 * 9 * 5) * weights).sum().backward()
        learnt, frozen, ref_grad = (a, b, g_ref[0]) if grad_images else (b, a, g_ref[1])
        assert frozen.grad is None and torch.allclose(learnt.grad, ref_grad)


def test_numpy_order_scores_chunked_equal_torch():
    import numpy as np

    from imgtxt.model.modelfile import order_scores
    rng = np.random.default_rng(0)
    images, captions = rng.random((11, 6)).astype(np.float32), rng.random((13, 6)).astype(np.float32)
    ref = order_similarity(torch.from_numpy(images), torch.from_numpy(captions)).numpy()
    for budget in (1, 13 * 6 * 3, 10 ** 6):
        np.testing.assert_allclose(order_scores(images, captions, chunk_elements=budget), ref, rtol=1e-6)


def test_same_image_captions_are_not_negatives_of_each_other():
    from imgtxt.research.losses import same_image_mask
    # rows/columns 0 and 1 are two captions of image 7: (0,1) and (1,0) are right answers too
    scores = torch.tensor([[0.5, 0.9, 0.1],
                           [0.9, 0.5, 0.1],
                           [0.1, 0.1, 0.5]])
    mask = same_image_mask([7, 7, 3])
    assert mask.tolist() == [[True, True, False], [True, True, False], [False, False, True]]
    # unmasked, the 0.9 pairs are violations of 0.2 + 0.9 - 0.5 = 0.6 each way, four times
    assert torch.isclose(hinge_loss(scores, 0.2, "sum"), torch.tensor(4 * 0.6))
    assert hinge_loss(scores, 0.2, "sum", also_positive=mask) == 0
    assert hinge_loss(scores, 0.2, "max", also_positive=mask) == 0
