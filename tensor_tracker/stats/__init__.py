"""Named statistics of tensors, computed on the tensor's own device, cheap enough for hooks.

A `StatsFn` (built by `parse`) turns a tensor into a `Stats`: a few numbers computed in a
handful of passes over the tensor and kept *on the tensor's device* in one small float64
vector, so a hook never waits for the GPU. The named statistics (`"std"`, `"rms"`, ...) are
derived from that vector only when they are read, and `stats_table` reads many `Stats` at
once with one transfer per device. (On the CPU, where nothing runs asynchronously, the few
numbers are read back as they are computed: that lets mean and spread take one vectorised
pass fewer, see `_kernels.cpu_moments`.)

Built-in statistic names (see `NAMES`):

- `mean`, `std` (unbiased, like `torch.std`), `rms` (`sqrt(mean(x**2))`), `abs_mean`,
  `abs_max`, `min`, `max`, `numel`;
- `nonfinite`: how many values are NaN or ±inf; `zero_frac`: fraction exactly zero;
- `kurtosis`: `E[(x - mean)**4] / E[(x - mean)**2]**2`, 3 for a Gaussian, 1.8 for a
  uniform distribution, large when a few values stand far out (outlier features before a
  loss spike); NaN when the variance is 0 (a constant or one-element tensor). Computed
  about the tensor's own mean in float64 (exact to float64 rounding however large the
  mean is against the spread; on accelerators this needs two float64 temporaries of the
  tensor's size, on the CPU a fixed 1 MiB buffer per thread); with it, `mean`, `std` and
  `rms` come from the same float64 moments;
- `sum`: one pass, the cheapest statistic: NaN or ±inf whenever the tensor holds a NaN or
  an infinity (and also when finite values sum beyond the reduction dtype, ~3.4e38 in
  float32), so `stats=["sum"]` is the cheapest recording `on_nonfinite=` can watch;
- for each format `F` in `tensor_tracker.formats.FORMATS` (`fp16`, `bf16`, `fp8_e4m3`,
  `fp8_e5m2`): `F_overflow` (fraction with `|x| > max`, ±inf included, NaN not),
  `F_underflow` (fraction of values that are nonzero but flush to zero, `|x| < min_subnormal`)
  and `F_subnormal` (fraction nonzero with `|x| < min_normal`, the underflowing ones
  included). Values exactly at a limit are representable and not counted.
- block-scaled formats: for each `F` in `tensor_tracker.formats.BLOCK_FORMATS`
  (`mxfp8_e4m3`, `mxfp8_e5m2`, `mxfp6_e3m2`, `mxfp6_e2m3`, `mxfp4_e2m1`, `nvfp4`), what
  quantizing the tensor to `F` and back would do, simulated on its device (the tensor is
  not changed), with blocks along its last dimension (`blocks(...)` chooses another
  dimension or block size; a last partial block counts as padded with zeros):

  - `F_error`: the relative RMS quantization error `||dequantize(quantize(x)) - x|| / ||x||`
    (0 for an all-zero tensor). The format's own rounding sets a floor, which Gaussian
    data shows: about 0.03 for MXFP8 E4M3 and MXFP6 E2M3, 0.055 for MXFP8 E5M2 and MXFP6
    E3M2, 0.12 for MXFP4, 0.095 for NVFP4 (`BlockFormat.gaussian_error`). It is the noise
    the format adds, relative to the tensor, and the largest values dominate it: an outlier
    that flushes its block's small values hardly moves it (`F_underflow` shows those). It
    rises well above the floor when the largest values themselves round badly: the MX
    scale is a power of two taken *down* from the block's maximum, so values crowding
    just below a power of two (saturated tanh outputs near ±0.99, sign-like values) land
    between the element format's maximum and the next power of two and saturate (E4M3:
    448 of up to 512, ~10% error, three times its floor).
  - `F_underflow`: the fraction of nonzero values that quantize to zero. Each block's
    scale follows its largest value, so values more than about `log2(max / smallest
    element)` binades below it are lost: 18 for E4M3, 32 for E5M2, 9 for E3M2, 6 for
    E2M3, 3.6 for E2M1 (and in NVFP4 a whole block flushes when its scale falls below
    E4M3's smallest value). For gradients these are updates that never happen.
  - `block_dynamic_range`: the largest, over blocks of 32, of `log2(max |x|) - log2(min
    nonzero |x|)`, in binades (0 when no block holds two different nonzero
    magnitudes). Compare it with the element ranges above: a tensor whose blocks span
    more binades than a format's elements cannot keep its smallest values in it.

  MX blocks get the OCP MX v1.0 scale `2**(floor(log2(max|x|)) - emax)` (torchao's
  `FLOOR` mode), elements rounded to nearest-even and saturated. NVFP4 blocks of 16 get an
  E4M3 scale under a per-tensor float32 scale. Computed in float32 from the tensor's
  values (float64 tensors beyond float32's range are infinite there). A tensor holding
  NaN or ±inf has NaN error; NaN blocks flush nothing; ±inf saturates and flushes the
  rest of its block. Costs about 16 (MX) or 19 (NVFP4) elementwise passes over the tensor
  per format, no host sync (see doc/benchmarks.md).

- `exp_hist` (`EXP_HIST`): the exponent histogram, one count per power of two from
  `2**-126` to `2**128`, plus zeros, float32 subnormals and non-finite values, so that a
  tensor's distribution over number-format ranges can be watched over steps and every
  format's overflow and underflow fraction read after the fact
  (`tensor_tracker._data.format_fractions`). It is opt-in: `stats=[*DEFAULT, "exp_hist"]`.

Sparse tensors (e.g. the gradient of `nn.Embedding(sparse=True)`) are summarised as the
dense tensors they stand for: implicit zeros count as values. Complex tensors are summarised
by their magnitudes `|z|`: `rms` and `abs_max` are then the usual complex RMS and largest
modulus, while `mean`, `std`, `min` and `max` describe the distribution of `|z|` (a
complex mean would not fit in a float column), and format fractions count `|z|` against
each format's limits. Custom statistics receive the complex tensor itself.

`BLOCK_NAMES` lists those block-format statistics; `DEFAULT` the names `stats=True` keeps;
`NAMES` every built-in name. `health` is a preset to leave on over a whole run: `rms`,
`abs_max` and `kurtosis`, i.e. each tensor's scale, its largest magnitude and its tails, from
two kernels (`aminmax` and the central moments). Like any stats spec it applies to
every record `capture=` asks for: `track(model, stats=stats.health, every=10)` watches
module outputs and their gradients; with `capture=("outputs", "params")` the parameters
and their gradients get the same three, and so does any other kind of record `capture=`
adds (parameter updates, say). What it costs: `doc/benchmarks.md`. `Spec` is the type of what `parse` (and `track(stats=...)`)
accepts: `True`, a name, a sequence of names, `("name", fn)` pairs, `Statistic` and
`histogram(...)`, a mapping `{"name": fn}`, or a `StatsFn`.

Statistics per channel and per sample: `per_channel(stat, dim=None)` and
`per_sample(stat, dim=0)` (`stat` one of `abs_max`, `rms`, `mean`, `abs_mean`) keep one
number per index of `dim` (by default for channels `channel_dim(tensor.dim())`: 1 for 4-D
and 5-D tensors, a CNN's `[batch, channels, height, width]`, else the last), reducing
every other dimension: a vector per tensor, named
`<stat>_per_channel` / `<stat>_per_sample`, computed on the device in the same call (one
reduction, no host sync). Each record keeps its own width (the size of `dim` there).
They show which hidden channels carry outliers (LLM.int8's outlier features, "massive
activations") and which sample of a batch stands out; `tensor_tracker._data.channel_table`
and `tensor_tracker.plot.channel_map` read them.

Attention logits per head: `attention_logits(rows=None)` records, for each
`scaled_dot_product_attention` call, each head's largest logit and mean softmax entropy
(vectors `max_logit_per_head` and `entropy_per_head`, `ATTENTION_NAMES`), computed from the
call's query and key in chunks of query rows, never materialising the scores; on every other
record both vectors are empty.

Fractions are over all `numel` values. An empty tensor gives `numel` 0, counts and `sum` 0,
NaN for everything else. When a tensor holds any NaN or ±inf, `mean`, `std` and `rms` are NaN,
on every device (count the culprits with `nonfinite`); when only its spread overflows the
reduction dtype, `std` and `rms` are inf. `min`, `max`, `abs_max` and `abs_mean` follow
IEEE rules (NaN wins, then inf).
float16/bfloat16/float8 tensors are reduced in float32, integer and bool tensors in float64,
float32/float64 tensors in their own precision (so the squares behind `std`/`rms` of a
float32 tensor overflow beyond about 1e19). The order of the sums, and so the last bits,
depend on where they run: eagerly on the CPU, `mean` and `std` come from a sum and a sum of
squares in that precision, combined in float64; on accelerators from `torch.std_mean`,
rounded to that precision; inside a compiled graph (`track(torch.compile(model),
stats=True)`) on accelerators, and on the CPU when statistics per channel, per sample or
per head are asked for, from float64 sums about the tensor's first element (no overflow of
float32 squares there); otherwise a compiled graph on the CPU hands the tensor out and the
eager CPU kernels compute them, the same numbers as eagerly. They agree to the tensor's
precision (about 1e-7 relative for float32 tensors), not bit for bit.

Modules, from what a user names to what a hook runs and a table reads:

- `_spec`: what a stats spec names (`Statistic`, `histogram()`, `blocks()`) and its parsing.
- `_builtin`: the table of built-in statistics, the one place to add one.
- `formats`: the range limits of fp16, bf16 and fp8 formats; the block-scaled formats.
- `_kernels`: the hot-path kernels that compute a tensor's raw numbers.
- `_binning`: histogram counts on the device.
- `_blocking`: block-scaled formats (MX, NVFP4) simulated on the device.
- `_layout`: `Layout`, which statistics a raw vector holds and how each is derived.
- `_fn`: `StatsFn` (`parse`, `compute`): a tensor to its `Stats`.
- `_values`: `Stats`, one tensor's statistics, on its device until read.
- `_vectors`: statistics per channel / per sample: their kernel and `VectorRows`, where a
  store keeps them.
- `_attention`: attention logits per head from an sdpa call's query and key, in chunks.
- `_store`: `StatsStore`, many tensors' statistics in one buffer per device.
- `_table`: `stats_table`, many `Stats` read to the host at once.
- `_merging`: the statistics of several tensors combined (across ranks).

Example:
    >>> fn = parse(["mean", "rms", "fp16_overflow"])
    >>> s = fn(torch.tensor([1.0, -1.0, 1e5]))
    >>> s.to_dict()  # doctest: +SKIP
    {'mean': 33333.33, 'rms': 57735.03, 'fp16_overflow': 0.3333333333333333}
"""

from .._core.options import use_stats_parser
from . import formats
from ._fn import Spec, StatsFn, compute, parse
from ._layout import Layout
from ._merging import combine, inexact_names
from ._spec import (
    ATTENTION_NAMES,
    BLOCK_NAMES,
    DEFAULT,
    EXP_HIST,
    NAMES,
    AttentionLogits,
    Blocks,
    Histogram,
    PerAxis,
    Statistic,
    attention_logits,
    blocks,
    channel_dim,
    health,
    histogram,
    per_channel,
    per_sample,
)
from ._table import stats_table
from ._values import Stats

# `track(stats=...)` and `Tracker(stats=...)` are checked and parsed in `core.options`, which
# sits below this layer and so cannot import `parse`: it is handed over here, once.
use_stats_parser(parse)

__all__ = [
    "ATTENTION_NAMES",
    "BLOCK_NAMES",
    "DEFAULT",
    "EXP_HIST",
    "NAMES",
    "AttentionLogits",
    "Blocks",
    "Histogram",
    "Layout",
    "PerAxis",
    "Spec",
    "Statistic",
    "Stats",
    "StatsFn",
    "attention_logits",
    "blocks",
    "channel_dim",
    "combine",
    "compute",
    "formats",
    "health",
    "histogram",
    "inexact_names",
    "parse",
    "per_channel",
    "per_sample",
    "stats_table",
]
