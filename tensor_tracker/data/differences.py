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
            dtypes (both rounded to it first); NaN for non-float tensors.
        numel: how many elements were compared.
        rms_a, rms_b: the root mean square of each side (the scale of the values).

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
    bits = x.contiguous().view(_INT_OF_SIZE[x.element_size()]).to(torch.int64)
    width = 8 * x.element_size()
    magnitude = bits & ((1 << (width - 1)) - 1)
    return torch.where(bits < 0, -magnitude, magnitude)


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
    same_sign = (ka >= 0) == (kb >= 0)
    # Same sign: |ka - kb| < 2**63. Opposite signs: |ka| + |kb|, which may not fit.
    apart_a, apart_b = ka.abs(), kb.abs()
    overflow = apart_a > _INT64_MAX - apart_b
    across = torch.where(overflow, torch.full_like(ka, _INT64_MAX), apart_a + apart_b)
    return torch.where(same_sign, (ka - kb).abs(), across)


def _bits_equal(a: Tensor, b: Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point() or a.is_complex():
        return bool(torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)))
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


def differences(a: Sequence[Tensor], b: Sequence[Tensor]) -> Differences:
    """The `Differences` of two lists of tensors taken together, pairwise (same length,
    same shapes; the dtypes may differ).

    Example:
        >>> d = differences([torch.tensor([1.0, 2.0])], [torch.tensor([1.0, 2.5])])
        >>> d.equal, d.max_abs_error, d.max_ulp
        (False, 0.5, 2097152.0)
    """
    equal = all(_bits_equal(x, y) for x, y in zip(a, b, strict=True))
    max_abs, max_ulp = 0.0, 0.0
    diff2 = norm_a2 = norm_b2 = dot = 0.0
    numel = 0
    floats = True
    for x, y in zip(a, b, strict=True):
        numel += x.numel()
        if x.numel() == 0:
            continue
        xd, yd = _as_float64(x), _as_float64(y)
        same = (xd == yd) | (xd.isnan() & yd.isnan())
        delta = torch.where(same, torch.zeros_like(xd), xd - yd)
        max_abs = max(max_abs, float(delta.abs().max()))  # NaN propagates
        # Where both hold the same non-finite value it counts as no error: leave it out.
        finite = ~same | (xd.isfinite() & yd.isfinite())
        xf, yf = torch.where(finite, xd, 0.0), torch.where(finite, yd, 0.0)
        diff2 += float(delta.square().sum())
        norm_a2 += float(xf.square().sum())
        norm_b2 += float(yf.square().sum())
        dot += float((xf * yf).sum())
        if x.is_floating_point() and y.is_floating_point():
            ulps = ulp_distance(x, y)
            # NaN at the same place in both: no distance; a NaN in one only: undefined.
            nan_a, nan_b = x.isnan(), y.isnan()
            if bool((nan_a != nan_b).any()):
                max_ulp = math.nan
            elif not math.isnan(max_ulp):
                ulps = torch.where(nan_a, torch.zeros_like(ulps), ulps)
                max_ulp = max(max_ulp, float(int(ulps.max())))
        else:
            floats = False
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
    return Differences(equal, max_abs, rel, cosine, max_ulp, numel, rms_a, rms_b)
