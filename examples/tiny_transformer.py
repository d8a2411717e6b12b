"""A small pre-norm transformer, for the demo, the benchmark and trying things out."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["TinyTransformer", "copy_task_batch"]


class Attention(nn.Module):
    """Multi-head self-attention with a key-padding mask."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        batch, seq, d_model = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4)
        mask = None if padding_mask is None else ~padding_mask[:, None, None, :]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out: Tensor = self.out(y.transpose(1, 2).reshape(batch, seq, d_model))
        return out


class MLP(nn.Module):
    """Two linear layers around a GELU."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, d_ff)
        self.act = nn.GELU()
        self.down = nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.down(self.act(self.up(x)))
        return out


class Block(nn.Module):
    """Pre-norm transformer block; residuals are added in place, as many real models do."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_heads)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, d_ff)

    def forward(self, x: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        x = x + self.attn(self.norm1(x), padding_mask=padding_mask)
        h: Tensor = self.mlp(self.norm2(x))
        h += x
        return h


class TinyTransformer(nn.Module):
    """A small transformer language model: token + position embedding, pre-norm blocks,
    final norm and a linear head producing logits.

    Args:
        vocab: vocabulary size.
        d_model: width of the residual stream.
        n_heads: attention heads.
        n_layers: number of blocks.
        d_ff: hidden width of the MLPs (default 4 * d_model).
        max_len: longest sequence.

    Example:
        >>> model = TinyTransformer(vocab=32, d_model=64, n_layers=2)
        >>> tokens, targets = copy_task_batch(batch=8, seq=16, vocab=32)
        >>> model(tokens).shape
        torch.Size([8, 16, 32])
    """

    def __init__(
        self,
        vocab: int = 64,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        d_ff: int | None = None,
        max_len: int = 256,
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(
            Block(d_model, n_heads, d_ff or 4 * d_model) for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x, padding_mask=padding_mask)
        logits: Tensor = self.head(self.norm(x))
        return logits


def copy_task_batch(
    batch: int = 16, seq: int = 32, vocab: int = 64, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """Random token sequences whose second half repeats the first half; the target of each
    position is the next token, so the model can learn to copy.

    Returns:
        `(tokens, targets)`, both `[batch, seq]` int64; targets are -100 (ignored) where the
        next token is not predictable.
    """
    half = torch.randint(0, vocab, (batch, seq // 2), generator=generator)
    tokens = torch.cat([half, half], dim=1)[:, :seq]
    targets = torch.full_like(tokens, -100)
    targets[:, seq // 2 - 1 : -1] = tokens[:, seq // 2 :]
    return tokens, targets
