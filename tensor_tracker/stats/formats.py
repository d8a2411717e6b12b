"""Range limits of the low-precision number formats that training runs cast tensors to.

`FORMATS` is what the `F_overflow`, `F_underflow` and `F_subnormal` statistics of
`tensor_tracker.stats` compare against, and what plots draw as reference lines;
`BLOCK_FORMATS` the block-scaled formats (MX, NVFP4) that the `<format>_error` and
`<format>_underflow` statistics simulate.
"""

from __future__ import annotations

import dataclasses

import torch

__all__ = ["BLOCK_FORMATS", "FORMATS", "BlockFormat", "Format"]


@dataclasses.dataclass(frozen=True)
class Format:
    """The representable range of one floating-point format.

    A value `x` of higher precision, cast to this format, overflows when `|x| > max`,
    becomes subnormal (losing precision) when `|x| < min_normal`, and flushes to zero when
    `|x| < min_subnormal` (values exactly at a limit are representable).

    Attributes:
        name: the short key used in `FORMATS` and in statistic names, e.g. `"fp16"`.
        label: a human-readable name for plot legends, e.g. `"float16"`.
        max: the largest finite value.
        min_normal: the smallest positive normal value.
        min_subnormal: the smallest positive subnormal value.

    Example:
        >>> FORMATS["fp16"].max
        65504.0
        >>> FORMATS["fp8_e4m3"].min_subnormal == 2.0**-9
        True
    """

    name: str
    label: str
    max: float
    min_normal: float
    min_subnormal: float


def _from_dtype(name: str, label: str, dtype: torch.dtype) -> Format:
    info = torch.finfo(dtype)
    # The smallest subnormal is one unit in the last place of the smallest normal; finfo has
    # no field for it (`tiny` is the smallest normal), and the product is exact (powers of two).
    return Format(
        name=name,
        label=label,
        max=float(info.max),
        min_normal=float(info.smallest_normal),
        min_subnormal=float(info.smallest_normal * info.eps),
    )


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        _from_dtype("fp16", "float16", torch.float16),
        _from_dtype("bf16", "bfloat16", torch.bfloat16),
        _from_dtype("fp8_e4m3", "float8 e4m3fn", torch.float8_e4m3fn),
        _from_dtype("fp8_e5m2", "float8 e5m2", torch.float8_e5m2),
    )
}
"""The formats that statistics and plots know, by key: `"fp16"`, `"bf16"`, `"fp8_e4m3"`
(the "fn" variant: no infinities, max 448) and `"fp8_e5m2"`."""


@dataclasses.dataclass(frozen=True)
class BlockFormat:
    """A block-scaled number format: values in blocks that each share one scale.

    Each block of `block_size` consecutive values is divided by its scale and the results
    are rounded (to nearest, ties to even) to a tiny floating-point element format with
    `ebits` exponent and `mbits` mantissa bits, saturating at `max`. What a tensor loses
    depends on its values *inside each block*, not on its overall range: one large value
    in a block pushes the scale up and the small values of the same block towards zero.

    - OCP Microscaling (MX) formats (`scale="e8m0"`): 32-element blocks, the scale a power
      of two `2**(floor(log2(max|x| of the block)) - emax)` (OCP MX v1.0, section 6.3; the
      `FLOOR` mode of torchao's reference quantizer), kept as an 8-bit exponent (E8M0,
      `2**-127` to `2**127`; a block holding NaN gets a NaN scale).
    - NVFP4 (`scale="e4m3"`): 16-element blocks of E2M1 values; each block's scale is
      `max|x| of the block / 6` stored in float8 E4M3 (so it has 3 mantissa bits, not just
      a power of two), relative to one float32 scale per tensor, `max|x| / (448 * 6)`, that
      brings the largest block scale to E4M3's maximum.

    Attributes:
        name: the key in `BLOCK_FORMATS` and the prefix of its statistic names.
        label: a human-readable name for plots.
        ebits: exponent bits of the element format.
        mbits: mantissa bits of the element format.
        emax: exponent of the largest normal element binade (`max < 2**(emax + 1)`).
        max: the largest element value.
        block_size: values per block.
        scale: `"e8m0"` (MX: a power-of-two scale per block) or `"e4m3"` (NVFP4: a float8
            E4M3 scale per block and a float32 scale per tensor).
        gaussian_error: the relative RMS error (`<name>_error`) of standard normal data,
            the format's floor: what it adds to a tensor without outliers (measured on
            4M values; within 6% for any scale of the data).

    Example:
        >>> f = BLOCK_FORMATS["mxfp4_e2m1"]
        >>> f.max, f.block_size, f.emin
        (6.0, 32, 0)
    """

    name: str
    label: str
    ebits: int
    mbits: int
    emax: int
    max: float
    block_size: int
    scale: str
    gaussian_error: float

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal element binade (below it: subnormals)."""
        return 2 - (1 << (self.ebits - 1))

    @property
    def min_subnormal(self) -> float:
        """The smallest positive element value (before scaling)."""
        return float(2.0 ** (self.emin - self.mbits))


BLOCK_FORMATS: dict[str, BlockFormat] = {
    f.name: f
    for f in (
        BlockFormat("mxfp8_e4m3", "MXFP8 E4M3", 4, 3, 8, 448.0, 32, "e8m0", 0.0293),
        BlockFormat("mxfp8_e5m2", "MXFP8 E5M2", 5, 2, 15, 57344.0, 32, "e8m0", 0.0539),
        BlockFormat("mxfp6_e3m2", "MXFP6 E3M2", 3, 2, 4, 28.0, 32, "e8m0", 0.0539),
        BlockFormat("mxfp6_e2m3", "MXFP6 E2M3", 2, 3, 2, 7.5, 32, "e8m0", 0.0284),
        BlockFormat("mxfp4_e2m1", "MXFP4 E2M1", 2, 1, 2, 6.0, 32, "e8m0", 0.115),
        BlockFormat("nvfp4", "NVFP4", 2, 1, 2, 6.0, 16, "e4m3", 0.0951),
    )
}
"""The block-scaled formats that the `<format>_error` and `<format>_underflow` statistics
of `tensor_tracker.stats` simulate, by key."""
