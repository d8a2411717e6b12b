"""Histograms of full copies: what a recording that kept tensors (no `stats=`) shows where
one with `stats.histogram()` shows its counts (the report's histogram strips)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from ..stats import Histogram, histogram, parse

__all__ = ["copies_histogram"]


def _tensor(stash: Any) -> Tensor | None:
    value = getattr(stash, "first_value", None)
    if isinstance(value, Tensor) and value.numel() and value.is_floating_point():
        return value.detach()
    return None


def copies_histogram(stashes: Iterable[Any], bins: int = 48) -> tuple[Histogram, list[Any]] | None:
    """A log2 histogram over the range the copies' nonzero finite |values| span (whole
    powers of 2, at least one), and each stash's counts under it (`None` for a stash that
    holds no floating-point tensor); `None` when no stash holds a nonzero finite value.

    Example:
        >>> from tensor_tracker import Stash
        >>> from torch import nn
        >>> copies = [Stash("a", nn.Linear, False, torch.tensor([0.25, 0.5, 3.0, 0.0]))]
        >>> spec, counts = copies_histogram(copies, bins=4)
        >>> spec.range, counts[0]["hist"], counts[0]["hist_zero"]
        ((-2.0, 2.0), [1.0, 1.0, 0.0, 1.0], 1.0)
    """
    tensors = [_tensor(s) for s in stashes]
    low, high = math.inf, -math.inf
    for t in tensors:
        if t is None:
            continue
        size = t.abs().float()
        size = size[torch.isfinite(size) & (size > 0)]
        if size.numel():
            low = min(low, math.floor(math.log2(float(size.min()))))
            high = max(high, math.floor(math.log2(float(size.max()))) + 1)
    if low > high:
        return None
    spec = histogram(bins=bins, range=(float(low), float(max(high, low + 1))))
    fn = parse([spec])
    return spec, [None if t is None else fn(t.float()).to_dict() for t in tensors]
