"""Block-format statistics: what MX and NVFP4 quantization would do to a tensor, and the
dynamic range inside its blocks, computed on the tensor's device (see `spec.blocks`).

Each `Blocks` item of a stats spec (the plain names of `BLOCK_NAMES` make one together,
blocked along the last dimension) adds to the raw vector: the count of nonzero values,
then for each format named `(squared error, sum of squares, values flushed to zero)`, then
the largest block dynamic range in log2 units when asked for. Sums and counts combine
across ranks by adding up, the range by its maximum (see `merging`).

The tensor is simulated, never changed: the squared errors are summed per block in the
block's scaled units (where every value is at most a few times the element format's
maximum, so nothing overflows float32) and only the per-block sums are rescaled, in
float64, by the block's power-of-two scale. No Python loop runs over blocks and nothing is
read back to the host.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ._kernels import F64, NAN
from ._layout import Derive
from ._spec import BLOCK_NAMES, Blocks, check_dim
from .formats import BLOCK_FORMATS, BlockFormat

__all__ = ["BlocksFn", "add_block_derivers", "block_empty", "block_items", "block_rules"]

_F32 = torch.float32
_I32 = torch.int32
_I64 = torch.int64
_RANGE = "block_dynamic_range"
_RANGE_BLOCK = 32
_NV_SCALE_MAX = 448.0  # float8 E4M3's largest value: NVFP4's block scales are E4M3
_MAGIC = 1.5 * 2.0**23
_EXPONENT_BITS = 0x7F800000


def block_items(items: Sequence[object]) -> list[Blocks]:
    """The `Blocks` of a parsed stats spec, in raw-vector order: the plain block-format
    names together first (blocked along the last dimension), then each `blocks(...)`."""
    plain = tuple(i for i in items if isinstance(i, str) and i in BLOCK_NAMES)
    out = [Blocks(plain)] if plain else []
    return out + [i for i in items if isinstance(i, Blocks)]


def _formats(config: Blocks) -> list[BlockFormat]:
    """The formats whose error or underflow `config` asks for, in `BLOCK_FORMATS` order."""
    prefixes = {n.rsplit("_", 1)[0] for n in config.stats if n != _RANGE}
    return [f for key, f in BLOCK_FORMATS.items() if key in prefixes]


def block_rules(config: Blocks) -> list[str]:
    """How each raw slot of `config` combines across parts (see `merging`)."""
    rules = ["sum"] + ["sum"] * 3 * len(_formats(config))
    return rules + (["max"] if _RANGE in config.stats else [])


def block_empty(config: Blocks) -> list[float]:
    """The raw slots of `config` for an empty tensor: no sums, no blocks."""
    return [0.0 if rule == "sum" else -torch.inf for rule in block_rules(config)]


def _exponent(a: Tensor) -> Tensor:
    """floor(log2(a)) of float32 `a >= 0`, read from its exponent field (int32): -127 for
    zero and float32 subnormals, 128 for inf and NaN."""
    return a.view(_I32).bitwise_right_shift(23).bitwise_and(255).sub(127)


def _pow2(e: Tensor) -> Tensor:
    """`2.0**e` as float32 for int32 `e` in [-126, 127], built from the exponent field
    (exact, and no transcendental function)."""
    return e.add(127).bitwise_left_shift(23).view(_F32)


def _pow2_f64(e: Tensor) -> Tensor:
    """`2.0**e` as float64 for integer `e` in [-1022, 1023]."""
    return e.to(_I64).add(1023).bitwise_left_shift(52).view(F64)


def _round_elements(v: Tensor, fmt: BlockFormat) -> Tensor:
    """`v` (float32, already divided by its block's scale) rounded to the element format:
    to nearest, ties to even, saturating at `±fmt.max`; NaN stays NaN.

    Arithmetic, in 8 elementwise passes: torch has no casts to the 6- and 4-bit formats,
    and on the CPU its float8 casts back to float32, its `round` and its table lookup
    (`bucketize`) were each slower than all of this.
    """
    # With `mbits` mantissa bits, the values of the binade [2**e, 2**(e+1)) are multiples
    # of 2**(e - mbits), and the subnormals (below 2**emin) those of the lowest binade.
    # 2**e is |v| with its mantissa bits cleared (NaN and inf give inf: clamped to emax).
    binade = v.view(_I32).bitwise_and(_EXPONENT_BITS).view(_F32)
    step = binade.clamp_(2.0**fmt.emin, 2.0**fmt.emax).mul_(2.0**-fmt.mbits)
    # To an integer, ties to even: adding 1.5 * 2**23 leaves a float32 of magnitude below
    # 2**22 no fraction bits, so the addition rounds as IEEE does.
    q = (v / step).add_(_MAGIC).sub_(_MAGIC).mul_(step)
    return q.clamp_(-fmt.max, fmt.max)


class _Blocked:
    """One tensor cut into blocks `[rows, blocks, size]` (float32), with what every
    format reads: magnitudes, block maxima, nonzero counts.

    Attributes:
        x, a: the blocks and their magnitudes.
        amax: each block's largest magnitude `[rows, blocks, 1]` (NaN when it holds NaN).
        nonzero: how many values are nonzero (0-d, int64).
        not_zero_if_exact: how many values would quantize to something nonzero if
            nothing flushed: the nonzero values, and the zeros of blocks holding NaN
            (which become NaN); see `_flushed`.
    """

    __slots__ = ("a", "amax", "nonzero", "not_zero_if_exact", "x")

    def __init__(self, x: Tensor) -> None:
        self.x = x
        self.a = x.abs()
        self.amax = self.a.amax(-1, keepdim=True)  # NaN when the block holds one
        per_block = torch.count_nonzero(x, dim=-1).unsqueeze(-1)
        self.nonzero = per_block.sum()
        # A block holding NaN quantizes to NaN whole: its zeros do not come out zero.
        nan_zeros = torch.where(self.amax.isnan(), x.shape[-1] - per_block, 0).sum()
        self.not_zero_if_exact = self.nonzero + nan_zeros


def _cut(x: Tensor, dim: int, size: int) -> Tensor | None:
    """`x` (float32) as `[rows, blocks, size]` blocks along `dim`, a last partial block
    of each row padded with zeros; None when `x` has no dimension `dim`."""
    if x.dim() == 0:
        x = x.reshape(1)
    if not -x.dim() <= dim < x.dim():
        return None
    x = x.movedim(dim, -1)
    length = x.shape[-1]
    # Blocks contiguous in memory, for the reductions over them.
    x = x.reshape(-1, length).contiguous()
    pad = -length % size
    if pad:
        x = torch.nn.functional.pad(x, (0, pad))
    return x.view(x.shape[0], -1, size)


def _mx(b: _Blocked, fmt: BlockFormat) -> list[Tensor]:
    """`(squared error, sum of squares, flushed to zero)` of MX quantization."""
    # OCP MX v1.0 section 6.3: X = 2**(floor(log2(max|x|)) - emax), clamped to what E8M0
    # holds; a block holding NaN gets the NaN scale (every value of it becomes NaN).
    s = _exponent(b.amax).sub_(fmt.emax).clamp_(-127, 127)
    inv = torch.where(b.amax.isnan(), NAN, _pow2(s.neg().clamp_(-126, 127)))
    v = b.x * inv
    q = _round_elements(v, fmt)
    flushed = _flushed(q, b)
    # Per block, in scaled units, then rescaled by 4**s in float64.
    weight = _pow2_f64(s.squeeze(-1) * 2)
    err = torch.linalg.vector_norm(q.sub_(v), dim=-1).to(F64).square_().mul_(weight).sum()
    x2 = torch.linalg.vector_norm(v, dim=-1).to(F64).square_().mul_(weight).sum()
    return [err, x2, flushed]


def _nvfp4(b: _Blocked, fmt: BlockFormat) -> list[Tensor]:
    """`(squared error, sum of squares, flushed to zero)` of NVFP4 quantization."""
    # The per-tensor float32 scale brings the largest block scale to E4M3's maximum:
    # y = x * enc has |y| <= 6 * 448 (NaN and ±inf left out of the tensor's maximum).
    amax = b.amax.squeeze(-1)
    tensor_max = torch.where(amax.isfinite(), amax, 0.0).amax()
    enc = torch.where(tensor_max > 0, (6 * _NV_SCALE_MAX) / tensor_max, 1.0)
    enc = enc.clamp(max=torch.finfo(_F32).max)
    y = b.x * enc
    ymax = b.amax * enc
    scale = (ymax / fmt.max).clamp_(max=_NV_SCALE_MAX).to(torch.float8_e4m3fn).to(_F32)
    # A block whose scale rounds to 0 in E4M3 flushes whole; a NaN scale keeps NaN.
    v = torch.where(scale == 0, 0.0, y / scale)
    q = _round_elements(v, fmt)
    flushed = _flushed(q, b)
    inv2 = enc.to(F64).square().reciprocal()
    err = torch.linalg.vector_norm(q.mul_(scale).sub_(y)).to(F64).square() * inv2
    x2 = torch.linalg.vector_norm(y).to(F64).square() * inv2
    return [err, x2, flushed]


def _flushed(q: Tensor, b: _Blocked) -> Tensor:
    """How many nonzero values quantized to zero: one count of `q`'s nonzero values (the
    zeros of `x` stay zero unless their block holds NaN; see `_Blocked`)."""
    return (b.not_zero_if_exact - torch.count_nonzero(q)).to(F64)


def _dynamic_range(b: _Blocked) -> Tensor:
    """The largest log2(max|x|) - log2(min nonzero |x|) over blocks (-inf: none nonzero)."""
    low = torch.where(b.a == 0, torch.inf, b.a).amin(-1)
    return (b.amax.squeeze(-1).log2() - low.log2()).amax().to(F64)


class BlocksFn:
    """The raw numbers of one `Blocks` item (see the module docstring)."""

    __slots__ = ("argument", "config", "formats", "width")

    def __init__(self, config: Blocks) -> None:
        self.config = config
        self.argument = f"blocks(dim={config.dim})"
        self.formats = _formats(config)
        self.width = len(block_rules(config))

    def _size(self, fmt: BlockFormat | None) -> int:
        size = self.config.block_size
        if size is not None:
            return size
        return _RANGE_BLOCK if fmt is None else fmt.block_size

    def __call__(self, x: Tensor) -> Tensor:
        """The raw numbers of non-empty `x` (any shape; float32 or wider) as float64 on
        its device; NaN when `x` (0-d or 1-D) has no dimension `config.dim`."""
        check_dim(self.config.dim, x.shape if x.dim() else (1,), self.argument)
        x = x.to(_F32)
        cut: dict[int, _Blocked | None] = {}

        def blocked(size: int) -> _Blocked | None:
            if size not in cut:
                xb = _cut(x, self.config.dim, size)
                cut[size] = None if xb is None else _Blocked(xb)
            return cut[size]

        parts: list[Tensor] = []
        nonzero: Tensor | None = None
        for fmt in self.formats:
            b = blocked(self._size(fmt))
            if b is None:
                return torch.full((self.width,), NAN, dtype=F64, device=x.device)
            if nonzero is None:
                nonzero = b.nonzero.to(F64)
            parts += (_nvfp4 if fmt.scale == "e4m3" else _mx)(b, fmt)
        if _RANGE in self.config.stats:
            b = blocked(self._size(None))
            if b is None:
                return torch.full((self.width,), NAN, dtype=F64, device=x.device)
            parts.append(_dynamic_range(b))
            if nonzero is None:
                nonzero = b.nonzero.to(F64)
        assert nonzero is not None
        return torch.stack([nonzero, *parts])


def add_block_derivers(derivers: dict[str, Derive], config: Blocks, offset: int) -> None:
    """Add the derivers of `config`'s statistics, whose raw numbers sit at `offset`."""
    nonzero = offset
    suffix = config.suffix
    for i, fmt in enumerate(_formats(config)):
        err, x2, flushed = (offset + 1 + 3 * i + k for k in range(3))
        if f"{fmt.name}_error" in config.stats:
            derivers[f"{fmt.name}_error{suffix}"] = _error(err, x2)
        if f"{fmt.name}_underflow" in config.stats:
            derivers[f"{fmt.name}_underflow{suffix}"] = _fraction(flushed, nonzero)
    if _RANGE in config.stats:
        slot = offset + len(block_rules(config)) - 1
        derivers[_RANGE + suffix] = lambda r, n: torch.where(n == 0, NAN, r[:, slot].clamp(min=0.0))


# An empty tensor gives NaN like the other statistics; an all-zero one is represented
# exactly: error and underflow 0, not 0/0.


def _error(err: int, x2: int) -> Derive:
    return lambda r, n: torch.where(
        n == 0, NAN, torch.where(r[:, x2] == 0, 0.0, (r[:, err] / r[:, x2]).sqrt())
    )


def _fraction(count: int, of: int) -> Derive:
    return lambda r, n: torch.where(
        n == 0, NAN, torch.where(r[:, of] == 0, 0.0, r[:, count] / r[:, of])
    )
