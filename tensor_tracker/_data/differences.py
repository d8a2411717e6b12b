"""The arithmetic of comparing two recorded tensors: bitwise equality, absolute, relative
and angular error, and the distance in units in the last place (ULP) of the coarser dtype.

Pure functions of tensors (no records, no pandas), used by `tensor_tracker.compare`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["Differences", "close", "coarser_dtype", "differences", "ordered_bits", "ulp_distance"]

# The signed integer type of each float size: a float's bits are read through it.
_INT_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_INT64_MAX = 2**63 - 1


@dataclasses.dataclass(frozen=True)
class Differences:
    """How far apart two values are (all tensors of a record taken together).

    Attributes:
        equal: bitwise equal: same dtypes, shapes and bits (NaNs included).
        max_abs_error: the largest |a - b| over the elements (in float64).
        rel_rms_error: ||a - b|| / ||a|| (Euclidean norms over all elements); when `a` is all
            zeros: 0 if `b` is too, else infinity.
        cosine: a . b / (||a|| ||b||); 1 when both are all zeros, 0 when only one is.
        max_ulp: the largest distance in units in the last place of the coarser of the two
            dtypes (both rounded to it first); NaN for non-float tensors. Exact, but an
            alarm only for values of one scale: near 0 the steps are tiny (an fp32 step is
            1.4e-45 at 0 and 1.2e-7 at 1), so an error that is small against the tensor's
            scale can be tens of thousands of steps where an element is near 0. Read
            `rel_rms_error` for how far apart the tensors are.
        numel: how many elements were compared.
        rms_a, rms_b: the root mean square of each side (the scale of the values).
        excess: the largest |a - b| - rtol * |b| for the `rtol` given to `differences`:
            the pair is within `atol + rtol * |b|` everywhere exactly when `excess <= atol`.
        rms_error: ||a - b|| / sqrt(numel), the root mean square of the difference.

    A NaN or infinity at the same place in both counts as no error there; anywhere else
    the errors are NaN (or infinite), as the arithmetic gives.
    """

    equal: bool
    max_abs_error: float
    rel_rms_error: float
    cosine: float
    max_ulp: float
    numel: int
    rms_a: float
    rms_b: float
    excess: float
    rms_error: float


def coarser_dtype(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    """Of two floating dtypes, the one with fewer mantissa bits (ties: fewer exponent bits,
    i.e. the smaller largest value).

    Example:
        >>> coarser_dtype(torch.float32, torch.bfloat16)
        torch.bfloat16
        >>> coarser_dtype(torch.float16, torch.bfloat16)
        torch.bfloat16
    """
    fa, fb = torch.finfo(a), torch.finfo(b)
    return a if (fa.resolution, -fa.max) >= (fb.resolution, -fb.max) else b


def ordered_bits(x: Tensor) -> Tensor:
    """The bits of a float tensor as int64 numbers in the order of the floats: consecutive
    floats differ by 1, +0 and -0 are both 0, and the sign of the result is the float's.
    (IEEE floats are sign and magnitude; the magnitude's bits count upwards.)

    Example:
        >>> ordered_bits(torch.tensor([-1.0, -0.0, 0.0, 1.0], dtype=torch.bfloat16)).tolist()
        [-16256, 0, 0, 16256]
    """
    # In the float's own width: -magnitude always fits, one conversion to int64 at the end.
    bits = x.contiguous().view(_INT_OF_SIZE[x.element_size()])
    magnitude = bits & ((1 << (8 * x.element_size() - 1)) - 1)
    return torch.where(bits < 0, -magnitude, magnitude).to(torch.int64)


def ulp_distance(a: Tensor, b: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """How many representable values of `dtype` (default: the coarser of the two) lie
    between each pair of elements, exactly: both are rounded to `dtype`, their bits read
    as ordered integers (see `ordered_bits`) and subtracted. int64; saturates at 2**63 - 1
    (only float64 values of opposite signs can get there).

    Example:
        >>> one = torch.tensor([1.0])
        >>> ulp_distance(one, one + 2**-7, torch.bfloat16).tolist()   # bf16 has 7 mantissa bits
        [1]
    """
    dtype = dtype or coarser_dtype(a.dtype, b.dtype)
    ka, kb = ordered_bits(a.to(dtype)), ordered_bits(b.to(dtype))
    if dtype.itemsize < 8:  # keys of at most 32 bits: their difference fits in int64
        return (ka - kb).abs()
    same_sign = (ka >= 0) == (kb >= 0)
    # Same sign: |ka - kb| < 2**63. Opposite signs: |ka| + |kb|, which may not fit.
    apart_a, apart_b = ka.abs(), kb.abs()
    overflow = apart_a > _INT64_MAX - apart_b
    across = torch.where(overflow, torch.full_like(ka, _INT64_MAX), apart_a + apart_b)
    return torch.where(same_sign, (ka - kb).abs(), across)


def _bytes(x: Tensor) -> Tensor:
    return x.contiguous().reshape(-1).view(torch.uint8)


def _bits_equal(a: Tensor, b: Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point() or a.is_complex():
        # Flattened first: a 0-d tensor (a loss) cannot be viewed as bytes.
        return bool(torch.equal(_bytes(a), _bytes(b)))
    return bool(torch.equal(a, b))


def _as_float64(x: Tensor) -> Tensor:
    """`x` in float64 (a complex tensor as its real and imaginary parts)."""
    x = x.detach()
    if x.is_complex():
        return torch.view_as_real(x.to(torch.complex128))
    return x.to(torch.float64)


def close(a: Sequence[Tensor], b: Sequence[Tensor], rtol: float, atol: float) -> bool:
    """Whether every pair of elements satisfies |a - b| <= atol + rtol * |b| (as
    `torch.isclose`; a NaN or infinity at the same place in both counts as close).

    Example:
        >>> close([torch.tensor([1.0])], [torch.tensor([1.001])], rtol=1e-2, atol=0.0)
        True
    """
    for x, y in zip(a, b, strict=True):
        if x.shape != y.shape:
            return False
        xd, yd = _as_float64(x), _as_float64(y)
        if not bool(torch.isclose(xd, yd, rtol=rtol, atol=atol, equal_nan=True).all()):
            return False
    return True


def _sums(xd: Tensor, yd: Tensor, rtol: float) -> tuple[float, float, float, float, float, float]:
    """Over the elements of two float64 tensors: max |a - b|, ||a - b||^2, ||a||^2,
    ||b||^2, a . b, and max(|a - b| - rtol |b|) (read by the tolerance test). A NaN or
    infinity at the same place in both counts as no error there and is left out of the
    sums; anywhere else the arithmetic's NaN or infinity propagates."""
    x, y = xd.reshape(-1), yd.reshape(-1)
    delta = x - y
    gap = delta.abs()
    fast = (
        float(gap.max()),
        float(torch.dot(delta, delta)),
        float(torch.dot(x, x)),
        float(torch.dot(y, y)),
        float(torch.dot(x, y)),
        float((gap - rtol * y.abs()).max()),
    )
    if all(math.isfinite(v) for v in fast):  # then no element was NaN or infinite
        return fast
    same = (xd == yd) | (xd.isnan() & yd.isnan())
    delta = torch.where(same, torch.zeros_like(xd), xd - yd)
    gap = delta.abs()
    finite = ~same | (xd.isfinite() & yd.isfinite())
    xf, yf = torch.where(finite, xd, 0.0), torch.where(finite, yd, 0.0)
    excess_t = torch.where(same, torch.full_like(gap, -math.inf), gap - rtol * yd.abs())
    return (
        float(gap.max()),
        float(delta.square().sum()),
        float(xf.square().sum()),
        float(yf.square().sum()),
        float((xf * yf).sum()),
        float(excess_t.max()),
    )


def _nan_max(a: float, b: float) -> float:
    """max(a, b), NaN if either is (Python's max() drops a NaN in second place)."""
    return a if math.isnan(a) or a > b else b


def _max_ulp(x: Tensor, y: Tensor, finite: bool) -> float:
    """The largest `ulp_distance` of two float tensors (`finite`: known to hold no NaN);
    NaN at the same places in both is no distance, a NaN in one only makes it undefined
    (NaN)."""
    if finite:
        return float(int(ulp_distance(x, y).max()))
    nan_x, nan_y = x.isnan(), y.isnan()
    if bool((nan_x != nan_y).any()):
        return math.nan
    ulps = ulp_distance(x, y)
    if bool(nan_x.any()):
        ulps = torch.where(nan_x, torch.zeros_like(ulps), ulps)
    return float(int(ulps.max()))


def differences(a: Sequence[Tensor], b: Sequence[Tensor], rtol: float = 0.0) -> Differences:
    """The `Differences` of two lists of tensors taken together, pairwise (same length,
    same shapes; the dtypes may differ). `rtol`: the relative tolerance of `excess`.

    Example:
        >>> d = differences([torch.tensor([1.0, 2.0])], [torch.tensor([1.0, 2.5])])
        >>> d.equal, d.max_abs_error, d.max_ulp
        (False, 0.5, 2097152.0)
    """
    pairs = [(x.detach(), y.detach()) for x, y in zip(a, b, strict=True)]
    equal = all(_bits_equal(x, y) for x, y in pairs)
    numel = sum(x.numel() for x, _ in pairs)
    if equal:  # nothing to subtract: only the scale is left to measure
        norm2 = sum(float(_as_float64(x).square().sum()) for x, _ in pairs if x.numel())
        rms = math.sqrt(norm2 / numel) if numel else math.nan
        finite = not math.isnan(rms)
        floats = all(x.is_floating_point() for x, _ in pairs)
        return Differences(
            equal=True,
            max_abs_error=0.0,
            rel_rms_error=0.0,
            cosine=1.0 if finite else math.nan,
            max_ulp=0.0 if floats else math.nan,
            numel=numel,
            rms_a=rms,
            rms_b=rms,
            excess=-math.inf,
            rms_error=0.0,
        )
    max_abs, max_ulp, excess = 0.0, 0.0, -math.inf
    diff2 = norm_a2 = norm_b2 = dot = 0.0
    floats = True
    for x, y in pairs:
        floats = floats and x.is_floating_point() and y.is_floating_point()
        if x.numel() == 0:
            continue
        sums = gap, d2, a2, b2, ab, over = _sums(_as_float64(x), _as_float64(y), rtol)
        max_abs = _nan_max(gap, max_abs)
        excess = _nan_max(over, excess)
        diff2, norm_a2, norm_b2, dot = diff2 + d2, norm_a2 + a2, norm_b2 + b2, dot + ab
        if floats:
            finite = all(math.isfinite(v) for v in sums)
            max_ulp = _nan_max(_max_ulp(x, y, finite), max_ulp)
    if not floats:
        max_ulp = math.nan
    # ||a|| = 0: no relative size to measure against; any difference is infinitely large.
    rel = math.sqrt(diff2 / norm_a2) if norm_a2 else (0.0 if diff2 == 0.0 else math.inf)
    if norm_a2 == 0.0 or norm_b2 == 0.0:
        cosine = 1.0 if norm_a2 == norm_b2 else 0.0
    else:
        cosine = dot / math.sqrt(norm_a2 * norm_b2)
    if math.isnan(max_abs):
        rel = cosine = math.nan
    rms_a = math.sqrt(norm_a2 / numel) if numel else math.nan
    rms_b = math.sqrt(norm_b2 / numel) if numel else math.nan
    rms_error = math.sqrt(diff2 / numel) if numel else 0.0
    return Differences(equal, max_abs, rel, cosine, max_ulp, numel, rms_a, rms_b, excess, rms_error)
