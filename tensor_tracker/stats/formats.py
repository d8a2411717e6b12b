"""Range limits of the low-precision number formats that training runs cast tensors to.

`FORMATS` is what the `F_overflow`, `F_underflow` and `F_subnormal` statistics of
`tensor_tracker.stats` compare against, and what plots draw as reference lines.
"""

from __future__ import annotations

import dataclasses

import torch

__all__ = ["FORMATS", "Format"]


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
