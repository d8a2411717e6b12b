"""The raw vectors of many tensors at once: the built-in groups of `kernels`, row by row.

`StatsStore.put_many` stacks tensors of one device, dtype and size into a matrix (one copy)
and reduces each row with one kernel per raw number (`RowBatch`), where the per-tensor path
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

from .kernels import F64, GROUPS, INF, Core, host_tensor

__all__ = ["ROW_TOLERANCE", "RowBatch"]

ROW_TOLERANCE = {"rtol": 1e-5, "atol": 1e-7}
"""How close `rows_raw`'s `std` (and `rms`) are to the per-tensor path's, relative to the
tensor's own scale: the other slots are identical on the CPU."""


def _cpu_sums(x: Tensor) -> list[Tensor]:
    # What `cpu_moments` starts from: the sum and the sum of squares (see `_spread`).
    return [x.sum(1), torch.linalg.vecdot(x, x)]


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
    "mean": lambda x: _cpu_sums(x) if x.is_cpu else _device_moments(x),
    "min": _minmax,
    "abs_sum": _abs_sum,
    "nonfinite": lambda x: [torch.count_nonzero(x - x, dim=1)],
    "nonzero": lambda x: [torch.count_nonzero(x, dim=1)],
    "sum": lambda x: [x.sum(1)],
}
"""Each raw group of `kernels.GROUPS` (by its first slot), over the rows of a matrix; on
the CPU the moments' two slots hold the sums `RowBatch.raw` derives them from."""


class RowBatch:
    """The raw vectors of the rows of several matrices (one per size of tensor), computed
    with a few kernels per matrix and then, together, the float64 arithmetic that turns
    sums into moments.

    Example:
        >>> batch = RowBatch(StatsFn(["mean", "max"])._core)
        >>> batch.add(torch.tensor([[-1.0, 3.0], [2.0, 2.0]]))
        >>> batch.add(torch.tensor([[5.0]]))
        >>> batch.raw().tolist()  # per row: mean, spread (correction 0), min, max
        [[1.0, 2.0, -1.0, 3.0], [2.0, 0.0, 2.0, 2.0], [5.0, 0.0, 5.0, 5.0]]
    """

    __slots__ = ("core", "matrices", "numels", "parts")

    def __init__(self, core: Core) -> None:
        self.core = core
        self.parts: list[Tensor] = []
        self.matrices: list[Tensor] = []
        self.numels: list[float] = []

    def add(self, x: Tensor) -> None:
        """Reduce the rows of `x` (`[k, n]`, `n >= 1`, in its reduction dtype)."""
        parts = [p for group in self.core.groups for p in _ROWS[group.slots[0]](x)]
        dtype = parts[0].dtype
        if any(p.dtype != dtype for p in parts):  # counts beside float reductions
            parts = [p.to(F64) for p in parts]
        self.parts.append(torch.stack(parts, 1))
        self.matrices.append(x)
        k, n = x.shape
        self.numels += [float(n)] * k

    def raw(self) -> Tensor:
        """The raw vectors `[K, width]` of every row added, in order (float64, on the
        matrices' device: one device per batch); never waits for an accelerator."""
        parts = self.parts
        dtype = parts[0].dtype
        if all(p.dtype == dtype for p in parts):  # one conversion for the whole batch
            raw = (parts[0] if len(parts) == 1 else torch.cat(parts)).to(F64)
        else:
            raw = torch.cat([p.to(F64) for p in parts])
        if self.core.groups[0] is GROUPS["moments"] and raw.is_cpu:
            raw[:, 0], raw[:, 1] = self._spread(raw[:, 0], raw[:, 1])
        return raw

    def _spread(self, total: Tensor, squares: Tensor) -> tuple[Tensor, Tensor]:
        # `cpu_moments` row by row: mean from the sum (identical), the spread from
        # dot/n - mean**2 unless that cancels, then from the two-pass norm.
        n = host_tensor(self.numels)
        mean = total / n
        square_mean = squares / n
        var = square_mean - mean * mean
        good = (0.25 * square_mean <= var) & (var < INF)
        std = var.sqrt()
        bad = (~good).nonzero().view(-1).tolist()  # a host read, free on the CPU
        if not bad:
            return mean, std
        start = 0
        for x in self.matrices:
            k, n_x = x.shape
            end = start + k
            if bad and bad[0] < end:
                rows = slice(start, end)
                while bad and bad[0] < end:
                    bad.pop(0)
                centre = x.mean(1, keepdim=True)
                spread = torch.linalg.vector_norm(x - centre, dim=1).to(F64) / math.sqrt(n_x)
                keep = good[rows]
                mean[rows] = torch.where(keep, mean[rows], centre.view(-1).to(F64))
                std[rows] = torch.where(keep, std[rows], spread)
            start = end
        return mean, std
