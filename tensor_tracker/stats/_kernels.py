"""Hot-path kernels: a tensor's raw numbers in a few passes, never waiting for a device.

The built-in statistics derive from the slots of `GROUPS` (see `tensor_tracker.stats._builtin`);
`Core` runs the groups a `StatsFn` needs. On accelerators every result stays on the
device; on the CPU, where an op has finished when it returns, results are read back as host
floats, which lets the moments take one pass fewer (`_eager_moments`).
"""

from __future__ import annotations

import array
import dataclasses
import math
import threading
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ._native import moments4_minmax

__all__ = [
    "FAR",
    "GROUPS",
    "REDUCED_AS_THEY_ARE",
    "Core",
    "RawGroup",
    "Thresholds",
    "compute_dtype",
    "cpu_moments4_minmax",
    "flat",
    "host_moments_minmax",
    "host_tensor",
]

F64 = torch.float64
INF = math.inf
NAN = math.nan


_COMPUTE_DTYPE: dict[torch.dtype, torch.dtype | None] = {
    torch.float32: None,
    torch.float64: None,
}


REDUCED_AS_THEY_ARE = frozenset(_COMPUTE_DTYPE)
"""The dtypes `compute_dtype` leaves as they are."""


def compute_dtype(dtype: torch.dtype) -> torch.dtype | None:
    """The dtype to reduce in, or None for the tensor's own dtype."""
    try:
        return _COMPUTE_DTYPE[dtype]
    except KeyError:
        # Low-precision floats would overflow in the squares and lose the sums; integers
        # and bools have no float reductions at all.
        result = torch.float32 if dtype.is_floating_point else F64
        _COMPUTE_DTYPE[dtype] = result
        return result


def lower_thresholds(keys: Sequence[tuple[float, bool]], dtype: torch.dtype) -> Tensor:
    """For each `(v, strict)`: the largest `dtype` value `<= v` (`< v` when strict).

    With these as `torch.bucketize(a, B)` boundaries (`right=False`), bucket `k` holds
    `B[k-1] < a <= B[k]`, so the buckets up to `k` count exactly `a <= v` (or `a < v`) in
    `dtype` arithmetic, whatever the rounding of `v`. NaN lands past the last boundary.
    """
    values = torch.tensor([k[0] for k in keys], dtype=F64)
    strict = torch.tensor([k[1] for k in keys])
    t = values.to(dtype)
    back = t.to(F64)
    too_big = torch.where(strict, back >= values, back > values)
    return torch.where(too_big, torch.nextafter(t, torch.full_like(t, -INF)), t)


class Thresholds:
    """Boundary tensors per (device, dtype), built once; hooks only look them up."""

    __slots__ = ("_cache", "keys")

    def __init__(self, keys: Sequence[tuple[float, bool]]) -> None:
        self.keys = tuple(keys)
        self._cache: dict[tuple[torch.device, torch.dtype], Tensor] = {}

    def get(self, x: Tensor) -> Tensor:
        key = (x.device, x.dtype)
        bounds = self._cache.get(key)
        if bounds is None:
            # non_blocking: a blocking host-to-device copy is a synchronisation on CUDA.
            bounds = lower_thresholds(self.keys, x.dtype).to(x.device, non_blocking=True)
            self._cache[key] = bounds
        return bounds


_ONES: dict[torch.device, Tensor] = {}


def count_buckets(idx: Tensor, nb: int) -> Tensor:
    """`bincount(idx, minlength=nb)` as float64, without host synchronisation."""
    flat = idx.reshape(-1)
    if flat.is_cpu:
        return torch.bincount(flat, minlength=nb).to(F64)
    if flat.is_cuda and not torch.are_deterministic_algorithms_enabled():
        # CUDA bincount reads min/max back to the host to size its output; histc with a
        # fixed range does not, and counts in shared memory (float64: exact to 2**53).
        return torch.histc(flat.to(F64), bins=nb, min=0, max=nb)
    # histc refuses to run in deterministic mode; index_add_ has a deterministic path.
    ones = _ONES.get(flat.device)
    if ones is None:
        ones = _ONES[flat.device] = torch.ones((), dtype=F64, device=flat.device)
    out = torch.zeros(nb, dtype=F64, device=flat.device)
    return out.index_add_(0, flat, ones.expand(flat.numel()))


def host_tensor(values: list[float]) -> Tensor:
    """A float64 CPU tensor of `values` (several times faster than `torch.tensor`)."""
    return torch.frombuffer(array.array("d", values), dtype=F64)


def cpu_moments(x: Tensor) -> list[float]:
    """`(mean, std with correction=0)` of a 1-D float32/float64 CPU tensor: from the C
    kernel's one pass (float64 sums, as `host_moments_minmax` and `cpu_moments4` take
    them, so a statistic is the same number whatever else is asked for), else eagerly
    (`_eager_moments`).

    Example:
        >>> cpu_moments(torch.tensor([1.0, 3.0]))
        [2.0, 1.0]
    """
    values = moments4_minmax(x, FAR)
    return _eager_moments(x) if values is None else values[:2]


def _eager_moments(x: Tensor) -> list[float]:
    """`cpu_moments` without a compiler. CPU `var_mean`/`std_mean` are a scalar Welford loop (~10x slower than a vectorised
    pass), so this takes `sum(x)` and `dot(x, x)` (two vectorised passes, no temporary) and
    `var = dot/n - mean**2`. That subtraction cancels the leading bits the two terms share:
    when `mean**2` is more than 3 times `var` (under a quarter of `dot/n` remains), the
    classic second pass `norm(x - mean)` about the mean already summed is computed instead,
    so the result never has more than 4 times the sums' own relative error (NaN, inf and
    overflowing squares take that path too). Layer-norm weights near 1 and Adam's
    `exp_avg_sq` take it: more of them as training goes on.
    """
    n = x.numel()
    mean = x.sum().item() / n
    square_mean = torch.dot(x, x).item() / n
    var = square_mean - mean * mean
    if 0.25 * square_mean <= var < INF:  # also false for NaN, and for squares overflowing
        return [mean, math.sqrt(var)]
    return [mean, torch.linalg.vector_norm(x - mean).item() / math.sqrt(n)]


_SMALL = 1 << 16
"""Elements below which a non-contiguous tensor is copied rather than viewed (see `flat`)."""


def flat(x: Tensor) -> Tensor:
    """`x`'s elements as a 1-D tensor: a view when `x` is contiguous, or dense in some
    other order of its dimensions (transposed, permuted) and holds `_SMALL` elements or
    more; otherwise a contiguous copy. Statistics do not depend on the order of the
    elements (up to rounding), so e.g. large attention outputs, which are transposed, need
    no copy; for a small tensor the copy (one C++ call) costs less than telling whether it
    is dense (measured inside real steps: 45 us a step for four 4,096-element tensors)."""
    if x.is_contiguous():
        return x.view(-1)
    if x.numel() < _SMALL:
        return x.reshape(-1)
    expected = 1
    for stride, size in sorted(zip(x.stride(), x.shape, strict=True)):
        if size != 1:
            if stride != expected:
                return x.contiguous().view(-1)
            expected *= size
    return x.as_strided((x.numel(),), (1,))


def pow2(e: float) -> float:
    """`2**e`, clamped into the positive floats so that thresholds stay ordered."""
    # Clamped so thresholds stay ordered: 2**e underflows to 0.0 below -1074 and raises
    # OverflowError from 1024 up.
    if e >= 1024:
        return INF
    return max(math.pow(2.0, e), 5e-324)


def _cpu_minmax(x: Tensor) -> list[float]:
    lo, hi = torch.aminmax(x)
    return [lo.item(), hi.item()]


def _device_moments(x: Tensor) -> tuple[Tensor, Tensor]:
    std, mean = torch.std_mean(x, correction=0)
    return mean, std


def _graph_moments(x: Tensor) -> tuple[Tensor, Tensor]:
    """`(mean, std with correction=0)` of a non-empty 1-D tensor as a compiled graph
    computes them: two float64 sums about a shift `c`, the first element (0 when it is not
    finite), that Inductor fuses into one loop, often into the producer's. Inductor's CPU
    `std_mean` is a Welford loop, about 3x the time of these sums on a 256K tensor. The
    variance loses at most about `n` float64 roundings to the shift, since
    `(c - mean)**2 <= n * var` for any element `c`: under 1e-9 relative up to 1e7
    elements, better than the float32 reductions of `_device_moments` and `cpu_moments`.

    Example:
        >>> [v.item() for v in _graph_moments(torch.tensor([1.0, 3.0]))]
        [2.0, 1.0]
    """
    first = x[0]
    c = torch.where(torch.isfinite(first), first, torch.zeros_like(first)).to(F64)
    d = x.to(F64) - c
    n = x.numel()
    delta = d.sum() / n
    var = ((d * d).sum() / n - delta * delta).clamp_min(0.0)
    return c + delta, var.sqrt()


def _device_moments4(x: Tensor) -> tuple[Tensor, ...]:
    # The fourth moment about zero would cancel every digit of a tensor whose mean dwarfs
    # its spread (1e4 + 1e-2 * randn in float32: E[x**4] ~ 1e16, the central part ~ 1e-8),
    # so the moments are taken about the mean itself, in float64: a float32 value minus a
    # float64 mean is exact there, and so are the sums to float64 rounding.
    mean = x.sum(dtype=F64) / x.numel()
    d = x.to(F64) - mean
    d2 = d * d
    return mean, d2.mean().sqrt(), (d2 * d).mean(), (d2 * d2).mean()


_CHUNK = 1 << 16
"""Elements per piece of the CPU moments4 kernel: its float64 scratch (1 MiB) stays in the
caches, and no tensor-sized temporary is allocated (a fresh one of a few MiB costs
milliseconds of page faults on every call)."""

_SCRATCH = threading.local()


def _eager_moments4(x: Tensor) -> list[float]:
    """`cpu_moments4` without a compiler: torch operations piece by piece through one
    reused float64 buffer per thread (hooks of several threads may run at once).

    Example:
        >>> _eager_moments4(torch.tensor([1.0, 3.0]))
        [2.0, 1.0, 0.0, 1.0]
    """
    n = x.numel()
    scratch: Tensor | None = getattr(_SCRATCH, "buffer", None)
    if scratch is None:
        scratch = _SCRATCH.buffer = torch.empty(2, _CHUNK, dtype=F64)
    if n <= _CHUNK:
        # Most tensors: the float64 copy is made first, and its sum gives the mean (a
        # third of the time of `x.sum(dtype=float64)`, which converts as it goes).
        d = scratch[0, :n].copy_(x)
        mean = d.sum().item() / n
        sums = _power_sums(d.sub_(mean), scratch[1, :n])
    else:
        # Two passes through the buffer: `x.sum(dtype=float64)` would allocate a float64
        # copy of all of x.
        pieces = [
            (x[i : i + _CHUNK], scratch[:, : min(_CHUNK, n - i)]) for i in range(0, n, _CHUNK)
        ]
        mean = sum(rows[0].copy_(piece).sum().item() for piece, rows in pieces) / n
        sums = torch.zeros(3, dtype=F64)
        for piece, rows in pieces:
            sums += _power_sums(rows[0].copy_(piece).sub_(mean), rows[1])
    m2, m3, m4 = (sums / n).tolist()
    return [mean, math.sqrt(m2), m3, m4]


FAR = 16.0
"""How far (in variances: (c - mean)**2 / var) the shift of `shifted_sums` may lie from the
mean. Within it, turning the sums about `c` into central moments loses at most a few
hundred times their rounding (the fourth power sum is at most 1 + 4 * 4 + 6 * 16 + 16**2
= 369 times the central one, as m4 >= var**2), far below the 1e-10 that is promised;
beyond it, a second pass about the mean."""


def cpu_moments4_minmax(x: Tensor) -> list[float]:
    """`cpu_moments4(x)` followed by `x`'s minimum and maximum (the health preset's raw
    numbers), through the C kernel when it is compiled (`_native.moments4_minmax`: one
    pass of sums about the first element, then a second about the mean when that element
    lies more than `sqrt(FAR)` standard deviations from it, the central moments derived
    from those sums about c = mean - delta).

    Example:
        >>> cpu_moments4_minmax(torch.tensor([1.0, 3.0]))
        [2.0, 1.0, 0.0, 1.0, 1.0, 3.0]
    """
    values = moments4_minmax(x, FAR)
    return [*_eager_moments4(x), *_cpu_minmax(x)] if values is None else values


def cpu_moments4(x: Tensor) -> list[float]:
    """`(mean, std with correction=0, E[(x-mean)**3], E[(x-mean)**4])` of a 1-D
    float32/float64 CPU tensor, as `_device_moments4` computes them.

    Example:
        >>> cpu_moments4(torch.tensor([1.0, 3.0]))
        [2.0, 1.0, 0.0, 1.0]
    """
    values = moments4_minmax(x, FAR)
    return _eager_moments4(x) if values is None else values[:4]


def _power_sums(d: Tensor, out: Tensor) -> Tensor:
    """`(sum(d**2), sum(d**3), sum(d**4))`, with `d**2` written to `out`."""
    d2 = torch.mul(d, d, out=out)
    return torch.stack((d2.sum(), torch.dot(d2, d), torch.dot(d2, d2)))


def _count_nonfinite(x: Tensor) -> Tensor:
    # x - x is 0 for finite values and NaN otherwise; bool reductions are slower.
    return torch.count_nonzero(x - x).to(F64)


@dataclasses.dataclass(frozen=True)
class RawGroup:
    """Raw numbers computed together, kept side by side in a `Stats`' raw vector.

    Attributes:
        slots: the names of the numbers, in the order the kernels return them.
        empty: each slot's value for an empty tensor.
        device: the kernel for accelerators: 0-d tensors that stay on the device.
        host: the kernel for CPU tensors: Python floats.
        graph: the kernel a compiled graph runs (`Core.graph_raw`), when not `device`.
    """

    slots: tuple[str, ...]
    empty: float
    device: Callable[[Tensor], Sequence[Tensor]]
    host: Callable[[Tensor], list[float]]
    graph: Callable[[Tensor], Sequence[Tensor]] | None = None


GROUPS: dict[str, RawGroup] = {
    "moments": RawGroup(("mean", "std0"), NAN, _device_moments, cpu_moments, _graph_moments),
    # The moments up to the fourth, about the mean (per element); it stands in for
    # "moments" when both are wanted (see `builtin.raw_plan`).
    "moments4": RawGroup(("mean", "std0", "m3", "m4"), NAN, _device_moments4, cpu_moments4),
    "minmax": RawGroup(("min", "max"), NAN, torch.aminmax, _cpu_minmax),
    # The fused 1-norm kernel is ~4x slower on the CPU than abs + sum.
    "abs_sum": RawGroup(
        ("abs_sum",),
        0.0,
        lambda x: (torch.linalg.vector_norm(x, 1),),
        lambda x: [x.abs().sum().item()],
    ),
    "nonfinite": RawGroup(
        ("nonfinite",),
        0.0,
        lambda x: (_count_nonfinite(x),),
        lambda x: [float(_count_nonfinite(x))],
    ),
    "nonzero": RawGroup(
        ("nonzero",),
        0.0,
        lambda x: (torch.count_nonzero(x).to(F64),),
        lambda x: [float(torch.count_nonzero(x))],
    ),
    # One pass, the cheapest test for NaN and infinities (what the tripwire can watch).
    "sum": RawGroup(("sum",), 0.0, lambda x: (x.sum(),), lambda x: [x.sum().item()]),
}
"""Every raw group, in the order their slots sit in the raw vector."""


def host_moments_minmax(x: Tensor) -> list[float]:
    """The default groups' numbers (mean, std, min, max) of a CPU tensor: from the health
    kernel's one pass when it is compiled (float64 sums, one call instead of three torch
    reductions), else as `cpu_moments` and `aminmax` give them."""
    values = moments4_minmax(x, FAR)
    if values is not None:
        return [values[0], values[1], values[4], values[5]]
    # aminmax first: measured inside real steps, the three passes cost about a microsecond
    # less per tensor in this order (the numbers are the same).
    lo, hi = torch.aminmax(x)
    mean, std = _eager_moments(x)
    return [mean, std, lo.item(), hi.item()]


class Core:
    """The built-in statistics' raw computation: the needed `GROUPS`, then (when format
    statistics are asked for) counts of |x| between `range_` thresholds."""

    __slots__ = ("flat", "groups", "host", "nb", "range")

    def __init__(self, groups: Sequence[RawGroup], range_: Thresholds | None) -> None:
        self.groups = tuple(groups)
        self.range = range_
        self.nb = 0 if range_ is None else len(range_.keys) + 1
        # The default statistics' groups in one call: hooks run cold, so every Python call
        # saved there counts.
        default = (GROUPS["moments"], GROUPS["minmax"])
        self.host: Callable[[Tensor], list[float]]
        """The raw numbers of the groups for a CPU tensor, as host floats (no range counts)."""
        if self.groups == default:
            self.host = host_moments_minmax
        elif self.groups == (GROUPS["moments4"], GROUPS["minmax"]):  # stats.health
            self.host = cpu_moments4_minmax
        elif len(self.groups) == 1:
            self.host = self.groups[0].host
        else:
            self.host = self._host_groups
        self.flat = GROUPS["moments"] in self.groups or GROUPS["moments4"] in self.groups
        """Whether the kernels need a 1-D tensor (`torch.dot` does); the others reduce a
        tensor of any shape and layout as it is, without the view `flat` makes."""

    def _host_groups(self, x: Tensor) -> list[float]:
        return [v for group in self.groups for v in group.host(x)]

    def device_raw(self, x: Tensor, bounds: Tensor | None) -> Tensor:
        """The raw vector of `x` (1-D, in its reduction dtype; see `flat`) as a float64
        tensor on `x`'s device, computed without waiting for the device (what
        `compile=True` compiles)."""
        scalars = [s for group in self.groups for s in group.device(x)]
        head = torch.stack(scalars).to(F64) if scalars else None
        if bounds is None:
            assert head is not None  # a Core always computes something
            return head
        counts = self._range_counts(x, bounds)
        return counts if head is None else torch.cat((head, counts))

    def graph_raw(self, x: Tensor) -> Tensor:
        """`device_raw` with no range counts, as a compiled graph computes it: each group's
        `graph` kernel where it has one, every number converted to float64 on its own
        (fused into the kernel that reduces it)."""
        return torch.stack(
            [s.to(F64) for group in self.groups for s in (group.graph or group.device)(x)]
        )

    def host_raw(self, x: Tensor, bounds: Tensor | None) -> list[float] | Tensor:
        """`device_raw` for a CPU tensor, as a list of floats when there are no counts (a
        list is cheaper to keep than a tensor; `Stats` builds one when it is read)."""
        values = self.host(x)
        if bounds is None:
            return values
        counts = self._range_counts(x, bounds)
        return torch.cat((host_tensor(values), counts)) if values else counts

    def _range_counts(self, x: Tensor, bounds: Tensor) -> Tensor:
        # bucketize copies (and warns about) non-contiguous input; abs keeps x's strides.
        magnitude = x.abs().contiguous()
        return count_buckets(torch.bucketize(magnitude, bounds, out_int32=True), self.nb)
