"""A nanoGPT-style language model written in code: the attention spelled out (`q @ k.T`,
softmax, `@ v`) or in one `scaled_dot_product_attention` call, and residual adds. For
`track(model, ops=...)` (issue 37): the benchmark's workload, doc/Attention.ipynb's model.

`taps=True` puts `tensor_tracker.tap` on the values that `ops=["softmax", "matmul", "add"]`
records, with the same statistics at the same points: the hand-written floor of `ops=`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import tensor_tracker

__all__ = ["NanoGPT"]


def _tap(module: nn.Module, name: str, value: Tensor) -> Tensor:
    """`tensor_tracker.tap(name, value)` where `module` was built with `taps=True`."""
    return tensor_tracker.tap(name, value) if module.taps else value


class CausalSelfAttention(nn.Module):
    """Causal multi-head self-attention; `qk_norm` puts a LayerNorm on each head's query and
    key (QK-norm), which keeps the attention logits bounded."""

    causal: Tensor

    def __init__(
        self, d_model: int, n_heads: int, max_len: int, sdpa: bool, qk_norm: bool, taps: bool
    ) -> None:
        super().__init__()
        self.n_heads, self.sdpa, self.taps = n_heads, sdpa, taps
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        head = d_model // n_heads
        self.q_norm = nn.LayerNorm(head) if qk_norm else None
        self.k_norm = nn.LayerNorm(head) if qk_norm else None
        causal = torch.ones(max_len, max_len, dtype=torch.bool).tril()
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        batch, seq, d_model = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = _tap(self, "scores", q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            scores = scores.masked_fill(~self.causal[:seq, :seq], float("-inf"))
            weights = _tap(self, "weights", F.softmax(scores, dim=-1))
            y = _tap(self, "mixed", weights @ v)
        out: Tensor = self.proj(y.transpose(1, 2).reshape(batch, seq, d_model))
        return out


class Block(nn.Module):
    """Pre-norm transformer block: attention and a GELU MLP, each added to the residual."""

    def __init__(
        self, d_model: int, n_heads: int, max_len: int, sdpa: bool, qk_norm: bool, taps: bool
    ) -> None:
        super().__init__()
        self.taps = taps
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, max_len, sdpa, qk_norm, taps)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x: Tensor) -> Tensor:
        x = _tap(self, "residual", x + self.attn(self.norm1(x)))
        return _tap(self, "residual", x + self.mlp(self.norm2(x)))


class NanoGPT(nn.Module):
    """A GPT in the style of nanoGPT: token and position embeddings (added), pre-norm blocks
    of causal attention and an MLP, a final norm and a linear head giving logits.

    Args:
        vocab: vocabulary size.
        d_model: width of the residual stream.
        n_heads: attention heads per block.
        n_layers: blocks.
        max_len: longest sequence.
        sdpa: attention in one `F.scaled_dot_product_attention` call (what
            `stats.attention_logits()` reads), instead of `q @ k.T`, softmax and `@ v`.
        qk_norm: a LayerNorm on every head's query and key.
        taps: `tensor_tracker.tap` on each `q @ k.T`, softmax, `@ v` and residual add, the
            values `ops=["softmax", "matmul", "add"]` records.

    Example:
        >>> model = NanoGPT(vocab=32, d_model=32, n_heads=4, n_layers=2, max_len=16)
        >>> model(torch.randint(0, 32, (2, 16))).shape
        torch.Size([2, 16, 32])
    """

    def __init__(
        self,
        vocab: int = 64,
        d_model: int = 256,
        n_heads: int = 4,
        n_layers: int = 4,
        max_len: int = 128,
        sdpa: bool = False,
        qk_norm: bool = False,
        taps: bool = False,
    ) -> None:
        super().__init__()
        self.taps = taps
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(
            Block(d_model, n_heads, max_len, sdpa, qk_norm, taps) for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: Tensor) -> Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = _tap(self, "embedding", self.embed(tokens) + self.pos(positions))
        for block in self.blocks:
            x = block(x)
        logits: Tensor = self.head(self.norm(x))
        return logits
