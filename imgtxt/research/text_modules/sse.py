"""The thesis's SSE text model as a torch module (numpy twin and definition: sse.py)."""
from __future__ import annotations

import torch
from torch import nn

from .parts import check_and_copy, l2norm


class Encoder(nn.Module):
    def __init__(self, text_config: dict, embed_dim: int):
        super().__init__()
        self.embed = nn.Embedding(text_config["vocab_size"], text_config["word_dim"], padding_idx=0)
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        with torch.no_grad():
            self.embed.weight[0].zero_()
        window = text_config["window"]
        # Zero padding: window//2 before, the rest after (equal for odd windows), as in sse.sse_forward.
        self.pad = (window // 2, window - 1 - window // 2)
        # Without "top" (models from before the thesis's top layers) the kernels are the joint space itself.
        top = bool(text_config.get("top"))
        kernels = text_config.get("kernels", embed_dim) if top else embed_dim
        self.conv = nn.Conv1d(text_config["word_dim"], kernels, window)
        self.top = nn.Linear(kernels, embed_dim) if top else None

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        x = nn.functional.pad(self.embed(tokens).transpose(1, 2), self.pad)   # (B, M, T + window - 1)
        conv = torch.tanh(self.conv(x))                                       # (B, K, T)
        lengths = lengths.to(tokens.device)
        valid = (torch.arange(tokens.shape[1], device=tokens.device)[None, :] < lengths[:, None]).unsqueeze(1)
        mean = (conv * valid).sum(dim=2) / lengths[:, None].float()
        if self.top is not None:
            mean = self.top(torch.relu(mean))
        return l2norm(mean)

    def export_tensors(self) -> dict[str, torch.Tensor]:
        out = {"sse.word_embedding": self.embed.weight, "sse.conv.weight": self.conv.weight,
               "sse.conv.bias": self.conv.bias}
        if self.top is not None:
            out.update({"sse.top.weight": self.top.weight, "sse.top.bias": self.top.bias})
        return out

    def import_tensors(self, tensors: dict, pretrained_only: bool = False) -> None:
        check_and_copy(self.export_tensors(), tensors)
