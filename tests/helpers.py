"""Small builders the tests share: models, batches, stashes, and counting hooks."""

from __future__ import annotations

import torch
from torch import nn

from examples.tiny_transformer import TinyTransformer, copy_task_batch
from tensor_tracker import Stash, Tracker


def hook_count(model: nn.Module) -> int:
    """Forward, forward-pre and backward hooks attached to `model` and its submodules."""
    return sum(
        len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
        for m in model.modules()
    )


def mlp() -> nn.Sequential:
    """A three-layer MLP from 4 to 2 features, the same weights every time."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))


def tiny_model() -> TinyTransformer:
    """A two-block transformer over 16 tokens, the same weights every time."""
    torch.manual_seed(0)
    return TinyTransformer(vocab=16, d_model=16, n_layers=2)


def batch(size: int = 2, seq: int = 8) -> torch.Tensor:
    """Token ids for `tiny_model`."""
    tokens, _ = copy_task_batch(size, seq, 16, torch.Generator().manual_seed(0))
    return tokens


def train(
    model: nn.Module, tracker: Tracker, steps: int = 1, tokens: torch.Tensor | None = None
) -> Tracker:
    """`steps` SGD steps of `model` inside `with tracker:`, calling `tracker.step()`."""
    tokens = batch() if tokens is None else tokens
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with tracker:
        for _ in range(steps):
            model(tokens).float().pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            tracker.step()
    return tracker


def stash(value: object, name: str = "x", grad: bool = False, **kw: object) -> Stash:
    """A stash of `value` as an `nn.Identity` module named `name` would record it."""
    return Stash(name, nn.Identity, grad, value, **kw)  # type: ignore[arg-type]
