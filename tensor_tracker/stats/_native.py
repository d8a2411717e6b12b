"""One pass over a CPU tensor for the health statistics, in C compiled on first use.

`stats.health` (rms, abs_max, kurtosis) needs a tensor's minimum, maximum and moments up to
the fourth. Eagerly that is about ten passes over each tensor (a float64 copy, the mean,
the deviations, their powers and three sums; `kernels._eager_moments4`), which cost a quarter
of a training step; one vectorised C loop reads each element once, and is called through
`ctypes` for about a microsecond (a `torch.compile`d kernel costs ~30 us a call in its
guards and wrappers, more than the pass itself for most tensors).

The source is compiled once per process, into a private temporary directory removed
straight after loading, with the system C compiler (`$CC`, else `cc`, `gcc` or `clang`)
for the host's own instruction set. Without a compiler, `shifted_sums` returns None and
the callers keep their eager kernels, after one warning.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
import threading
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

__all__ = ["moments4_minmax", "shifted_sums"]

# The sums are accumulated in float64 in blocks of 4096 elements (each block's partial sums
# in L vector lanes, then added into the totals), so rounding grows with the terms per lane
# plus n / 4096 additions rather than with n: each power sum is within
# (4096 / L + 3 + n / 4096) * 2**-53 of the sum of its terms' magnitudes (about 3e-13 at
# n = 1e7 with L = 8; L = 1 at worst, without vectors), and each term d**k within
# (k + 2) * 2**-53 of its exact value, where d = x - c is exact for float32 x and rounded
# once for float64 x. Turning these sums into central moments multiplies that by at most
# 369, since the shift lies within `kernels.FAR` spreads of the mean. `omp simd` lets the compiler reorder exactly these reductions (and nothing
# else, unlike -ffast-math); -fopenmp-simd needs no OpenMP runtime.
#
# Why not float32, which would halve the instructions of this compute-bound pass: a float32
# difference x - c rounds unless x and c are within a factor 2, and each power rounds again
# by ~1e-7 of the term, which n terms average down only as sqrt(n). Emulated on the tests'
# tensors (float32 blocks of 256, then float64), the std and fourth moment come out 3e-9 to
# 1.4e-8 off, where 1e-10 is promised (doc/benchmarks.md, health).
_SOURCE = r"""
#include <stdint.h>
#define BLOCK 4096
#define KERNEL(NAME, T)                                                                 \
void NAME(const T *x, int64_t n, double c, double *out) {                             \
    if (c != c) c = (double)x[0];                                                      \
    double t1 = 0, t2 = 0, t3 = 0, t4 = 0;                                             \
    T lo = x[0], hi = x[0];                                                            \
    for (int64_t b = 0; b < n; b += BLOCK) {                                           \
        int64_t end = n - b > BLOCK ? b + BLOCK : n;                                   \
        double s1 = 0, s2 = 0, s3 = 0, s4 = 0;                                         \
        _Pragma("omp simd reduction(+:s1,s2,s3,s4) reduction(min:lo) reduction(max:hi)") \
        for (int64_t i = b; i < end; i++) {                                            \
            T v = x[i];                                                                \
            double d = (double)v - c, d2 = d * d;                                      \
            s1 += d; s2 += d2; s3 += d2 * d; s4 += d2 * d2;                            \
            lo = v < lo ? v : lo;                                                      \
            hi = v > hi ? v : hi;                                                      \
        }                                                                              \
        t1 += s1; t2 += s2; t3 += s3; t4 += s4;                                        \
    }                                                                                  \
    out[0] = t1; out[1] = t2; out[2] = t3; out[3] = t4;                                \
    out[4] = (double)lo; out[5] = (double)hi; out[6] = c;                              \
}
KERNEL(tt_shifted_sums_f32, float)
KERNEL(tt_shifted_sums_f64, double)

/* The central moments from the sums about c = mean - delta, a second pass about the mean
   when c lies more than sqrt(far) standard deviations from it: the arithmetic of Python
   floats, operation for operation (no fused multiply-add), so the results are those that
   `shifted_sums` and these formulas give in Python, bit for bit, for about a microsecond
   less per tensor. Returns 0 (out untouched) when the sums are not finite. */
#if defined(__clang__)
#define NO_FMA _Pragma("clang fp contract(off)")
#define NO_FMA_ATTRIBUTE
#elif defined(__GNUC__)
#define NO_FMA
#define NO_FMA_ATTRIBUTE __attribute__((optimize("fp-contract=off")))
#else
#define NO_FMA _Pragma("STDC FP_CONTRACT OFF")
#define NO_FMA_ATTRIBUTE
#endif
#define MOMENTS(NAME, SUMS, T)                                                           \
NO_FMA_ATTRIBUTE int NAME(const T *x, int64_t n, double far, double *out) {           \
    NO_FMA                                                                             \
    double s[7], nan = 0.0 / 0.0, k = (double)n;                                       \
    SUMS(x, n, nan, s);                                                                \
    double total = s[0] + s[1] + s[2] + s[3];                                          \
    if (total != total || total - total != 0.0) return 0;                              \
    double delta = s[0] / k;                                                           \
    if (delta * delta > far * (s[1] / k - delta * delta)) {                            \
        SUMS(x, n, s[6] + delta, s);                                                   \
        delta = s[0] / k;                                                              \
    }                                                                                  \
    double m2 = s[1] / k - delta * delta;                                              \
    m2 = 0.0 > m2 ? 0.0 : m2;                                                          \
    out[0] = s[6] + delta;                                                             \
    out[1] = __builtin_sqrt(m2);                                                       \
    out[2] = s[2] / k - delta * (3 * s[1] / k - 2 * delta * delta);                    \
    out[3] = s[3] / k - delta * (4 * s[2] / k - delta * (6 * s[1] / k - 3 * delta * delta)); \
    out[4] = s[4]; out[5] = s[5];                                                      \
    return 1;                                                                          \
}
MOMENTS(tt_moments4_minmax_f32, tt_shifted_sums_f32, float)
MOMENTS(tt_moments4_minmax_f64, tt_shifted_sums_f64, double)
"""

_Kernel = Callable[[int, int, float, ctypes.Array[ctypes.c_double]], None]
_Moments = Callable[[int, int, float, ctypes.Array[ctypes.c_double]], int]
# The result types, made once (`ctypes.c_double * 7` looks its type up at every call).
_SUMS_OUT = ctypes.c_double * 7
_MOMENTS_OUT = ctypes.c_double * 6
_STRIDED = torch.strided

_LOCK = threading.Lock()
_KERNELS: dict[torch.dtype, tuple[_Kernel, _Moments]] | None = None
_TRIED = False


def _compilers() -> list[str]:
    named = os.environ.get("CC")
    if named:
        return [named]
    return [path for name in ("cc", "gcc", "clang") if (path := shutil.which(name))]


def _build() -> dict[torch.dtype, tuple[_Kernel, _Moments]]:
    """Compile and load the kernels; raises OSError (with the compiler's message) when no
    compiler could build them."""
    compilers = _compilers()
    if not compilers:
        raise OSError("no C compiler found ($CC, cc, gcc or clang)")
    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tensor_tracker-") as tmp:
        source = os.path.join(tmp, "health.c")
        library = os.path.join(tmp, "health.so")
        with open(source, "w") as file:
            file.write(_SOURCE)
        base = ["-O3", "-fopenmp-simd", "-shared", "-fPIC", "-o", library, source, "-lm"]
        # -march=native first (AVX-512 or AVX2 where the host has them); some compilers
        # (Apple clang on arm64) refuse it.
        for cc in compilers:
            for flags in (["-march=native", *base], base):
                try:
                    run = subprocess.run(
                        [cc, *flags], capture_output=True, text=True, timeout=120, check=False
                    )
                except (OSError, subprocess.TimeoutExpired) as error:
                    errors.append(f"{cc}: {error}")
                    break
                if run.returncode == 0:
                    # Loaded before the directory goes: the mapping outlives the file.
                    lib = ctypes.CDLL(library)
                    return {
                        torch.float32: (
                            _function(lib.tt_shifted_sums_f32, None),
                            _function(lib.tt_moments4_minmax_f32, ctypes.c_int),
                        ),
                        torch.float64: (
                            _function(lib.tt_shifted_sums_f64, None),
                            _function(lib.tt_moments4_minmax_f64, ctypes.c_int),
                        ),
                    }
                errors.append(f"{cc}: {run.stderr.strip()[-300:]}")
    raise OSError("; ".join(errors))


def _function(f: ctypes._NamedFuncPointer, restype: Any) -> Any:
    f.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_double, ctypes.c_void_p]
    f.restype = restype
    return f


def _kernels() -> dict[torch.dtype, tuple[_Kernel, _Moments]] | None:
    global _KERNELS, _TRIED
    if _TRIED:
        return _KERNELS
    with _LOCK:
        if not _TRIED:
            try:
                _KERNELS = _build()
            except OSError as error:
                warnings.warn(
                    "tensor_tracker: could not compile the one-pass C kernel of the CPU "
                    f"statistics ({error}); they are computed by torch's own kernels "
                    "instead: the same numbers to float rounding, in several passes (about "
                    "2x slower for stats=True, 8x for kurtosis). Install a C compiler (cc, "
                    "gcc or clang) or point $CC at one to speed them up.",
                    RuntimeWarning,
                    stacklevel=2,
                )
            _TRIED = True
    return _KERNELS


def shifted_sums(x: Tensor, shift: float = float("nan")) -> list[float] | None:
    """`[sum(d), sum(d**2), sum(d**3), sum(d**4), min(x), max(x), c]` with `d = x - c` in
    float64, in one pass over a contiguous, non-empty float32 or float64 CPU tensor `x`;
    `c` is `shift`, or `x`'s first element when `shift` is NaN. None when the kernels
    could not be compiled (warned once) or `x` is not such a tensor (or a subclass).

    The minimum and maximum are only meaningful when the sums are finite (NaN does not
    propagate into them).

    Example:
        >>> shifted_sums(torch.tensor([1.0, 3.0]))
        [2.0, 4.0, 8.0, 16.0, 1.0, 3.0, 1.0]
    """
    kernels = _KERNELS if _TRIED else _kernels()
    kernel = None if kernels is None else kernels.get(x.dtype)
    n = x.numel()
    # A subclass may hold no storage of its own (wrapper subclasses: no data pointer), or
    # values that its own operators compute.
    if kernel is None or n == 0 or type(x) is not Tensor or not x.is_contiguous() or not x.is_cpu:
        return None
    out = _SUMS_OUT()
    kernel[0](x.data_ptr(), n, shift, out)
    return out[:]


def moments4_minmax(x: Tensor, far: float) -> list[float] | None:
    """`[mean, std (correction=0), E[(x-mean)**3], E[(x-mean)**4], min, max]` of `x` (as
    for `shifted_sums`, of any shape; a tensor that requires grad is read as it is) in
    float64: one pass about the first element, and a second about
    the mean when that element lies more than `sqrt(far)` standard deviations from it;
    the moments from the sums as `kernels.cpu_moments4_minmax` documents. None where
    `shifted_sums` is None, and when the sums are not finite (NaN, infinities,
    overflowing powers).

    Example:
        >>> moments4_minmax(torch.tensor([1.0, 3.0]), 16.0)
        [2.0, 1.0, 0.0, 1.0, 1.0, 3.0]
    """
    # Hooks call this cold for every tensor, of any shape, attached to autograd or not, on
    # any device and layout (`StatsFn.raw` tries it first): the checks inline, the cheap
    # and decisive ones first (a sparse CSR tensor raises in `is_contiguous`).
    if type(x) is not Tensor or not x.is_cpu or x.layout is not _STRIDED:
        return None
    kernels = _KERNELS if _TRIED else _kernels()
    kernel = None if kernels is None else kernels.get(x.dtype)
    n = x.numel()
    if kernel is None or n == 0 or not x.is_contiguous():
        return None
    out = _MOMENTS_OUT()
    return out[:] if kernel[1](x.data_ptr(), n, far, out) else None
