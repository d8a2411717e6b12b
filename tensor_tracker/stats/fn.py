"""The statistics engine: specs, kernels, `Stats`, `StatsFn` and `stats_table` (the
package docstring, `tensor_tracker.stats`, describes the statistics)."""

from __future__ import annotations

import array
import dataclasses
import math
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeAlias

import torch
from torch import Tensor

from ..core.memo import LastTensorMemo
from .formats import FORMATS

__all__ = [
    "DEFAULT",
    "NAMES",
    "Histogram",
    "Layout",
    "Spec",
    "Statistic",
    "Stats",
    "StatsFn",
    "compute",
    "histogram",
    "parse",
    "stats_table",
]

_F64 = torch.float64
_F32_BIAS = 127
_INF = math.inf
_NAN = math.nan

_BASE_NAMES = (
    "mean",
    "std",
    "rms",
    "abs_mean",
    "abs_max",
    "min",
    "max",
    "numel",
    "nonfinite",
    "zero_frac",
)
_FORMAT_KINDS = ("overflow", "underflow", "subnormal")

NAMES: tuple[str, ...] = _BASE_NAMES + tuple(f"{f}_{k}" for f in FORMATS for k in _FORMAT_KINDS)
"""Every built-in statistic name, in a stable order."""

DEFAULT: tuple[str, ...] = ("mean", "std", "rms", "abs_max", "min", "max", "numel")
"""What `stats=True` computes: mean/spread and min/max, two reductions on a GPU (`std_mean`,
`aminmax`) and three vectorised passes on the CPU (`sum`, `dot`, `aminmax`)."""

_HIST_EXTRAS = ("below", "above", "zero", "nonfinite", "rejected")

# Maps a result `(raw [N, width], numel [N]) -> [N]` (or `[N, bins]` for a histogram).
_Derive = Callable[[Tensor, Tensor], Tensor]


# --------------------------------------------------------------------------------------
# Spec items


@dataclasses.dataclass(frozen=True)
class Statistic:
    """A user-defined statistic: a name and a function of the tensor.

    The function gets the tensor detached from autograd, in its own dtype and on its own
    device, and should return a one-element tensor on that device; that result is kept on
    the device like the built-in statistics (no host sync). Returning a Python number works
    too, but forces the hook to wait for the device to compute it, so it is slower.
    It is not called for empty tensors (the statistic is NaN there).

    Usually you do not build one yourself: pass `("name", fn)` or a named function in a
    stats spec and `parse` makes the `Statistic`.

    Args:
        name: the statistic's name, used as column name and for `stats[name]`.
        fn: `fn(tensor) -> Tensor | float`, computing one number.

    Example:
        >>> fn = parse(["mean", Statistic("l1", lambda t: t.abs().sum())])
        >>> fn(torch.tensor([1.0, -3.0]))["l1"]
        tensor(4., dtype=torch.float64)
    """

    name: str
    fn: Callable[[Tensor], Any]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a statistic's name must be a non-empty str, got {self.name!r}")
        if not callable(self.fn):
            raise TypeError(f"statistic {self.name!r}: fn must be callable, got {self.fn!r}")


@dataclasses.dataclass(frozen=True)
class Histogram:
    """Configuration of a fixed-bin histogram statistic; make one with `histogram()`.

    Attributes:
        bins: number of bins.
        range: `(lo, hi)` of the binned axis: log2|x| when `log2`, else x.
        log2: bins equally spaced in log2|x| (zeros counted apart) instead of in x.
        sample_n: count a random sample of this many values instead of all of them.
        reject_sigma: leave out values further than this many standard deviations from the
            mean (counted as rejected).
        seed: seed of the sampling generator.
        name: name of the counts; the extra counts are `name + "_below"`, `"_above"`,
            `"_zero"`, `"_nonfinite"` and `"_rejected"`.

    Example:
        >>> h = histogram(bins=3, range=(-3.0, 0.0))
        >>> h.edges, h.names[:2]
        ((-3.0, -2.0, -1.0, 0.0), ('hist', 'hist_below'))
    """

    bins: int = 48
    range: tuple[float, float] = (-32.0, 16.0)
    log2: bool = True
    sample_n: int | None = None
    reject_sigma: float | None = None
    seed: int = 0
    name: str = "hist"

    def __post_init__(self) -> None:
        if not isinstance(self.bins, int) or isinstance(self.bins, bool) or self.bins < 1:
            raise ValueError(f"histogram(bins=...) must be an int >= 1, got {self.bins!r}")
        rng = self.range
        if (
            not isinstance(rng, (tuple, list))
            or len(rng) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in rng)
            or not all(math.isfinite(v) for v in rng)
            or not rng[0] < rng[1]
        ):
            raise ValueError(
                f"histogram(range=...) must be (lo, hi) with finite lo < hi, got {rng!r}"
            )
        object.__setattr__(self, "range", (float(rng[0]), float(rng[1])))
        if self.sample_n is not None and (
            not isinstance(self.sample_n, int)
            or isinstance(self.sample_n, bool)
            or self.sample_n < 1
        ):
            raise ValueError(
                f"histogram(sample_n=...) must be a positive int or None, got {self.sample_n!r}"
            )
        if self.reject_sigma is not None and (
            not isinstance(self.reject_sigma, (int, float))
            or isinstance(self.reject_sigma, bool)
            or not (0 < self.reject_sigma < _INF)
        ):
            raise ValueError(
                "histogram(reject_sigma=...) must be a positive number or None, "
                f"got {self.reject_sigma!r}"
            )
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValueError(f"histogram(seed=...) must be an int, got {self.seed!r}")
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"histogram(name=...) must be a non-empty str, got {self.name!r}")

    @property
    def edges(self) -> tuple[float, ...]:
        """The `bins + 1` bin edges, in log2 units when `log2` (so 2**edge in value units).

        Bin `i` holds the values with `edges[i] <= log2|x| < edges[i+1]` (or `x` in place of
        `log2|x|` when not `log2`).
        """
        lo, hi = self.range
        # hi is set exactly: the formula can land an ulp off it.
        return (*(lo + (hi - lo) * i / self.bins for i in range(self.bins)), hi)

    @property
    def names(self) -> tuple[str, ...]:
        """The names this histogram adds: the counts, then the extra counts."""
        return (self.name, *(f"{self.name}_{e}" for e in _HIST_EXTRAS))


def histogram(
    bins: int = 48,
    range: tuple[float, float] = (-32.0, 16.0),
    log2: bool = True,
    sample_n: int | None = None,
    reject_sigma: float | None = None,
    seed: int = 0,
    name: str = "hist",
) -> Histogram:
    """A histogram with fixed bins, to use as an item of a stats spec.

    With `log2=True` (the default) the bins are equally spaced in log2|x| over `range`, so
    the default counts magnitudes from 2**-32 to 2**16 in one bin per power of two (binade),
    the scale that matters for number formats; zeros are counted apart (`<name>_zero`), as log2(0) is undefined. With
    `log2=False` the bins are equally spaced in x itself and zeros fall in their bin
    (`<name>_zero` stays 0). Every value counted lands in exactly one of: a bin,
    `<name>_below` / `<name>_above` (finite but outside `range`), `<name>_zero`,
    `<name>_nonfinite` (NaN, ±inf) or `<name>_rejected`, so these add up to the number of
    values counted. Bins are half-open, `[edge[i], edge[i+1])`.

    The counting stays on the tensor's device (no host sync). One bin per binade (`log2`,
    integer `range` ends, `bins == hi - lo`, no `reject_sigma`) is the fast case: the bin of
    a float32 value is its exponent field, so no search over the edges is needed. Read the counts with
    `stats[name]` (a 1-D float64 tensor of length `bins`), the extras with
    `stats[name + "_below"]` etc., and the bin edges with `stats.edges(name)`.

    Args:
        bins: number of bins.
        range: `(lo, hi)`: the binned interval, in log2 units when `log2`.
        log2: bin log2|x| rather than x.
        sample_n: count only this many values, drawn at random (uniformly, with replacement,
            from a generator seeded with `seed`, one per device), when the tensor holds more.
            Drawing without replacement would cost a pass over the whole tensor, which is
            what sampling is meant to avoid. `None` counts every value.
        reject_sigma: leave out of the bins the finite values with
            `|x - mean| > reject_sigma * std` (mean and population std of the finite values
            counted, computed on the device) and count them in `<name>_rejected`.
        seed: seed of the sampling generators, so runs are reproducible.
        name: name of the counts, and prefix of the extra counts.

    Returns:
        A `Histogram` to put in a stats spec, e.g. `parse(["rms", histogram()])`.

    Raises:
        ValueError: when an argument is out of its domain (the message names it).

    Example:
        >>> fn = parse(["rms", histogram(bins=4, range=(-2.0, 2.0))])
        >>> s = fn(torch.tensor([0.0, 0.3, 1.0, 3.0, 100.0]))
        >>> s["hist"], s.edges("hist")
        (tensor([1., 0., 1., 1.], dtype=torch.float64), (-2.0, -1.0, 0.0, 1.0, 2.0))
        >>> s["hist_zero"], s["hist_above"]
        (tensor(1., dtype=torch.float64), tensor(1., dtype=torch.float64))
    """
    return Histogram(bins, range, log2, sample_n, reject_sigma, seed, name)


# --------------------------------------------------------------------------------------
# Layout: where each statistic sits in the raw vector and how to derive it


@dataclasses.dataclass(frozen=True)
class _CustomName:
    """A custom statistic in a pickled layout: its name (its function is not needed to read
    what it computed, and may not be picklable)."""

    name: str


def _not_recomputable(tensor: Tensor) -> Tensor:
    raise RuntimeError(
        "this StatsFn was rebuilt from pickled statistics to read them; its custom "
        "statistics' functions were not saved"
    )


_UNPICKLED_LAYOUTS: dict[tuple[str | Histogram | _CustomName, ...], Layout] = {}


def _layout_from_spec(spec: tuple[str | Histogram | _CustomName, ...]) -> Layout:
    """The layout of a pickled `Stats`: one per spec, so unpickled stats batch together."""
    layout = _UNPICKLED_LAYOUTS.get(spec)
    if layout is None:
        items = [
            Statistic(i.name, _not_recomputable) if isinstance(i, _CustomName) else i for i in spec
        ]
        layout = _UNPICKLED_LAYOUTS[spec] = StatsFn(items).layout
    return layout


class Layout:
    """Which statistics a raw vector holds, and how to derive them from it.

    All `Stats` made by one `StatsFn` share the same `Layout` object, which is what lets
    `stats_table` stack their raw vectors and derive each column once for all of them.
    Immutable; compare layouts by identity.

    Attributes:
        names: the public statistic names, in the order they were asked for.
        width: the length of the raw vector.
        histograms: the `Histogram` configurations by name (empty when there are none).
    """

    __slots__ = (
        "_derivers",
        "_empty_runs",
        "_histograms",
        "_integral",
        "_names",
        "_spec",
        "_width",
    )

    def __init__(
        self,
        names: tuple[str, ...],
        derivers: dict[str, _Derive],
        empty: tuple[float, ...],
        histograms: dict[str, Histogram],
        integral: frozenset[str],
        spec: tuple[str | Histogram | _CustomName, ...] = (),
    ) -> None:
        self._spec = spec
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
        self._width = len(empty)
        self._histograms = types.MappingProxyType(histograms)
        self._integral = integral

    @property
    def names(self) -> tuple[str, ...]:
        """The public statistic names, in the order they were asked for."""
        return self._names

    def __reduce__(self) -> tuple[Any, ...]:
        # The derivers are closures; a layout pickles as the spec that rebuilds it.
        return (_layout_from_spec, (self._spec,))

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

    def _derive(self, name: str) -> _Derive:
        derive = self._derivers.get(name)
        if derive is None:
            raise KeyError(
                f"{name!r} is not among these statistics; available: {', '.join(self._names)}"
            )
        return derive

    def _empty_raw(self, device: torch.device) -> Tensor:
        # Fills pass the value as a kernel argument; copying a host tensor would be a
        # host-to-device transfer, which can synchronise.
        raw = torch.empty(self._width, dtype=_F64, device=device)
        for start, stop, value in self._empty_runs:
            raw[start:stop] = value
        return raw

    def __repr__(self) -> str:
        return f"Layout({list(self._names)}, width={self._width})"


# --------------------------------------------------------------------------------------
# Stats


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

    __slots__ = ("_floats", "_raw", "layout", "numel")

    def __init__(self, layout: Layout, raw: Tensor, numel: int) -> None:
        self.layout = layout
        self._raw: Tensor | None = raw
        self._floats: list[float] | None = None
        self.numel = numel

    @classmethod
    def _of_floats(cls, layout: Layout, floats: list[float], numel: int) -> Stats:
        # CPU statistics arrive as host floats; the raw tensor is built when first read,
        # which keeps that cost out of the hooks.
        stats = cls.__new__(cls)
        stats.layout, stats._raw, stats._floats, stats.numel = layout, None, floats, numel
        return stats

    @property
    def raw(self) -> Tensor:
        """1-D float64 tensor on the tensor's device: what the statistics derive from."""
        raw = self._raw
        if raw is None:
            assert self._floats is not None
            raw = self._raw = _host_tensor(self._floats)
            self._floats = None
        return raw

    @raw.setter
    def raw(self, raw: Tensor) -> None:  # (unpickling Stats saved by older versions)
        self._raw, self._floats = raw, None

    def __reduce__(self) -> tuple[Any, ...]:
        return (Stats, (self.layout, self.raw, self.numel))

    @property
    def names(self) -> tuple[str, ...]:
        """The statistic names held, in the order they were asked for."""
        return self.layout.names

    @property
    def nbytes(self) -> int:
        """Bytes of device memory held (the raw vector)."""
        return self.layout.width * 8

    def __getitem__(self, name: str) -> Tensor:
        """One statistic, as a 0-d float64 tensor on the device (1-D for histogram counts).

        Raises:
            KeyError: `name` is not held; the message lists the names that are.
        """
        derive = self.layout._derive(name)
        numel = torch.full((1,), float(self.numel), dtype=_F64, device=self.raw.device)
        return derive(self.raw.unsqueeze(0), numel)[0]

    def __contains__(self, name: object) -> bool:
        return name in self.layout

    def __iter__(self) -> Iterator[str]:
        return iter(self.layout.names)

    def __len__(self) -> int:
        return len(self.layout.names)

    def to_dict(self) -> dict[str, Any]:
        """Copy to the host: `{name: float}`, with a list of floats for histogram counts.

        Example:
            >>> compute(torch.tensor([1.0, 2.0]), ["max", "numel"]).to_dict()
            {'max': 2.0, 'numel': 2.0}
        """
        raw = self.raw.detach().to("cpu", _F64).unsqueeze(0)
        numel = torch.tensor([float(self.numel)], dtype=_F64)
        return {k: v[0].tolist() for k, v in self.layout.derive(raw, numel).items()}

    def edges(self, name: str) -> tuple[float, ...]:
        """The bin edges of histogram `name` (`bins + 1` values; log2 units if `is_log2`).

        Raises:
            KeyError: `name` is not a histogram held here.

        Example:
            >>> s = compute(torch.ones(3), [histogram(bins=2, range=(-1.0, 1.0))])
            >>> s.edges("hist"), s.is_log2("hist"), s["hist"]
            ((-1.0, 0.0, 1.0), True, tensor([0., 3.], dtype=torch.float64))
        """
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
            raise KeyError(f"{name!r} is not a histogram here; histograms: {held}")
        return hist

    def __repr__(self) -> str:
        items = []
        integral = self.layout._integral
        for name, value in self.to_dict().items():
            if isinstance(value, list):
                items.append(f"{name}=<{len(value)} bins>")
            elif name in integral and math.isfinite(value):
                items.append(f"{name}={int(value)}")
            else:
                items.append(f"{name}={value:.4g}")
        return f"Stats({', '.join(items)})"


# --------------------------------------------------------------------------------------
# Hot-path helpers (no host synchronisation in any of them)


_COMPUTE_DTYPE: dict[torch.dtype, torch.dtype | None] = {
    torch.float32: None,
    torch.float64: None,
}


def _compute_dtype(dtype: torch.dtype) -> torch.dtype | None:
    """The dtype to reduce in, or None for the tensor's own dtype."""
    try:
        return _COMPUTE_DTYPE[dtype]
    except KeyError:
        # Low-precision floats would overflow in the squares and lose the sums; integers
        # and bools have no float reductions at all.
        result = torch.float32 if dtype.is_floating_point else _F64
        _COMPUTE_DTYPE[dtype] = result
        return result


def _lower_thresholds(keys: Sequence[tuple[float, bool]], dtype: torch.dtype) -> Tensor:
    """For each `(v, strict)`: the largest `dtype` value `<= v` (`< v` when strict).

    With these as `torch.bucketize(a, B)` boundaries (`right=False`), bucket `k` holds
    `B[k-1] < a <= B[k]`, so the buckets up to `k` count exactly `a <= v` (or `a < v`) in
    `dtype` arithmetic, whatever the rounding of `v`. NaN lands past the last boundary.
    """
    values = torch.tensor([k[0] for k in keys], dtype=_F64)
    strict = torch.tensor([k[1] for k in keys])
    t = values.to(dtype)
    back = t.to(_F64)
    too_big = torch.where(strict, back >= values, back > values)
    return torch.where(too_big, torch.nextafter(t, torch.full_like(t, -_INF)), t)


class _Thresholds:
    """Boundary tensors per (device, dtype), built once; hooks only look them up."""

    __slots__ = ("_cache", "_keys")

    def __init__(self, keys: Sequence[tuple[float, bool]]) -> None:
        self._keys = tuple(keys)
        self._cache: dict[tuple[torch.device, torch.dtype], Tensor] = {}

    def get(self, x: Tensor) -> Tensor:
        key = (x.device, x.dtype)
        bounds = self._cache.get(key)
        if bounds is None:
            # non_blocking: a blocking host-to-device copy is a synchronisation on CUDA.
            bounds = _lower_thresholds(self._keys, x.dtype).to(x.device, non_blocking=True)
            self._cache[key] = bounds
        return bounds


_ONES: dict[torch.device, Tensor] = {}


def _count_buckets(idx: Tensor, nb: int) -> Tensor:
    """`bincount(idx, minlength=nb)` as float64, without host synchronisation."""
    flat = idx.reshape(-1)
    if flat.is_cpu:
        return torch.bincount(flat, minlength=nb).to(_F64)
    if flat.is_cuda and not torch.are_deterministic_algorithms_enabled():
        # CUDA bincount reads min/max back to the host to size its output; histc with a
        # fixed range does not, and counts in shared memory (float64: exact to 2**53).
        return torch.histc(flat.to(_F64), bins=nb, min=0, max=nb)
    # histc refuses to run in deterministic mode; index_add_ has a deterministic path.
    ones = _ONES.get(flat.device)
    if ones is None:
        ones = _ONES[flat.device] = torch.ones((), dtype=_F64, device=flat.device)
    out = torch.zeros(nb, dtype=_F64, device=flat.device)
    return out.index_add_(0, flat, ones.expand(flat.numel()))


class _Core:
    """The built-in statistics' raw computation: one float64 vector from a few passes."""

    __slots__ = ("abs_sum", "minmax", "moments", "nb", "nonfinite", "nonzero", "range")

    def __init__(
        self,
        moments: bool,
        minmax: bool,
        abs_sum: bool,
        nonfinite: bool,
        nonzero: bool,
        range_: _Thresholds | None,
    ) -> None:
        self.moments = moments
        self.minmax = minmax
        self.abs_sum = abs_sum
        self.nonfinite = nonfinite
        self.nonzero = nonzero
        self.range = range_
        self.nb = 0 if range_ is None else len(range_._keys) + 1

    def device_raw(self, x: Tensor, bounds: Tensor | None) -> Tensor:
        """The raw vector of `x` (1-D, in its reduction dtype; see `_flat`) as a float64
        tensor on `x`'s device, computed without waiting for the device (what
        `compile=True` compiles)."""
        # Accelerators: every result stays on the device, so nothing here waits for it.
        scalars: list[Tensor] = []
        if self.moments:
            std, mean = torch.std_mean(x, correction=0)
            scalars += (mean, std)
        if self.minmax:
            scalars += torch.aminmax(x)
        if self.abs_sum:
            scalars.append(torch.linalg.vector_norm(x, 1))
        if self.nonfinite:
            # x - x is 0 for finite values and NaN otherwise; bool reductions are slower.
            scalars.append(torch.count_nonzero(x - x).to(_F64))
        if self.nonzero:
            scalars.append(torch.count_nonzero(x).to(_F64))
        head = torch.stack(scalars).to(_F64) if scalars else None
        if bounds is None:
            assert head is not None  # a _Core always computes something
            return head
        counts = self._range_counts(x, bounds)
        return counts if head is None else torch.cat((head, counts))

    def host_raw(self, x: Tensor, bounds: Tensor | None) -> list[float] | Tensor:
        """`device_raw` for a CPU tensor, as a list of floats when there are no counts.

        On the CPU an op has finished when it returns, so reading a result back waits for
        nothing. That lets the moments take one pass fewer (see `_cpu_moments`), and a list
        of floats is cheaper to keep than a tensor (`Stats` builds one when it is read).
        """
        values: list[float] = []
        if self.moments:
            values += _cpu_moments(x)
        if self.minmax:
            lo, hi = torch.aminmax(x)
            values += (lo.item(), hi.item())
        if self.abs_sum:
            # The fused 1-norm kernel is ~4x slower on CPU than abs + sum.
            values.append(x.abs().sum().item())
        if self.nonfinite:
            values.append(float(torch.count_nonzero(x - x)))
        if self.nonzero:
            values.append(float(torch.count_nonzero(x)))
        if bounds is None:
            return values
        counts = self._range_counts(x, bounds)
        return torch.cat((_host_tensor(values), counts)) if values else counts

    def _range_counts(self, x: Tensor, bounds: Tensor) -> Tensor:
        # bucketize copies (and warns about) non-contiguous input; abs keeps x's strides.
        magnitude = x.abs().contiguous()
        return _count_buckets(torch.bucketize(magnitude, bounds, out_int32=True), self.nb)


def _host_tensor(values: list[float]) -> Tensor:
    """A float64 CPU tensor of `values` (several times faster than `torch.tensor`)."""
    return torch.frombuffer(array.array("d", values), dtype=_F64)


def _cpu_moments(x: Tensor) -> tuple[float, float]:
    """`(mean, std with correction=0)` of a 1-D float32/float64 CPU tensor.

    CPU `var_mean`/`std_mean` are a scalar Welford loop (~10x slower than a vectorised
    pass), so this takes `sum(x)` and `dot(x, x)` (two vectorised passes, no temporary) and
    `var = dot/n - mean**2`. That subtraction cancels the leading bits the two terms share:
    when `mean**2` is more than 3 times `var` (under a quarter of `dot/n` remains), the
    classic two-pass `norm(x - mean)` is computed instead, so the result never has more than
    4 times the sums' own relative error (NaN, inf and overflowing squares take that path
    too).
    """
    n = x.numel()
    mean = x.sum().item() / n
    square_mean = torch.dot(x, x).item() / n
    var = square_mean - mean * mean
    if 0.25 * square_mean <= var < _INF:  # also false for NaN, and for squares overflowing
        return mean, math.sqrt(var)
    centre = x.mean()
    return centre.item(), torch.linalg.vector_norm(x - centre).item() / math.sqrt(n)


def _flat(x: Tensor) -> Tensor:
    """`x`'s elements as a 1-D tensor in memory order: a view when `x` is dense in some
    order of its dimensions (contiguous, transposed, permuted), otherwise a contiguous copy.
    Statistics do not depend on the order of the elements, so e.g. attention outputs, which
    are transposed, need no copy."""
    if x.is_contiguous():
        return x.view(-1)
    expected = 1
    for stride, size in sorted(zip(x.stride(), x.shape)):
        if size != 1:
            if stride != expected:
                return x.contiguous().view(-1)
            expected *= size
    return x.as_strided((x.numel(),), (1,))


class _HistogramFn:
    """One histogram's raw counts; owns its per-device generators and thresholds."""

    __slots__ = ("_generators", "binade_offset", "bins", "config", "nb", "thresholds")

    def __init__(self, config: Histogram) -> None:
        self.config = config
        self.bins = config.bins
        # Bucket order: [zero | -inf, below, bins..., above, nonfinite | +inf&NaN, rejected]
        self.nb = config.bins + 5
        if config.log2:
            values = [_pow2(e) for e in config.edges]
            keys = [(0.0, False), *((v, True) for v in values), (_INF, True)]
        else:
            keys = [(-_INF, False), *((e, True) for e in config.edges), (_INF, True)]
        self.thresholds = _Thresholds(keys)
        self._generators: dict[torch.device, torch.Generator] = {}
        lo, hi = config.range
        # One bin per binade with integer edges inside float32's normal range: see _binades.
        binades = (
            config.log2
            and config.reject_sigma is None
            and lo == int(lo)
            and config.bins == hi - lo
            and lo >= -126
            and hi <= 127
        )
        self.binade_offset = int(_F32_BIAS + lo - 1) if binades else None

    def _binades_host(self, x: Tensor, offset: int) -> list[float]:
        """`_binades` of a 1-D contiguous CPU tensor as floats: one bincount over the 256
        exponent values, then summed up on the host instead of by a dozen tiny tensor ops."""
        exponent = x.view(torch.int32).bitwise_right_shift(23).bitwise_and_(255)
        counts = torch.bincount(exponent, minlength=256).tolist()
        zero = x.numel() - int(torch.count_nonzero(x))
        top = offset + 1 + self.bins
        return [
            zero,
            sum(counts[: offset + 1]) - zero,
            *counts[offset + 1 : top],
            sum(counts[top:255]),
            counts[255],
            0,
        ]

    def _binades(self, x: Tensor, offset: int) -> Tensor:
        """Counts from float32 exponent fields: a value in [2**(e-127), 2**(e-126)) has the
        biased exponent e, so its bin is e - 127 - lo. Zeros and subnormals have e = 0 and
        land below (zeros are then moved to their own count); NaN and ±inf have e = 255,
        which gets a bucket of its own."""
        bins = self.bins
        exponent = x.view(torch.int32).bitwise_right_shift(23).bitwise_and_(255)
        # 0: below, 1..bins: the bins, then above, and last (e = 255): NaN and ±inf.
        counts = _count_buckets(exponent.sub_(offset).clamp_(min=0), 256 - offset)
        zero = torch.count_nonzero(x).to(_F64).neg_().add_(x.numel())
        # Bucket order of the general path: zero, below, bins..., above, nonfinite, rejected.
        return torch.cat(
            (
                zero[None],
                counts[:1] - zero,
                counts[1 : bins + 1],
                counts[bins + 1 : -1].sum()[None],
                counts[-1:],
                torch.zeros(1, dtype=_F64, device=x.device),
            )
        )

    def _generator(self, device: torch.device) -> torch.Generator:
        gen = self._generators.get(device)
        if gen is None:
            gen = torch.Generator(device=device)
            gen.manual_seed(self.config.seed)
            self._generators[device] = gen
        return gen

    def __call__(self, x: Tensor, numel: int) -> Tensor | list[float]:
        """The raw counts of 1-D `x`: host floats on the CPU's fast path, else a tensor."""
        config = self.config
        values = x
        if config.sample_n is not None and numel > config.sample_n:
            index = torch.randint(
                numel, (config.sample_n,), generator=self._generator(x.device), device=x.device
            )
            values = torch.take(x, index)
        if self.binade_offset is not None and values.dtype == torch.float32:
            if values.is_cpu:
                return self._binades_host(values.contiguous(), self.binade_offset)
            return self._binades(values.contiguous(), self.binade_offset)
        keyed = (values.abs() if config.log2 else values).contiguous()
        idx = torch.bucketize(keyed, self.thresholds.get(values), out_int32=True)
        if config.reject_sigma is not None:
            finite = torch.isfinite(values)
            count = finite.sum()
            mean = torch.where(finite, values, 0.0).sum() / count
            centred = torch.where(finite, values - mean, 0.0)
            std = torch.linalg.vector_norm(centred) / count.sqrt()
            # Non-finite values have centred == 0, so they are never rejected.
            reject = centred.abs() > config.reject_sigma * std
            idx = torch.where(reject, self.nb - 1, idx)
        return _count_buckets(idx, self.nb)


def _pow2(e: float) -> float:
    # Clamped so thresholds stay ordered: 2**e underflows to 0.0 below -1074 and raises
    # OverflowError from 1024 up.
    if e >= 1024:
        return _INF
    return max(math.pow(2.0, e), 5e-324)


class _CustomFn:
    __slots__ = ("fn", "name")

    def __init__(self, stat: Statistic) -> None:
        self.fn = stat.fn
        self.name = stat.name

    def __call__(self, x: Tensor) -> Tensor:
        result = self.fn(x)
        if isinstance(result, Tensor):
            if result.numel() != 1:
                raise ValueError(
                    f"statistic {self.name!r} returned a tensor of shape {tuple(result.shape)}; "
                    "it must return a single number"
                )
            return result.detach().reshape(1).to(device=x.device, dtype=_F64)
        # torch.full passes the number as a kernel argument: no host-to-device copy.
        return torch.full((1,), float(result), dtype=_F64, device=x.device)


# --------------------------------------------------------------------------------------
# Spec parsing


def _bad_name_message(name: object, extra: str = "") -> str:
    return (
        f"stats=: unknown statistic {name!r}. Built-in names: {', '.join(NAMES)}. "
        'Custom statistics can be passed as ("name", fn) pairs, e.g. '
        'stats=["mean", ("l1", lambda t: t.abs().sum())], or histogram(...).' + extra
    )


def _items(spec: object) -> list[str | Statistic | Histogram]:
    if spec is None or spec is False:
        raise TypeError(
            f"stats={spec!r} means 'no statistics'; parse() needs something to compute: "
            "True (the default set), a name, or a list of names / ('name', fn) pairs"
        )
    if spec is True:
        return list(DEFAULT)
    if isinstance(spec, (str, Histogram, Statistic)):
        spec = [spec]
    if isinstance(spec, Mapping):
        return [Statistic(name, fn) for name, fn in spec.items()]
    if not isinstance(spec, Sequence):
        raise TypeError(
            "stats= must be True, a statistic name, a sequence of names / named functions / "
            f'("name", fn) pairs / histogram(...), or a {{"name": fn}} mapping; got {spec!r}'
        )
    hint = ""
    if len(spec) == 2 and isinstance(spec[0], str) and spec[0] not in NAMES and callable(spec[1]):
        hint = f" To pass one custom statistic, wrap the pair in a list: stats=[({spec[0]!r}, fn)]."
    items: list[str | Statistic | Histogram] = []
    for item in spec:
        if isinstance(item, str):
            if item not in NAMES:
                raise ValueError(_bad_name_message(item, hint))
            items.append(item)
        elif isinstance(item, (Statistic, Histogram)):
            items.append(item)
        elif isinstance(item, tuple):
            if len(item) != 2 or not isinstance(item[0], str) or not callable(item[1]):
                raise ValueError(f'stats=: expected a ("name", fn) pair, got {item!r}')
            items.append(Statistic(item[0], item[1]))
        elif callable(item):
            name = getattr(item, "__name__", None)
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(
                    f"stats=: cannot name the function {item!r}; pass it as a "
                    '("name", fn) pair, e.g. stats=[("l1", lambda t: t.abs().sum())]'
                )
            items.append(Statistic(name, item))
        else:
            raise ValueError(_bad_name_message(item))
    return items


# --------------------------------------------------------------------------------------
# StatsFn


class StatsFn:
    """A function `Tensor -> Stats` computing a fixed set of statistics; see `parse`.

    Calling it costs a few passes over the tensor on its device and never waits for the
    device. It remembers the last tensor it saw (by a weak reference): called again with
    the same tensor object, unchanged since (same in-place version counter), it returns the
    same `Stats` object without computing anything. Hooks see the same tensor many times,
    e.g. `nn.Sequential` returns its last child's output, and every module producing a
    tensor sees the same gradient of it.

    Args:
        spec: what to compute; see `parse`.
        compile: compute the built-in statistics through `torch.compile(dynamic=True)`; if
            compiling fails, warn once and compute eagerly. Off by default: on CPU it was
            not faster in our measurements, and compiling costs seconds per dtype and rank.

    Attributes:
        layout: the `Layout` shared by every `Stats` this function returns.

    Example:
        >>> fn = StatsFn(["mean", "abs_max"])
        >>> x = torch.tensor([1.0, -3.0])
        >>> fn(x).to_dict()
        {'mean': -1.0, 'abs_max': 3.0}
        >>> fn(x) is fn(x)
        True
    """

    __slots__ = (
        "_compiled",
        "_core",
        "_customs",
        "_hists",
        "_memo",
        "_range",
        "_spec_repr",
        "layout",
    )

    builtin_stash_value = True
    """Marks the library's own stash values: the tracker records what they cannot handle
    as `Unrecordable` instead of raising (a user's function raises as it likes)."""

    def __init__(self, spec: Spec = True, *, compile: bool = False) -> None:
        items = _items(spec)
        if not items:
            raise ValueError(
                "stats=: no statistics asked for; pass True for the default set "
                f"({', '.join(DEFAULT)}) or a list of names"
            )
        names: list[str] = []
        for item in items:
            names.extend(item.names if isinstance(item, Histogram) else [_name(item)])
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"stats=: statistic names must be unique; repeated: {duplicates}")

        builtin = {i for i in items if isinstance(i, str)}
        formats = {n for n in builtin if n not in _BASE_NAMES}
        # Format counts need one bucketing pass, which then also yields the zero and
        # non-finite counts for free; without it each of those is a cheaper pass of its own.
        keys = _range_keys(builtin) if formats else []
        core = _Core(
            moments=bool(builtin & {"mean", "std", "rms"}),
            minmax=bool(builtin & {"min", "max", "abs_max"}),
            abs_sum="abs_mean" in builtin,
            nonfinite="nonfinite" in builtin and not formats,
            nonzero="zero_frac" in builtin and not formats,
            range_=_Thresholds(keys) if keys else None,
        )
        derivers: dict[str, _Derive] = {}
        empty: list[float] = []
        # Scalars first, in _Core.__call__'s order.
        slot: dict[str, int] = {}
        for group, on, fill in (
            ("mean", core.moments, _NAN),
            ("std0", core.moments, _NAN),
            ("min", core.minmax, _NAN),
            ("max", core.minmax, _NAN),
            ("abs_sum", core.abs_sum, 0.0),
            ("nonfinite", core.nonfinite, 0.0),
            ("nonzero", core.nonzero, 0.0),
        ):
            if on:
                slot[group] = len(empty)
                empty.append(fill)
        _add_base_derivers(derivers, builtin, slot)
        if keys:
            _add_range_derivers(derivers, builtin, keys, offset=len(empty))
            empty.extend([0.0] * core.nb)
        has_core = bool(empty)

        customs: list[_CustomFn] = []
        hists: list[_HistogramFn] = []
        histograms: dict[str, Histogram] = {}
        for item in items:
            if isinstance(item, Statistic):
                derivers[item.name] = _column(len(empty))
                empty.append(_NAN)
                customs.append(_CustomFn(item))
        for item in items:
            if isinstance(item, Histogram):
                _add_hist_derivers(derivers, item, offset=len(empty))
                empty.extend([0.0] * (item.bins + 5))
                hists.append(_HistogramFn(item))
                histograms[item.name] = item

        integral = {"numel", "nonfinite"}
        for h in histograms.values():
            integral.update(h.names[1:])
        layout_spec = tuple(_CustomName(i.name) if isinstance(i, Statistic) else i for i in items)
        self.layout = Layout(
            tuple(names), derivers, tuple(empty), histograms, frozenset(integral), layout_spec
        )
        self._core: _Core | None = core if has_core else None
        self._range = core.range
        self._customs = tuple(customs)
        self._hists = tuple(hists)
        self._compiled: Callable[[Tensor, Tensor | None], Tensor] | None = None
        if compile and has_core:
            self._compiled = torch.compile(core.device_raw, dynamic=True)
        self._spec_repr = [i if isinstance(i, (str, Histogram)) else i.name for i in items]
        self._memo = LastTensorMemo(self._compute)

    @property
    def names(self) -> tuple[str, ...]:
        """The statistic names computed, in order."""
        return self.layout.names

    def __call__(self, tensor: Tensor) -> Stats:
        """Compute the statistics of `tensor` (on its device, detached from autograd).

        Args:
            tensor: any tensor; gradients, integer, bool and empty tensors included.

        Returns:
            A `Stats`; the very same object as last time when `tensor` is the same object
            as in the previous call and has not been modified in place since.
        """
        return self._memo(tensor)

    def _compute(self, tensor: Tensor) -> Stats:
        # Gradients seen in backward hooks need no detaching (one tensor object less).
        x = tensor.detach() if tensor.requires_grad else tensor
        if x.layout != torch.strided:
            # Sparse gradients (nn.Embedding(sparse=True)) and other layouts: the statistics
            # of the dense tensor they stand for, implicit zeros included.
            x = x.to_dense()
        numel = x.numel()
        if numel == 0:
            return Stats(self.layout, self.layout._empty_raw(x.device), 0)
        dtype = _compute_dtype(x.dtype)
        xc = _flat(x if dtype is None else x.to(dtype))
        # Each part is a tensor, or host floats from the CPU's fast paths; when all of them
        # are floats, no tensor is built until the statistics are read.
        parts: list[Tensor | list[float]] = []
        core = self._core
        if core is not None:
            bounds = None if self._range is None else self._range.get(xc)
            parts.append(self._core_raw(core, xc, bounds))
        for custom in self._customs:
            parts.append(custom(x))
        for hist in self._hists:
            parts.append(hist(xc, numel))
        floats: list[float] = []
        for part in parts:
            if not isinstance(part, list):
                break
            floats += part
        else:
            if floats:
                return Stats._of_floats(self.layout, floats, numel)
            # only "numel", which needs nothing from the device
            return Stats(self.layout, torch.empty(0, dtype=_F64, device=x.device), numel)
        tensors = [_host_tensor(p) if isinstance(p, list) else p for p in parts]
        raw = tensors[0] if len(tensors) == 1 else torch.cat(tensors)
        return Stats(self.layout, raw, numel)

    def _core_raw(self, core: _Core, x: Tensor, bounds: Tensor | None) -> list[float] | Tensor:
        if self._compiled is not None:
            try:
                return self._compiled(x, bounds)
            except Exception as error:
                warnings.warn(
                    f"torch.compile failed for statistics {list(self.layout.names)} "
                    f"({type(error).__name__}: {error}); computing them eagerly instead",
                    RuntimeWarning,
                    stacklevel=5,
                )
                self._compiled = None
        return core.host_raw(x, bounds) if x.is_cpu else core.device_raw(x, bounds)

    def __repr__(self) -> str:
        return f"StatsFn({self._spec_repr!r})"


_Item: TypeAlias = (
    str | Callable[[Tensor], Any] | tuple[str, Callable[[Tensor], Any]] | Statistic | Histogram
)

Spec: TypeAlias = bool | str | Sequence[_Item] | Mapping[str, Callable[[Tensor], Any]] | StatsFn
"""What `parse` accepts: `True` (the `DEFAULT` names), one name, a sequence of items (names,
named functions, `("name", fn)` pairs, `Statistic`, `histogram(...)`), a mapping
`{"name": fn}`, or a ready `StatsFn`."""


def _name(item: str | Statistic) -> str:
    return item if isinstance(item, str) else item.name


def _column(i: int) -> _Derive:
    return lambda raw, numel: raw[:, i]


def _add_base_derivers(derivers: dict[str, _Derive], names: set[str], slot: dict[str, int]) -> None:
    if "mean" in slot:
        m, s = slot["mean"], slot["std0"]
        # Welford (GPU) and the CPU moments both give a NaN spread as soon as one value is
        # non-finite, but the mean can come out ±inf or NaN depending on the order of
        # accumulation; report NaN consistently.
        derivers["mean"] = lambda r, n: torch.where(r[:, s].isnan(), r[:, s], r[:, m])
        derivers["std"] = lambda r, n: r[:, s] * torch.sqrt(n / (n - 1))
        derivers["rms"] = lambda r, n: torch.where(
            r[:, s].isnan(), r[:, s], torch.hypot(r[:, m], r[:, s])
        )
    if "min" in slot:
        lo, hi = slot["min"], slot["max"]
        derivers["min"] = _column(lo)
        derivers["max"] = _column(hi)
        derivers["abs_max"] = lambda r, n: torch.maximum(-r[:, lo], r[:, hi])
    if "abs_sum" in slot:
        a = slot["abs_sum"]
        derivers["abs_mean"] = lambda r, n: r[:, a] / n
    if "nonfinite" in slot:
        derivers["nonfinite"] = _column(slot["nonfinite"])
    if "nonzero" in slot:
        z = slot["nonzero"]
        derivers["zero_frac"] = lambda r, n: (n - r[:, z]) / n
    derivers["numel"] = lambda r, n: n
    for name in list(derivers):
        if name not in names:
            del derivers[name]


_ZERO = (0.0, False)
_FINITE = (_INF, True)
_NOT_NAN = (_INF, False)


def _range_keys(names: set[str]) -> list[tuple[float, bool]]:
    keys: set[tuple[float, bool]] = set()
    if "zero_frac" in names:
        keys.add(_ZERO)
    if "nonfinite" in names:
        keys.add(_FINITE)
    for key, f in FORMATS.items():
        if f"{key}_overflow" in names:
            keys.update(((f.max, False), _NOT_NAN))
        if f"{key}_underflow" in names:
            keys.update(((f.min_subnormal, True), _ZERO))
        if f"{key}_subnormal" in names:
            keys.update(((f.min_normal, True), _ZERO))
    # For equal values "< v" sits below "<= v".
    return sorted(keys, key=lambda k: (k[0], not k[1]))


def _add_range_derivers(
    derivers: dict[str, _Derive], names: set[str], keys: list[tuple[float, bool]], offset: int
) -> None:
    pos = {k: i for i, k in enumerate(keys)}

    def upto(key: tuple[float, bool]) -> Callable[[Tensor], Tensor]:
        # How many values satisfy |x| <= v (or < v): the buckets up to this boundary.
        end = offset + pos[key] + 1
        return lambda r: r[:, offset:end].sum(1)

    def between(lo: tuple[float, bool], hi: tuple[float, bool]) -> _Derive:
        below, above = upto(lo), upto(hi)
        return lambda r, n: (above(r) - below(r)) / n

    if "zero_frac" in names:
        zeros = upto(_ZERO)
        derivers["zero_frac"] = lambda r, n: zeros(r) / n
    if "nonfinite" in names:
        finite = upto(_FINITE)
        derivers["nonfinite"] = lambda r, n: n - finite(r)
    for key, f in FORMATS.items():
        if f"{key}_overflow" in names:
            derivers[f"{key}_overflow"] = between((f.max, False), _NOT_NAN)
        if f"{key}_underflow" in names:
            derivers[f"{key}_underflow"] = between(_ZERO, (f.min_subnormal, True))
        if f"{key}_subnormal" in names:
            derivers[f"{key}_subnormal"] = between(_ZERO, (f.min_normal, True))


def _add_hist_derivers(derivers: dict[str, _Derive], config: Histogram, offset: int) -> None:
    bins, name = config.bins, config.name
    first, below, above = offset, offset + 1, offset + bins + 2
    last, rejected = offset + bins + 3, offset + bins + 4
    derivers[name] = lambda r, n: r[:, below + 1 : above]
    derivers[f"{name}_below"] = _column(below)
    derivers[f"{name}_above"] = _column(above)
    derivers[f"{name}_rejected"] = _column(rejected)
    if config.log2:
        derivers[f"{name}_zero"] = _column(first)
        derivers[f"{name}_nonfinite"] = _column(last)
    else:
        derivers[f"{name}_zero"] = lambda r, n: torch.zeros_like(r[:, first])
        derivers[f"{name}_nonfinite"] = lambda r, n: r[:, first] + r[:, last]


# --------------------------------------------------------------------------------------
# Public entry points


def parse(spec: Spec, *, compile: bool = False) -> StatsFn:
    """Build the `StatsFn` for a stats spec (what a `stats=` argument accepts).

    Args:
        spec: one of
            - `True`: the `DEFAULT` set (mean, std, rms, abs_max, min, max, numel);
            - a name from `NAMES`, e.g. `"rms"`;
            - a sequence mixing names, named functions (`torch.median`, a `def`), `("name", fn)`
              pairs, `Statistic` objects and `histogram(...)`;
            - a mapping `{"name": fn}`;
            - a `StatsFn`, returned as is.
        compile: see `StatsFn`.

    Returns:
        A `StatsFn`; call it on tensors.

    Raises:
        ValueError: unknown or repeated names, an empty spec, or an unnamed function
            (e.g. a lambda: pass `("name", fn)`).
        TypeError: `False`/`None` (which mean "no statistics" to callers) or another type.

    Example:
        >>> fn = parse(["rms", ("l1", lambda t: t.abs().sum()), histogram(bins=8)])
        >>> fn.names[:3]
        ('rms', 'l1', 'hist')
    """
    if isinstance(spec, StatsFn):
        return spec
    return StatsFn(spec, compile=compile)


def compute(tensor: Tensor, names: Spec = DEFAULT) -> Stats:
    """Statistics of one tensor: `parse(names)(tensor)`, for one-off use.

    In a loop or a hook, build the `StatsFn` once with `parse` instead.

    Args:
        tensor: any tensor.
        names: a stats spec (see `parse`); the `DEFAULT` names when omitted.

    Returns:
        The tensor's `Stats`, still on its device.

    Example:
        >>> compute(torch.arange(4), ["mean", "max"]).to_dict()
        {'mean': 1.5, 'max': 3.0}
    """
    return parse(names)(tensor)


def stats_table(stats: Sequence[Stats]) -> dict[str, list[Any]]:
    """Read many `Stats` to the host at once, as columns.

    Groups the inputs by layout, stacks the raw vectors, copies each device's values to the
    host in one transfer and derives every column vectorised, so it stays fast for hundreds
    of thousands of `Stats` (use it rather than `to_dict` in a loop).

    Args:
        stats: `Stats` from any number of `StatsFn`s and devices.

    Returns:
        `{name: [value per input, in order]}`: Python floats (NaN where that `Stats` lacks the
        column); a histogram's counts column holds a list of floats per row. Columns are in
        the order of the first layout's names, then new names of later layouts.

    Example:
        >>> a = compute(torch.ones(3), ["mean", "max"])
        >>> b = compute(torch.zeros(2), ["max", "numel"])
        >>> stats_table([a, b])
        {'mean': [1.0, nan], 'max': [1.0, 0.0], 'numel': [nan, 2.0]}
    """
    total = len(stats)
    if total == 0:
        return {}
    groups: dict[tuple[Layout, torch.device], list[int]] = {}
    for i, s in enumerate(stats):
        key = (s.layout, s.raw.device)
        rows = groups.get(key)
        if rows is None:
            rows = groups[key] = []
        rows.append(i)

    by_device: dict[torch.device, list[tuple[Layout, list[int]]]] = {}
    columns: dict[str, None] = {}
    for (layout, device), rows in groups.items():
        by_device.setdefault(device, []).append((layout, rows))
        columns.update(dict.fromkeys(layout.names))

    whole = len(groups) == 1
    scalar: dict[str, Tensor] = {}
    listed: dict[str, list[Any]] = {}
    for blocks in by_device.values():
        raws = [stats[i].raw for _, rows in blocks for i in rows]
        host = torch.cat(raws).to("cpu", _F64)
        start = 0
        for layout, rows in blocks:
            stop = start + len(rows) * layout.width
            raw = host[start:stop].view(len(rows), layout.width)
            start = stop
            numel = torch.tensor([stats[i].numel for i in rows], dtype=_F64)
            index = None if whole else torch.tensor(rows)
            for name, values in layout.derive(raw, numel).items():
                if values.dim() == 2:
                    col = listed.get(name)
                    if col is None:
                        col = listed[name] = [_NAN] * total
                    for r, v in zip(rows, values.tolist()):
                        col[r] = v
                elif index is None:
                    scalar[name] = values
                else:
                    if name not in scalar:
                        scalar[name] = torch.full((total,), _NAN, dtype=_F64)
                    scalar[name][index] = values
    return {n: listed[n] if n in listed else scalar[n].tolist() for n in columns}
