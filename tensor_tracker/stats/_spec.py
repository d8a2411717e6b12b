"""What a stats spec names: built-in statistic names, `Statistic`, `histogram()`; parsing."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

from torch import Tensor

from .._validate import check_bool, check_count, check_int, check_number, check_type
from ..errors import ArgumentTypeError, ArgumentValueError
from ._attention import bind_sdpa, logit_stats
from ._builtin import BUILTINS, FORMAT_NAMES
from .formats import BLOCK_FORMATS

__all__ = [
    "ATTENTION_NAMES",
    "BLOCK_NAMES",
    "DEFAULT",
    "EXP_HIST",
    "NAMES",
    "VECTOR_STATS",
    "AttentionLogits",
    "Blocks",
    "CustomName",
    "Histogram",
    "Item",
    "PerAxis",
    "Statistic",
    "attention_logits",
    "blocks",
    "channel_dim",
    "check_dim",
    "health",
    "histogram",
    "parse_items",
    "per_channel",
    "per_sample",
]


BLOCK_NAMES: tuple[str, ...] = (
    *(f"{f}_{kind}" for f in BLOCK_FORMATS for kind in ("error", "underflow")),
    "block_dynamic_range",
)
"""The block-format statistics: `<format>_error` and `<format>_underflow` for each format of
`tensor_tracker.formats.BLOCK_FORMATS`, and `block_dynamic_range` (see `blocks`)."""

NAMES: tuple[str, ...] = tuple(BUILTINS) + FORMAT_NAMES + BLOCK_NAMES
"""Every built-in statistic name, in a stable order."""

DEFAULT: tuple[str, ...] = ("mean", "std", "rms", "abs_max", "min", "max", "numel")
"""What `stats=True` computes: mean/spread and min/max, two reductions on a GPU (`std_mean`,
`aminmax`) and three vectorised passes on the CPU (`sum`, `dot`, `aminmax`)."""

health: tuple[str, ...] = ("rms", "abs_max", "kurtosis")
"""A preset cheap enough to leave on for a whole run (`track(model, stats=stats.health,
every=10)`): each tensor's scale (`rms`), its largest magnitude (`abs_max`) and how
heavy-tailed it is (`kurtosis`): two kernels, `aminmax` and the central moments, which
also give `rms`."""

HIST_EXTRAS = ("below", "above", "zero", "nonfinite", "rejected")
"""The extra counts of a histogram, named `<name>_<extra>`."""


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
            raise ArgumentValueError(
                f"a statistic's name must be a non-empty str, got {self.name!r}"
            )
        if not callable(self.fn):
            raise ArgumentTypeError(
                f"statistic {self.name!r}: fn must be callable, got {self.fn!r}"
            )


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
        check_count(self.bins, "histogram(bins=...)", "bins")
        rng = self.range
        check_type(rng, (tuple, list), "histogram(range=...)", "(lo, hi)")
        check_bool(self.log2, "histogram(log2=...)")
        if (
            len(rng) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in rng)
            or not all(math.isfinite(v) for v in rng)
            or not rng[0] < rng[1]
        ):
            raise ArgumentValueError(
                f"histogram(range=...) must be (lo, hi) with finite lo < hi, got {rng!r}"
            )
        object.__setattr__(self, "range", (float(rng[0]), float(rng[1])))
        check_count(self.sample_n, "histogram(sample_n=...)", "values to count", optional=True)
        if self.reject_sigma is not None:
            check_number(
                self.reject_sigma,
                "histogram(reject_sigma=...)",
                "standard deviations, or None",
                low=0,
                open_low=True,
            )
        check_int(self.seed, "histogram(seed=...)")
        check_type(self.name, str, "histogram(name=...)", "a non-empty str")
        if not self.name:
            raise ArgumentValueError(
                f"histogram(name=...) must be a non-empty str, got {self.name!r}"
            )

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
        return (self.name, *(f"{self.name}_{e}" for e in HIST_EXTRAS))


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
    values counted. Bins are half-open, `[edge[i], edge[i+1])`. The range stays fixed (a
    range fitted to the values would need them read back first); when more than 1% of the
    values a tracker counted fell outside it, the tracker warns at the end of its `with`
    block with the counts and a wider `range=` to pass.

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


EXP_HIST = Histogram(bins=254, range=(-126.0, 128.0), log2=True, name="exp_hist")
"""The built-in exponent histogram, recorded by naming `"exp_hist"` in a stats spec
(`stats=[*stats.DEFAULT, "exp_hist"]`).

One bin per power of two (binade) over float32's whole normal range: bin `i` counts the
values with `2**(i - 126) <= |x| < 2**(i - 125)`, from `2**-126` (float32's smallest normal)
up to `2**128` (past float32's largest finite value), 254 bins. Its extra counts are
`exp_hist_zero` (exact zeros), `exp_hist_below` (float32 subnormals, and those of a float64
tensor: `0 < |x| < 2**-126`), `exp_hist_above` (float64 values `>= 2**128`),
`exp_hist_nonfinite` (NaN and ±inf together) and `exp_hist_rejected` (always 0). For a
float32 tensor the bin of a value is its exponent field: one integer pass and one count,
on the tensor's device, no host sync.

Every number format's overflow and underflow fraction can be read from it after the fact:
`tensor_tracker._data.format_fractions` (exact where the format's limit is a power of two;
see there for which are bounds)."""


@dataclasses.dataclass(frozen=True)
class Blocks:
    """Block-format statistics over chosen blocks; make one with `blocks()`.

    Attributes:
        stats: names from `BLOCK_NAMES`.
        dim: the dimension the blocks run along.
        block_size: values per block; `None`: each format's own (32 for MX and
            `block_dynamic_range`, 16 for NVFP4).
        suffix: added to each name to make its column name.

    Example:
        >>> blocks("nvfp4_error", dim=0, suffix="_dim0").names
        ('nvfp4_error_dim0',)
    """

    stats: tuple[str, ...]
    dim: int = -1
    block_size: int | None = None
    suffix: str = ""

    def __post_init__(self) -> None:
        stats = self.stats
        if isinstance(stats, str) or not isinstance(stats, (tuple, list)) or not stats:
            raise ArgumentValueError(
                f"blocks(*stats): name at least one of {', '.join(BLOCK_NAMES)}; got {stats!r}"
            )
        unknown = [n for n in stats if n not in BLOCK_NAMES]
        if unknown:
            raise ArgumentValueError(
                f"blocks(*stats): {unknown} are not block-format statistics; "
                f"use names from {', '.join(BLOCK_NAMES)}"
            )
        if len(set(stats)) != len(stats):
            raise ArgumentValueError(f"blocks(*stats): names repeated in {list(stats)}")
        object.__setattr__(self, "stats", tuple(stats))
        if not isinstance(self.dim, int) or isinstance(self.dim, bool):
            raise ArgumentTypeError(f"blocks(dim=...) must be an int, got {self.dim!r}")
        check_count(self.block_size, "blocks(block_size=...)", "elements per block", optional=True)
        if not isinstance(self.suffix, str):
            raise ArgumentTypeError(f"blocks(suffix=...) must be a str, got {self.suffix!r}")

    @property
    def names(self) -> tuple[str, ...]:
        """The column names: each of `stats` followed by `suffix`."""
        return tuple(n + self.suffix for n in self.stats)


def blocks(*stats: str, dim: int = -1, block_size: int | None = None, suffix: str = "") -> Blocks:
    """Block-format statistics with blocks along another dimension, or of another size.

    The names of `BLOCK_NAMES` in a stats spec (`stats=["mxfp8_e4m3_error"]`) cut each
    tensor into blocks along its last dimension, of the format's own size (32 values for
    the MX formats and `block_dynamic_range`, 16 for NVFP4). That is how the input of a
    matmul `x @ W.T` is blocked (along the reduced dimension, `in_features`); the weight is
    blocked along its own last dimension too, and its gradient along dimension 0 in the
    backward matmul. Use `blocks` to choose: `blocks("mxfp8_e4m3_error", dim=0)`.

    Rows of the chosen dimension whose length is not a multiple of the block size end with
    a shorter block: it is padded with zeros, which changes neither its maximum nor any
    count or sum (zeros quantize to zero exactly). A 1-D tensor that has no dimension `dim`
    (a bias with `dim=1`) gets NaN; a 0-d tensor is one block of one value. A tensor of
    two or more dimensions without it is refused (`check_dim`): the tracker raises
    `ArgumentValueError` from its hook, after removing its hooks, keeping what it recorded.

    Args:
        *stats: names from `BLOCK_NAMES`, e.g. `"nvfp4_error"`, `"block_dynamic_range"`.
        dim: the dimension the blocks run along (negative counts from the end).
        block_size: values per block for every statistic named here; `None` (default):
            each format's own size.
        suffix: added to each name to make the column names, so that the same statistic
            can be recorded for several blockings, e.g. `suffix="_dim0"`.

    Returns:
        A `Blocks` to put in a stats spec.

    Raises:
        ValueError: an unknown or repeated name, or a block size below 1 (and, when a
            tensor of 2 or more dimensions arrives, a `dim` it does not have).
        TypeError: `dim` not an int or `suffix` not a str.

    Example:
        >>> fn = parse(["mxfp8_e4m3_error", blocks("mxfp8_e4m3_error", dim=0, suffix="_dim0")])
        >>> fn.names
        ('mxfp8_e4m3_error', 'mxfp8_e4m3_error_dim0')
    """
    return Blocks(stats, dim, block_size, suffix)


VECTOR_STATS: tuple[str, ...] = ("abs_max", "rms", "mean", "abs_mean")
"""The statistics `per_channel` and `per_sample` reduce with."""


@dataclasses.dataclass(frozen=True)
class PerAxis:
    """One statistic per index of one dimension (a vector per tensor); make one with
    `per_channel` or `per_sample`.

    Attributes:
        stat: one of `VECTOR_STATS`.
        dim: the dimension kept; every other one is reduced. `None` (channels only): the
            channel dimension of each tensor's layout, `channel_dim(tensor.dim())`.
        axis: `"channel"` or `"sample"`: what the vector is per, and so its name
            `<stat>_per_<axis>`.

    Example:
        >>> per_channel("rms").name, per_sample("abs_max", dim=1).name
        ('rms_per_channel', 'abs_max_per_sample')
    """

    stat: str
    dim: int | None
    axis: str

    def __post_init__(self) -> None:
        call = f"per_{self.axis}"
        if self.axis not in ("channel", "sample"):
            raise ArgumentValueError(
                f"PerAxis(axis=...) must be 'channel' or 'sample', got {self.axis!r}"
            )
        if not isinstance(self.stat, str) or self.stat not in VECTOR_STATS:
            raise ArgumentValueError(
                f"{call}(stat=...) must be one of {', '.join(VECTOR_STATS)}; got {self.stat!r}"
            )
        if self.dim is None and self.axis == "channel":
            return
        if not isinstance(self.dim, int) or isinstance(self.dim, bool):
            kind = "an int or None" if self.axis == "channel" else "an int"
            raise ArgumentTypeError(f"{call}(dim=...) must be {kind}, got {self.dim!r}")

    @property
    def name(self) -> str:
        """The column name: `<stat>_per_channel` or `<stat>_per_sample`."""
        return f"{self.stat}_per_{self.axis}"


def channel_dim(ndim: int) -> int:
    """The dimension holding the channels of a tensor of `ndim` dimensions in PyTorch's
    layouts, what `per_channel` and `sample_values` keep by default: 1 for 4-D and 5-D
    tensors (`[batch, channels, height, width]` and `[batch, channels, depth, height,
    width]`: a CNN's convolutions, norms, activations and blocks alike; a `[batch, heads,
    query, key]` attention map gives one value per head), else the last (`[batch, seq,
    hidden]`, `[batch, features]`, a `Linear` weight's input features). A Conv1d's
    `[batch, channels, length]` is the one common layout this misreads: pass `dim=1`.

    Example:
        >>> channel_dim(4), channel_dim(3), channel_dim(2)
        (1, -1, -1)
    """
    return 1 if ndim in (4, 5) else -1


def check_dim(dim: int, shape: Sequence[int], argument: str) -> bool:
    """Whether a tensor of `shape` has dimension `dim`; `False` for a 0-d or 1-D tensor
    without it (a loss, a bias: recorded as empty or NaN). A tensor of two or more
    dimensions without it means `dim` fits none of the activations (`per_channel(dim=99)`):
    refused with `ArgumentValueError` naming `argument` (e.g. `"per_channel(dim=99)"`) and
    the shape.

    Example:
        >>> check_dim(1, (8,), "blocks(dim=1)")
        False
    """
    nd = len(shape)
    if -nd <= dim < nd:
        return True
    if nd >= 2:
        raise ArgumentValueError(
            f"{argument}: a tensor of shape {tuple(shape)} has no dimension {dim}; pass a "
            f"dimension from {-nd} to {nd - 1} (0-d and 1-D tensors without it are recorded "
            "as empty or NaN)"
        )
    return False


def per_channel(stat: str, dim: int | None = None) -> PerAxis:
    """A statistic per channel: a vector of one number per index of the channel dimension,
    reducing every other dimension, to put in a stats spec.

    By default (`dim=None`) the channels are those of each tensor's layout
    (`channel_dim`): the last dimension of a `[batch, seq, hidden]` activation, one
    number per hidden unit, the view that shows the outlier channels of LLM.int8 and
    "massive activations", which a per-tensor `abs_max` cannot attribute to a channel;
    dimension 1 of a CNN's `[batch, channels, height, width]` feature maps. Pass `dim=` to
    keep another dimension in every tensor (`dim=1` for a Conv1d's `[batch, channels,
    length]`, `dim=0` for a weight's output features).

    The vector is computed on the tensor's device in the same hook as the other
    statistics (one reduction, no host sync) and kept in the tracker's statistics store,
    not as a Python object per record. `to_frame()` gets a column `<stat>_per_channel`
    holding one float64 numpy array per record; `Stats[name]` gives the 1-D tensor.

    Widths: each record keeps its own width (the size of `dim` in that tensor), so a
    module whose outputs change shape (a variable sequence length with `dim=1`, a last
    smaller batch with `per_sample`) records them all. (Fixing each module's width at its
    first call would leave two bad choices for such a record: raise in the middle of a
    run, or cut and pad the vector into numbers never computed; a length per record costs
    8 bytes.) A 0-d or 1-D tensor without dimension `dim` (a scalar loss, a bias with
    `dim=1`) or a tensor with no values gives an empty vector; a 1-D tensor's entries are
    each their own channel. A tensor of two or more dimensions without dimension `dim`
    (`dim=99`) is refused (`check_dim`): the tracker raises `ArgumentValueError` naming
    the argument and the tensor's shape from its hook, after removing its hooks, keeping
    what it recorded (as `max_bytes=` does).

    Statistics: `abs_max` (largest |x|), `rms` (`sqrt(mean(x**2))`), `mean`, `abs_mean`
    (`mean(|x|)`), each over the values sharing that index. NaN propagates into the
    entries it touches (`abs_max` too). Half-precision tensors are reduced in float32,
    integer ones in float64, complex ones by their magnitudes.

    Args:
        stat: one of `"abs_max"`, `"rms"`, `"mean"`, `"abs_mean"`.
        dim: the dimension kept (negative counts from the end); `None` (default): each
            tensor's channel dimension, `channel_dim(tensor.dim())`.

    Returns:
        A `PerAxis` to put in a stats spec, e.g. `stats=[*stats.DEFAULT,
        stats.per_channel("abs_max")]`.

    Raises:
        ArgumentValueError: `stat` is not one of those four (and, when a tensor of 2 or
            more dimensions arrives, a `dim` it does not have).
        ArgumentTypeError: `dim` is not an int or None.

    Example:
        >>> fn = parse(["rms", per_channel("abs_max")])
        >>> s = fn(torch.tensor([[1.0, -5.0], [-3.0, 2.0]]))
        >>> s["abs_max_per_channel"]
        tensor([3., 5.], dtype=torch.float64)
        >>> images = torch.zeros(2, 3, 4, 4); images[:, 1] = 7.0  # [batch, channels, h, w]
        >>> fn(images)["abs_max_per_channel"]
        tensor([0., 7., 0.], dtype=torch.float64)
    """
    return PerAxis(stat, dim, "channel")


def per_sample(stat: str, dim: int = 0) -> PerAxis:
    """A statistic per sample: one number per batch item (index of dimension `dim`),
    reducing every other dimension, to put in a stats spec; see `per_channel`, which
    this mirrors (same statistics, storage and widths).

    It finds the sample of a batch whose activations or gradients stand out, without
    keeping full copies. Its column in `to_frame()` is `<stat>_per_sample`. A last batch
    smaller than the others simply records a shorter vector.

    Args:
        stat: one of `"abs_max"`, `"rms"`, `"mean"`, `"abs_mean"`.
        dim: the batch dimension (0 by default; 1 for sequence-first layouts).

    Returns:
        A `PerAxis` to put in a stats spec.

    Raises:
        ArgumentValueError: `stat` is not one of those four (and, when a tensor of 2 or
            more dimensions arrives, a `dim` it does not have).
        ArgumentTypeError: `dim` is not an int.

    Example:
        >>> fn = parse([per_sample("rms")])
        >>> fn(torch.tensor([[3.0, 4.0], [0.0, 0.0]]))["rms_per_sample"]
        tensor([3.5355, 0.0000], dtype=torch.float64)
    """
    return PerAxis(stat, dim, "sample")


ATTENTION_NAMES: tuple[str, str] = ("max_logit_per_head", "entropy_per_head")
"""The vectors `attention_logits` records, in order."""


@dataclasses.dataclass(frozen=True)
class AttentionLogits:
    """Per-head attention logit statistics of `scaled_dot_product_attention` calls; make
    one with `attention_logits`.

    Called like `torch.nn.functional.scaled_dot_product_attention` (the same arguments,
    `value` and `dropout_p` unused), it returns the two vectors instead of attending;
    `of_call(args, kwargs)` takes a recorded call's arguments as they were passed.

    Attributes:
        rows: query rows scored per head (evenly spaced), or `None` for every row.

    Example:
        >>> item = attention_logits()
        >>> q = k = torch.eye(2)[None, None]  # one batch item and head, 2 rows, 2 features
        >>> top, entropy = item(q, k, q, scale=1.0, is_causal=True)
        >>> top, entropy  # row 0 sees key 0 only; row 1 sees logits (0, 1)
        (tensor([1.], dtype=torch.float64), tensor([0.2911], dtype=torch.float64))
    """

    rows: int | None = None

    def __post_init__(self) -> None:
        check_count(self.rows, "attention_logits(rows=...)", "query rows per head", optional=True)

    @property
    def names(self) -> tuple[str, str]:
        """The column names: `max_logit_per_head`, `entropy_per_head`."""
        return ATTENTION_NAMES

    def __call__(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor | None = None,
        attn_mask: Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """`(max_logit, entropy)` per head of `scaled_dot_product_attention(query, key,
        value, ...)`: float64 vectors of `heads` values on the query's device, computed
        without host synchronisation in chunks of query rows (see `attention_logits`).
        `value` is not read; `dropout_p` does not enter (the statistics are those of the
        softmax before dropout)."""
        del value, dropout_p
        return logit_stats(query, key, attn_mask, is_causal, scale, enable_gqa, self.rows)

    def of_call(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[Tensor, Tensor]:
        """The statistics of the call `scaled_dot_product_attention(*args, **kwargs)`.

        Example:
            >>> q = torch.randn(2, 3, 5, 4)
            >>> [v.shape for v in attention_logits().of_call((q, q, q), {"is_causal": True})]
            [torch.Size([3]), torch.Size([3])]
        """
        return self(**bind_sdpa(args, kwargs))


def attention_logits(rows: int | None = None) -> AttentionLogits:
    """Attention logits per head without storing them, to put in a stats spec: for each
    `torch.nn.functional.scaled_dot_product_attention` call, the largest logit and the
    mean attention entropy of every head.

    The logits are what sdpa takes the softmax of: `query @ key.T * scale` plus the mask
    (a float mask added, `-inf` where a bool mask is False or above a causal diagonal,
    top-left aligned as torch defines `is_causal` when the query and key lengths differ).
    `max_logit_per_head` is the largest over the batch and the query rows: the quantity
    that grows before attention collapses (what QK-norm and QK-clip keep down).
    `entropy_per_head` is each query row's softmax entropy `-sum(p * log p)` in nats,
    averaged over the batch and the query rows: near 0 for a head that attends to one
    key, `log(S)` for one that spreads evenly over `S` keys. With grouped-query attention
    there is one value per *query* head.

    Fused attention never materialises the `[batch, heads, L, S]` scores, and neither does
    this: they are computed from `query` and `key` on their device, a chunk of query rows
    at a time, so the extra memory stays under 32 MiB (`CHUNK_BYTES` in
    `tensor_tracker.stats._attention`) whatever the sequence length, plus a float32 copy of
    the key for half-precision inputs and, at least, one row of scores for every batch item
    and head. Scores are computed in float32 (float64 inputs in float64), with no host
    synchronisation. Dropout does not enter: these are the statistics of the softmax
    before it. Fully masked query rows (all logits `-inf`) have no softmax and are left
    out of both statistics; a head with no other row gets NaN. A NaN in the inputs
    propagates into its head's values.

    Where it applies: to the records of `scaled_dot_product_attention` calls, from the
    call's `query`, `key`, `attn_mask`, `is_causal`, `scale` and `enable_gqa`: whatever
    records such a call hands its arguments to `StatsStore.put(output, attention=(args,
    kwargs))` or `StatsFn.vectors(output, attention=...)`. On every other record
    (a module's output, another operation, a gradient) the item is ignored: both vectors
    are empty there, so `stats=[*stats.DEFAULT, stats.attention_logits()]` can be given to
    a whole model. `to_frame()` holds the columns `max_logit_per_head` and
    `entropy_per_head`, one float64 numpy array per record.

    Args:
        rows: score only this many query rows per head, evenly spaced over the sequence
            (rows `(2k + 1) * L // (2 * rows)`, the same rows every call, chosen on the
            device): an *estimate* of both statistics (a logit peak on a row left out is
            missed) at about `rows / L` of the cost. `None` (default), or `rows >= L`: every
            row, exact.

    Returns:
        An `AttentionLogits` to put in a stats spec; it can also be called like sdpa.

    Raises:
        ArgumentValueError: `rows` below 1.
        ArgumentTypeError: `rows` not an int or None.

    Example:
        >>> fn = parse(["rms", attention_logits()])
        >>> q, k, v = torch.randn(2, 4, 16, 8), torch.randn(2, 4, 16, 8), torch.randn(2, 4, 16, 8)
        >>> out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        >>> top, entropy = fn.vectors(out, attention=((q, k, v), {"is_causal": True}))[:2]
        >>> top.shape, bool((entropy <= math.log(16)).all())
        (torch.Size([4]), True)
        >>> fn(out)["max_logit_per_head"]  # a tensor alone: not an sdpa call, ignored
        tensor([], dtype=torch.float64)
    """
    return AttentionLogits(rows)


@dataclasses.dataclass(frozen=True)
class CustomName:
    """A custom statistic in a pickled layout: its name (its function is not needed to read
    what it computed, and may not be picklable)."""

    name: str


Item: TypeAlias = (
    str
    | Callable[[Tensor], Any]
    | tuple[str, Callable[[Tensor], Any]]
    | Statistic
    | Histogram
    | Blocks
    | PerAxis
    | AttentionLogits
)


def _bad_name_message(name: object, extra: str = "") -> str:
    return (
        f"stats=: unknown statistic {name!r}. Built-in names: {', '.join(NAMES)}, "
        '"exp_hist" (the exponent histogram). '
        'Custom statistics can be passed as ("name", fn) pairs, e.g. '
        'stats=["mean", ("l1", lambda t: t.abs().sum())], or histogram(...).' + extra
    )


def parse_items(
    spec: object,
) -> list[str | Statistic | Histogram | Blocks | PerAxis | AttentionLogits]:
    """The items of a stats spec (see `parse`): names, `Statistic`s and `Histogram`s."""
    if spec is None or spec is False:
        raise ArgumentTypeError(
            f"stats={spec!r} means 'no statistics'; parse() needs something to compute: "
            "True (the default set), a name, or a list of names / ('name', fn) pairs"
        )
    if spec is True:
        return list(DEFAULT)
    if isinstance(spec, (str, Histogram, Statistic, Blocks, PerAxis, AttentionLogits)):
        spec = [spec]
    if isinstance(spec, Mapping):
        return [Statistic(name, fn) for name, fn in spec.items()]
    if not isinstance(spec, Sequence):
        raise ArgumentTypeError(
            "stats= must be True, a statistic name, a sequence of names / named functions / "
            f'("name", fn) pairs / histogram(...), or a {{"name": fn}} mapping; got {spec!r}'
        )
    hint = ""
    if len(spec) == 2 and isinstance(spec[0], str) and spec[0] not in NAMES and callable(spec[1]):
        hint = f" To pass one custom statistic, wrap the pair in a list: stats=[({spec[0]!r}, fn)]."
    items: list[str | Statistic | Histogram | Blocks | PerAxis | AttentionLogits] = []
    for item in spec:
        if isinstance(item, str) and item == EXP_HIST.name:
            items.append(EXP_HIST)
        elif isinstance(item, str):
            if item not in NAMES:
                raise ArgumentValueError(_bad_name_message(item, hint))
            items.append(item)
        elif isinstance(item, (Statistic, Histogram, Blocks, PerAxis, AttentionLogits)):
            items.append(item)
        elif isinstance(item, tuple):
            if len(item) != 2 or not isinstance(item[0], str) or not callable(item[1]):
                raise ArgumentValueError(f'stats=: expected a ("name", fn) pair, got {item!r}')
            items.append(Statistic(item[0], item[1]))
        elif callable(item):
            name = getattr(item, "__name__", None)
            if not isinstance(name, str) or not name.isidentifier():
                raise ArgumentValueError(
                    f"stats=: cannot name the function {item!r}; pass it as a "
                    '("name", fn) pair, e.g. stats=[("l1", lambda t: t.abs().sum())]'
                )
            items.append(Statistic(name, item))
        else:
            raise ArgumentValueError(_bad_name_message(item))
    return items


def item_name(item: str | Statistic) -> str:
    """The name a spec item (a built-in name or a `Statistic`) is known by."""
    return item if isinstance(item, str) else item.name
