"""Similarities and hinge ranking losses of the joint space (FNE paper, sections 3.2-3.4).

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


def order_similarity(images: torch.Tensor, captions: torch.Tensor) -> torch.Tensor:
    """S_OE(c, i) = -||max(0, c - i)||^2 for every (image, caption) pair -> (B, C).

    Expanded as sum(relu(c - i)^2) without building a (B, C, D) tensor when it would be large."""
    diff = captions.unsqueeze(0) - images.unsqueeze(1)  # (B, C, D)
    return -diff.clamp(min=0).pow(2).sum(dim=2)


SIMILARITIES = {"cosine": cosine_similarity, "order": order_similarity}


def hinge_loss(scores: torch.Tensor, margin: float, reduce: str) -> torch.Tensor:
    """Ranking loss over a square score matrix whose diagonal holds the matching pairs.

    reduce="sum": every violating contrastive pair counts (eq. 1); reduce="max": only the hardest
    contrastive caption per image and image per caption (eq. 4). Returns the sum over the batch.
    """
    positives = scores.diag().view(-1, 1)
    cost_caption = (margin + scores - positives).clamp(min=0)      # image i vs caption k
    cost_image = (margin + scores - positives.t()).clamp(min=0)    # caption j vs image k
    eye = torch.eye(scores.size(0), dtype=torch.bool, device=scores.device)
    cost_caption = cost_caption.masked_fill(eye, 0)
    cost_image = cost_image.masked_fill(eye, 0)
    if reduce == "max":
        return cost_caption.max(dim=1).values.sum() + cost_image.max(dim=0).values.sum()
    if reduce == "sum":
        return cost_caption.sum() + cost_image.sum()
    raise ValueError(f"reduce must be 'sum' or 'max', not {reduce!r}")
