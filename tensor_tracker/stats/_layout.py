"""`Layout`: which statistics a raw vector holds, and how to derive them from it."""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..errors import NotRecordedError
from ._kernels import F64

if TYPE_CHECKING:
    from ._spec import AttentionLogits, Blocks, CustomName, Histogram, PerAxis

__all__ = ["Derive", "Layout", "column"]

Derive = Callable[[Tensor, Tensor], Tensor]
"""Maps a batch `(raw [N, width], numel [N])` to a statistic `[N]` (`[N, bins]` for a
histogram's counts)."""


def column(i: int) -> Derive:
    """The deriver that reads slot `i` as it is."""
    return lambda raw, numel: raw[:, i]


class Layout:
    """Which statistics a raw vector holds, and how to derive them from it.

    All `Stats` made by one `StatsFn` share the same `Layout` object, which is what lets
    `stats_table` stack their raw vectors and derive each column once for all of them.
    Immutable; compare layouts by identity.

    Attributes:
        names: the public statistic names, in the order they were asked for.
        width: the length of the raw vector.
        histograms: the `Histogram` configurations by name (empty when there are none).

    Example:
        >>> fn = parse(["rms", "mean"])
        >>> fn.layout, fn.layout.names
        (Layout(['rms', 'mean'], width=2), ('rms', 'mean'))
        >>> fn(torch.ones(3)).layout is fn(torch.zeros(3)).layout   # so they stack
        True
    """

    __slots__ = (
        "_derivers",
        "_empty_runs",
        "_empty_values",
        "_histograms",
        "_integral",
        "_names",
        "_spec",
        "_vectors",
        "_width",
    )

    def __init__(
        self,
        names: tuple[str, ...],
        derivers: dict[str, Derive],
        empty: tuple[float, ...],
        histograms: dict[str, Histogram],
        integral: frozenset[str],
        spec: tuple[str | Histogram | Blocks | CustomName | PerAxis | AttentionLogits, ...] = (),
        vectors: tuple[str, ...] = (),
    ) -> None:
        self._spec = spec
        self._vectors = vectors
        self._names = names
        self._derivers = derivers
        # Runs of equal values, so the raw vector of an empty tensor is built by a few fills.
        runs: list[tuple[int, int, float]] = []
        for i, value in enumerate(empty):
            if runs and (runs[-1][2] == value or (math.isnan(value) and math.isnan(runs[-1][2]))):
                runs[-1] = (runs[-1][0], i + 1, value)
            else:
                runs.append((i, i + 1, value))
        self._empty_runs = tuple(runs)
        self._empty_values = empty
        self._width = len(empty)
        self._histograms = types.MappingProxyType(histograms)
        self._integral = integral

    @property
    def names(self) -> tuple[str, ...]:
        """The public statistic names, in the order they were asked for."""
        return self._names

    @property
    def vectors(self) -> tuple[str, ...]:
        """The names of the statistics kept as one vector per tensor (`per_channel`,
        `per_sample`), in order; not part of the raw vector nor of `names`."""
        return self._vectors

    @property
    def spec(self) -> tuple[str | Histogram | Blocks | CustomName | PerAxis | AttentionLogits, ...]:
        """What the layout was built from: statistic names, `Histogram`s, and custom
        statistics by name (`CustomName`). A layout pickles as this spec (the derivers are
        closures); `stats.fn` registers how, being the module that builds layouts."""
        return self._spec

    @property
    def width(self) -> int:
        """The length of the raw vector of each `Stats` with this layout."""
        return self._width

    @property
    def histograms(self) -> Mapping[str, Histogram]:
        """The `Histogram` configurations held, by name."""
        return self._histograms

    def __contains__(self, name: object) -> bool:
        return name in self._derivers

    def derive(
        self, raw: Tensor, numel: Tensor, names: Iterable[str] | None = None
    ) -> dict[str, Tensor]:
        """Compute named statistics for a batch of raw vectors of this layout.

        Args:
            raw: float64 tensor `[N, width]`, one raw vector per row.
            numel: float64 tensor `[N]` with each row's element count, on `raw`'s device.
            names: which statistics (default: all of `names`).

        Returns:
            `{name: tensor [N]}` (`[N, bins]` for a histogram's counts), on `raw`'s device.

        Example:
            >>> fn = parse(["mean", "numel"])
            >>> s = fn(torch.ones(3))
            >>> fn.layout.derive(s.raw[None], torch.tensor([3.0], dtype=torch.float64))
            {'mean': tensor([1.], dtype=torch.float64), 'numel': tensor([3.], dtype=torch.float64)}
        """
        return {n: self._derive(n)(raw, numel) for n in (self._names if names is None else names)}

    def _derive(self, name: str) -> Derive:
        derive = self._derivers.get(name)
        if derive is None:
            raise NotRecordedError(
                f"{name!r} is not among these statistics; available: {', '.join(self._names)}"
            )
        return derive

    def _empty_raw(self, device: torch.device) -> Tensor:
        # Fills pass the value as a kernel argument; copying a host tensor would be a
        # host-to-device transfer, which can synchronise.
        raw = torch.empty(self._width, dtype=F64, device=device)
        for start, stop, value in self._empty_runs:
            raw[start:stop] = value
        return raw

    def __repr__(self) -> str:
        return f"Layout({list(self._names)}, width={self._width})"
