"""`Stats`: the statistics of one tensor, kept on its device until read."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from .._validate import check_type
from ..errors import NotRecordedError
from ._kernels import F64, host_tensor
from ._layout import Layout
from ._spec import Histogram

__all__ = ["Stats"]

_CPU = torch.device("cpu")


class Stats:
    """Statistics of one tensor, still on the tensor's device.

    Reading a statistic (`stats["rms"]`) gives a 0-d float64 tensor on the device without
    waiting for it; `to_dict()` and `repr` copy to the host (and so wait). To read many
    `Stats` at once use `stats_table`, which is much faster than calling `to_dict` on each.

    Attributes:
        layout: the `Layout` describing `raw`; shared by all `Stats` from the same `StatsFn`.
        raw: 1-D float64 tensor on the tensor's device, the numbers the statistics derive from.
        numel: the tensor's number of elements.

    Example:
        >>> s = compute(torch.tensor([3.0, -4.0]))
        >>> s["rms"]
        tensor(3.5355, dtype=torch.float64)
        >>> s.to_dict()["abs_max"]
        4.0
    """

    __slots__ = ("_floats", "_raw", "layout", "numel", "vectors")

    def __init__(
        self, layout: Layout, raw: Tensor, numel: int, vectors: tuple[Tensor, ...] = ()
    ) -> None:
        self.layout = layout
        self._raw: Tensor | None = raw
        self._floats: list[float] | None = None
        self.numel = numel
        self.vectors = vectors
        """The vectors of `layout.vectors` (`per_channel`, `per_sample`), in order: 1-D
        float64 tensors on the device."""

    @classmethod
    def _of_floats(
        cls, layout: Layout, floats: list[float], numel: int, vectors: tuple[Tensor, ...] = ()
    ) -> Stats:
        # CPU statistics arrive as host floats; the raw tensor is built when first read,
        # which keeps that cost out of the hooks.
        stats = cls.__new__(cls)
        stats.layout, stats._raw, stats._floats, stats.numel = layout, None, floats, numel
        stats.vectors = vectors
        return stats

    @property
    def raw(self) -> Tensor:
        """1-D float64 tensor on the tensor's device: what the statistics derive from."""
        raw = self._raw
        if raw is None:
            assert self._floats is not None
            raw = self._raw = host_tensor(self._floats)
            self._floats = None
        return raw

    @property
    def device(self) -> torch.device:
        """The device the statistics are on (that of the tensor they describe)."""
        return _CPU if self._raw is None else self._raw.device

    def _host_values(self) -> list[float]:
        # The raw numbers as host floats, without building a tensor for CPU statistics.
        return self._floats if self._floats is not None else self.raw.tolist()

    def __reduce__(self) -> tuple[Any, ...]:
        return (Stats, (self.layout, self.raw, self.numel, self.vectors))

    @property
    def names(self) -> tuple[str, ...]:
        """The statistic names held, in the order they were asked for."""
        return self.layout.names

    @property
    def nbytes(self) -> int:
        """Bytes of device memory held (the raw vector, and the vectors per channel or
        sample)."""
        return self.layout.width * 8 + sum(len(v) for v in self.vectors) * 8

    def __getitem__(self, name: str) -> Tensor:
        """One statistic, as a 0-d float64 tensor on the device (1-D for histogram counts
        and for statistics per channel or per sample).

        Raises:
            KeyError: `name` is not held; the message lists the names that are.
        """
        if name in self.layout.vectors:
            return self.vectors[self.layout.vectors.index(name)]
        derive = self.layout._derive(name)
        numel = torch.full((1,), float(self.numel), dtype=F64, device=self.raw.device)
        return derive(self.raw.unsqueeze(0), numel)[0]

    def __contains__(self, name: object) -> bool:
        return name in self.layout or name in self.layout.vectors

    def __iter__(self) -> Iterator[str]:
        return iter(self.layout.names)

    def __len__(self) -> int:
        return len(self.layout.names)

    def to_dict(self) -> dict[str, Any]:
        """Copy to the host: `{name: float}`, with a list of floats for histogram counts
        and for statistics per channel or per sample.

        Example:
            >>> compute(torch.tensor([1.0, 2.0]), ["max", "numel"]).to_dict()
            {'max': 2.0, 'numel': 2.0}
        """
        raw = self.raw.detach().to("cpu", F64).unsqueeze(0)
        numel = torch.tensor([float(self.numel)], dtype=F64)
        out = {k: v[0].tolist() for k, v in self.layout.derive(raw, numel).items()}
        for name, vector in zip(self.layout.vectors, self.vectors, strict=True):
            out[name] = vector.tolist()
        return out

    def edges(self, name: str) -> tuple[float, ...]:
        """The bin edges of histogram `name` (`bins + 1` values; log2 units if `is_log2`).

        Raises:
            KeyError: `name` is not a histogram held here.

        Example:
            >>> s = compute(torch.ones(3), [histogram(bins=2, range=(-1.0, 1.0))])
            >>> s.edges("hist"), s.is_log2("hist"), s["hist"]
            ((-1.0, 0.0, 1.0), True, tensor([0., 3.], dtype=torch.float64))
        """
        check_type(name, str, "edges(name)", "a histogram's name (str)")
        return self._histogram(name).edges

    def is_log2(self, name: str) -> bool:
        """Whether histogram `name` bins log2|x| (`True`) or x (`False`).

        Raises:
            KeyError: `name` is not a histogram held here.
        """
        return self._histogram(name).log2

    def _histogram(self, name: str) -> Histogram:
        hist = self.layout.histograms.get(name)
        if hist is None:
            held = ", ".join(self.layout.histograms) or "none"
            raise NotRecordedError(f"{name!r} is not a histogram here; histograms: {held}")
        return hist

    def __repr__(self) -> str:
        items = []
        integral = self.layout._integral
        for name, value in self.to_dict().items():
            if isinstance(value, list):
                unit = "values" if name in self.layout.vectors else "bins"
                items.append(f"{name}=<{len(value)} {unit}>")
            elif name in integral and math.isfinite(value):
                items.append(f"{name}={int(value)}")
            else:
                items.append(f"{name}={value:.4g}")
        return f"Stats({', '.join(items)})"
