"""Similarities and hinge ranking losses of the joint space (2019 FNE paper, sections 3.2-3.4).

SH  = sum of hinges, cosine           (Kiros et al., UVS)
MH  = max of hinges, cosine           (Faghri et al., VSE++)
SOE = sum of hinges, order similarity (Vendrov et al.)
MOE = max of hinges, order similarity
Every other pair in the batch is a contrastive example, in both directions.
"""
from __future__ import annotations

import torch


def cosine_similarity(images: torch.Tensor, captions: torch.Tensor) -> torch.Tensor:
    """(B, D) x (C, D) -> (B, C). Inputs are already L2-normalised, so this is a dot product."""
    return images @ captions.t()


# Elements of one (rows, C, D) block of the order similarity: 2^24 floats = 64 MB.
ORDER_CHUNK_ELEMENTS = 1 << 24


def _order_rows(n_rows: int, n_cols: int, dim: int, budget: int) -> int:
    return max(1, budget // max(1, n_cols * dim))


class _ChunkedOrder(torch.autograd.Function):
    """-||max(0, c - i)||^2 for every pair, forward and backward in blocks of images, so that neither pass
    holds the (B, C, D) difference tensor (3 GB at validation, ~13 GB for COCO 5k at 2048 dims).
    d/dc = -2 relu(c - i) * g,  d/di = +2 relu(c - i) * g, both summed over the other side."""

    @staticmethod
    def forward(ctx, images, captions, budget):
        ctx.save_for_backward(images, captions)
        ctx.budget = budget
        rows = _order_rows(len(images), len(captions), images.shape[1], budget)
        out = images.new_empty(len(images), len(captions))
        for s in range(0, len(images), rows):
            diff = (captions.unsqueeze(0) - images[s:s + rows].unsqueeze(1)).clamp_(min=0)
            out[s:s + rows] = -diff.pow_(2).sum(dim=2)
        return out

    @staticmethod
    def backward(ctx, grad):
        images, captions = ctx.saved_tensors
        rows = _order_rows(len(images), len(captions), images.shape[1], ctx.budget)
        g_images = torch.zeros_like(images) if ctx.needs_input_grad[0] else None
        g_captions = torch.zeros_like(captions) if ctx.needs_input_grad[1] else None
        for s in range(0, len(images), rows):
            weighted = (captions.unsqueeze(0) - images[s:s + rows].unsqueeze(1)).clamp_(min=0)
            weighted.mul_(grad[s:s + rows].unsqueeze(2) * 2)             # 2 relu(c - i) g
            if g_images is not None:
                g_images[s:s + rows] = weighted.sum(dim=1)
            if g_captions is not None:
                g_captions -= weighted.sum(dim=0)
        return g_images, g_captions, None


def order_similarity(images: torch.Tensor, captions: torch.Tensor,
                     chunk_elements: int = ORDER_CHUNK_ELEMENTS) -> torch.Tensor:
    """S_OE(c, i) = -||max(0, c - i)||^2 for every (image, caption) pair -> (B, C), computed in blocks
    of at most `chunk_elements` differences (gradients included)."""
    return _ChunkedOrder.apply(images, captions, chunk_elements)


def order_similarity_unchunked(images: torch.Tensor, captions: torch.Tensor) -> torch.Tensor:
    """The direct formula, the reference the chunked one is tested against."""
    diff = captions.unsqueeze(0) - images.unsqueeze(1)  # (B, C, D)
    return -diff.clamp(min=0).pow(2).sum(dim=2)


SIMILARITIES = {"cosine": cosine_similarity, "order": order_similarity}


def same_image_mask(image_ids) -> torch.Tensor:
    """(B,) image ids of a batch's pairs -> (B, B) True where row and column show the same image: with all
    five captions per epoch, two captions of one image in a batch are right answers for each other's image,
    not contrastive examples."""
    ids = torch.as_tensor(image_ids)
    return ids.view(-1, 1) == ids.view(1, -1)


def hinge_loss(scores: torch.Tensor, margin: float, reduce: str, also_positive: torch.Tensor | None = None) -> torch.Tensor:
    """Ranking loss over a square score matrix whose diagonal holds the matching pairs.

    reduce="sum": every violating contrastive pair counts (eq. 1); reduce="max": only the hardest
    contrastive caption per image and image per caption (eq. 4). Returns the sum over the batch.
    also_positive: optional (B, B) mask of further matching pairs (`same_image_mask`), never used as negatives.
    """
    positives = scores.diag().view(-1, 1)
    cost_caption = (margin + scores - positives).clamp(min=0)      # image i vs caption k
    cost_image = (margin + scores - positives.t()).clamp(min=0)    # caption j vs image k
    eye = torch.eye(scores.size(0), dtype=torch.bool, device=scores.device)
    if also_positive is not None:
        eye = eye | also_positive.to(scores.device)
    cost_caption = cost_caption.masked_fill(eye, 0)
    cost_image = cost_image.masked_fill(eye, 0)
    if reduce == "max":
        return cost_caption.max(dim=1).values.sum() + cost_image.max(dim=0).values.sum()
    if reduce == "sum":
        return cost_caption.sum() + cost_image.sum()
    raise ValueError(f"reduce must be 'sum' or 'max', not {reduce!r}")


NEGATIVES = ("i2t", "t2i", "both")


def single_negative_loss(scores: torch.Tensor, margin: float, negatives: str,
                         also_positive: torch.Tensor | None = None, generator: torch.Generator | None = None
                         ) -> torch.Tensor:
    """The thesis's PosNet/NegNet loss (section 5.3): each matching pair k against ONE random negative j != k of the
    batch, hinge max(0, margin - s(pos) + s(neg)). "i2t" keeps the image and swaps the caption (s[k, j]),
    "t2i" keeps the caption and swaps the image (s[j, k]), "both" adds the two. Sum over the batch."""
    if negatives not in NEGATIVES:
        raise ValueError(f"negatives must be one of {NEGATIVES}, not {negatives!r}")
    b = scores.size(0)
    k = torch.arange(b, device=scores.device)
    offset = torch.randint(1, b, (b,), generator=generator).to(scores.device)
    j = (k + offset) % b                                              # uniform over the other pairs
    pos = scores[k, k]
    keep = torch.ones(b, device=scores.device) if also_positive is None else \
        (~also_positive.to(scores.device)[k, j]).float()             # a same-image "negative" is no negative
    loss = scores.new_zeros(())
    if negatives in ("i2t", "both"):
        loss = loss + ((margin - pos + scores[k, j]).clamp(min=0) * keep).sum()
    if negatives in ("t2i", "both"):
        loss = loss + ((margin - pos + scores[j, k]).clamp(min=0) * keep).sum()
    return loss
