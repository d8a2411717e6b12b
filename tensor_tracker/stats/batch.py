"""The raw vectors of many tensors at once: the built-in groups of `kernels`, row by row.

`StatsStore.put_many` stacks tensors of one device, dtype and size into a matrix (one copy)
and reduces each row with one kernel per raw number (`rows_raw`), where the per-tensor path
(`Core.host`, `Core.device_raw`) makes one Python call per tensor and number. Parameters,
their gradients and the optimizer's state (all known when the optimizer steps) are recorded
this way.

What is identical to the per-tensor path, bit for bit, and what is not: the sums
(`sum`, `mean`, the absolute sum), `min`, `max` and the counts, on the CPU (a row-wise sum
reduces each row in the same order as a 1-D sum). The sum of squares behind `std` and `rms`
is a row-wise `vecdot`, which adds in another order than `torch.dot`: within a few float32
ulps of it (relative difference <= 1e-6 of the sum of squares on the tensors we test), and
on accelerators `std_mean` over rows is within the same few ulps of `std_mean` of one
tensor. `ROW_TOLERANCE` says how close, as `torch.testing.assert_close` arguments.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from .kernels import F64, INF, Core

__all__ = ["ROW_TOLERANCE", "rows_raw"]

ROW_TOLERANCE = {"rtol": 1e-5, "atol": 1e-7}
"""How close `rows_raw`'s `std` (and `rms`) are to the per-tensor path's, relative to the
tensor's own scale: the other slots are identical on the CPU."""


def _cpu_moments(x: Tensor) -> list[Tensor]:
    # `cpu_moments` row by row: mean from the sum (identical), the spread from dot/n - mean**2
    # unless that cancels, then from the two-pass norm (both in float64, as it does).
    n = x.shape[1]
    mean = x.sum(1).to(F64) / n
    square_mean = torch.linalg.vecdot(x, x).to(F64) / n
    var = square_mean - mean * mean
    good = (0.25 * square_mean <= var) & (var < INF)
    std = var.sqrt()
    if not bool(good.all()):  # a host read, free on the CPU
        centre = x.mean(1, keepdim=True)
        spread = torch.linalg.vector_norm(x - centre, dim=1).to(F64) / math.sqrt(n)
        mean = torch.where(good, mean, centre.squeeze(1).to(F64))
        std = torch.where(good, std, spread)
    return [mean, std]


def _device_moments(x: Tensor) -> list[Tensor]:
    std, mean = torch.std_mean(x, dim=1, correction=0)
    return [mean, std]


def _minmax(x: Tensor) -> list[Tensor]:
    # amin/amax over rows: aminmax with dim= is ~30x slower on the CPU.
    return [x.amin(1), x.amax(1)]


def _abs_sum(x: Tensor) -> list[Tensor]:
    if x.is_cpu:
        return [x.abs().sum(1)]
    return [torch.linalg.vector_norm(x, 1, dim=1)]


_ROWS: dict[str, Callable[[Tensor], list[Tensor]]] = {
    "mean": lambda x: _cpu_moments(x) if x.is_cpu else _device_moments(x),
    "min": _minmax,
    "abs_sum": _abs_sum,
    "nonfinite": lambda x: [torch.count_nonzero(x - x, dim=1)],
    "nonzero": lambda x: [torch.count_nonzero(x, dim=1)],
    "sum": lambda x: [x.sum(1)],
}
"""Each raw group of `kernels.GROUPS` (by its first slot), over the rows of a matrix."""


def rows_raw(core: Core, x: Tensor) -> Tensor:
    """The raw vectors `[k, width]` (float64, on `x`'s device) of the `k` rows of the matrix
    `x` (in its reduction dtype, at least one column), for `core`'s groups without range
    counts; never waits for an accelerator.

    Example:
        >>> core = StatsFn(["mean", "max"])._core
        >>> rows_raw(core, torch.tensor([[1.0, 3.0], [2.0, 2.0]])).tolist()
        [[2.0, 1.0, 1.0, 3.0], [2.0, 0.0, 2.0, 2.0]]
    """
    parts = [part.to(F64) for group in core.groups for part in _ROWS[group.slots[0]](x)]
    return torch.stack(parts, 1)
