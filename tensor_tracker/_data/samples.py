"""Values per sample: one batch item's values per channel at every module, and every
batch item's statistics at every module, read from the full copies of one step.

Per-tensor statistics average over the batch, so one bad sample (a corrupt input, an
extreme token, a padding row gone wrong) hides in them. Here each module's recorded
output `[batch, ..., channels]` is split along the batch: `sample_stats` gives each
sample's rms and largest magnitude per module and names the sample that stands out from
the rest of its batch; `sample_values` gives one sample's value in each channel (at one
position, e.g. a token, or the largest in magnitude over its positions) at every module.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import Tensor

from .._core.records import Stash
from .._optional import require
from .._validate import check_bool, check_choice, check_int
from ..errors import ArgumentValueError, NotRecordedError
from ..stats import Stats
from ..stats._spec import channel_dim as channel_dim_of
from .select import (
    CHILD_KINDS,
    display_name,
    member_label,
    module_order,
    recorded_steps,
    select_from,
    shown_value,
)
from .series import empty_error

__all__ = [
    "SAMPLE_STATS",
    "SampleRows",
    "SampleStats",
    "SampleValues",
    "sample_rows",
    "sample_stats",
    "sample_values",
]

SAMPLE_STATS: tuple[str, ...] = ("rms", "abs_max")
"""The statistics `sample_stats` computes per sample and module."""

OUTLIER_RATIO = 4.0
"""How many times the batch median a sample's statistic must reach, at some module, for
`SampleStats.outliers` to name it. Batches of random data stay well under it (Gaussian
samples of 16 or more values: at most about 2.2 times, over thousands of batches of 3 to
64 samples), while the sample a user goes looking for is usually tens of times out."""

Names = str | Sequence[str] | None
SampleStat = Literal["rms", "abs_max"]


@dataclasses.dataclass(frozen=True)
class SampleStats:
    """Every batch item's rms and largest magnitude at every module of one step.

    A sample stands out at a module when its statistic is many times the median of the
    batch there (`ratio`); `score` keeps each sample's largest ratio over the modules, so
    a sample that is an outlier at one module only is found, whatever the modules' own
    scales. `outlier()` is the sample with the largest score; `outliers()` the samples
    whose score reaches `OUTLIER_RATIO` (4), none in a batch where nothing stands out.

    Attributes:
        names: the modules, in the order they ran (`""` is the model itself).
        step: the step the copies come from.
        call: which call of each module in that step.
        grad: gradients (`True`) or forward outputs (`False`).
        batch_size: how many samples the batch holds.
        rms: float64 `[modules, batch]`: each sample's root mean square at each module
            (over all its elements: positions and channels).
        abs_max: float64 `[modules, batch]`: each sample's largest |value| at each module.
        skipped: the modules left out, each with the reason (no batch dimension of the
            batch's size, no channel dimension, not a tensor).

    Example:
        >>> x = torch.randn(8, 16); x[3] *= 50  # one sample far out
        >>> with tensor_tracker.track(model) as t:
        ...     model(x).sum().backward()
        >>> s = tensor_tracker.sample_stats(t)
        >>> s.names, s.rms.shape  # [modules, batch]; "" is the model itself
        (['0', '1', '2', ''], torch.Size([4, 8]))
        >>> s.outlier(), bool(s.score()[3] > 20)  # tens of times the batch median
        (3, True)
        >>> s.outliers()  # the samples at least 4 times the batch median somewhere
        [3]
    """

    names: list[str]
    step: int
    call: int
    grad: bool
    batch_size: int
    rms: Tensor
    abs_max: Tensor
    skipped: dict[str, str]

    def ratio(self, stat: SampleStat = "rms") -> Tensor:
        """`[modules, batch]`: each sample's `stat` over the median of the batch at that
        module (1 where both are 0; infinite where only the median is 0; NaN values
        count as infinitely far out)."""
        values = self._values(stat)
        median = values.nanmedian(dim=1, keepdim=True).values
        ratio = values / median
        ratio = torch.where((values == 0) & (median == 0), 1.0, ratio)
        return torch.where(torch.isnan(ratio), math.inf, ratio)

    def score(self, stat: SampleStat = "rms") -> Tensor:
        """`[batch]`: each sample's largest `ratio` over the modules."""
        return self.ratio(stat).amax(dim=0)

    def outlier(self, stat: SampleStat = "rms") -> int:
        """The sample whose `stat` stands out most from its batch (largest `score`), even
        when none stands out by much (see `outliers`)."""
        return int(self.score(stat).argmax())

    def outliers(self, stat: SampleStat = "rms") -> list[int]:
        """The samples whose `stat` is at least `OUTLIER_RATIO` (4) times the batch median
        at some module, the one that stands out most first; `[]` when none is."""
        score = self.score(stat)
        order = score.argsort(descending=True, stable=True)
        return [int(b) for b in order if score[b] >= OUTLIER_RATIO]

    def to_frame(self) -> Any:
        """A pandas DataFrame, one row per module and sample: `name`, `sample`, `rms`,
        `abs_max`, and `rms_ratio`, `abs_max_ratio` (see `ratio`)."""
        pd = require("pandas", "pandas")
        n, b = self.rms.shape
        return pd.DataFrame(
            {
                "name": [name for name in self.names for _ in range(b)],
                "sample": list(range(b)) * n,
                "rms": self.rms.reshape(-1).numpy(),
                "abs_max": self.abs_max.reshape(-1).numpy(),
                "rms_ratio": self.ratio("rms").reshape(-1).numpy(),
                "abs_max_ratio": self.ratio("abs_max").reshape(-1).numpy(),
            }
        )

    def _values(self, stat: str) -> Tensor:
        check_choice(stat, "stat=", SAMPLE_STATS)
        return self.rms if stat == "rms" else self.abs_max


@dataclasses.dataclass(frozen=True)
class SampleValues:
    """One batch item's values per channel at every module of one step.

    Attributes:
        sample: the batch index shown.
        position: the position (e.g. the token) shown, among the positions of each output
            (every dimension but the batch and the channels, flattened in order); `None`:
            each channel's value of largest magnitude over the sample's positions (its
            sign kept). Outputs without positions (`[batch, channels]`) show their values.
        names: the modules, in the order they ran.
        values: per module a float64 tensor `[channels]`: the sample's value in each
            channel (the number of channels may differ from module to module).
        shapes: per module the shape of the recorded output.
        stats: every sample's statistics (`SampleStats`) at every module that splits into
            samples, to compare this sample with the rest of its batch; its `skipped` also
            names the modules left out of `names` because `position` is beyond their
            positions.

    Example:
        >>> v = tensor_tracker.sample_values(t, sample=3)
        >>> v.names[0], v.values[0].shape, v.shapes[0]  # Linear(16, 8) on a batch of 8
        ('0', torch.Size([8]), (8, 8))
        >>> torch.equal(v.value("0"), t["0"][0].value[3].double())
        True
    """

    sample: int
    position: int | None
    names: list[str]
    values: list[Tensor]
    shapes: list[tuple[int, ...]]
    stats: SampleStats

    @property
    def step(self) -> int:
        """The step the copies come from."""
        return self.stats.step

    def value(self, name: str) -> Tensor:
        """The sample's values `[channels]` at module `name` (`"<model>"` for the model)."""
        key = "" if name == "<model>" else name
        if key not in self.names:
            raise ArgumentValueError(
                f"value(name={name!r}): not among the modules shown; choose one of "
                f"{[display_name(n) for n in self.names[:8]]}"
                + (" ..." if len(self.names) > 8 else "")
            )
        return self.values[self.names.index(key)]

    def to_frame(self) -> Any:
        """A pandas DataFrame, one row per module and channel: `name`, `channel`, `value`."""
        pd = require("pandas", "pandas")
        return pd.DataFrame(
            {
                "name": [
                    n for n, v in zip(self.names, self.values, strict=True) for _ in range(len(v))
                ],
                "channel": [c for v in self.values for c in range(len(v))],
                "value": torch.cat(self.values).numpy() if self.values else [],
            }
        )


def sample_stats(
    recording: Any,
    *,
    step: int | None = None,
    call: int = 0,
    grad: bool = False,
    names: Names = None,
    batch_dim: int = 0,
) -> SampleStats:
    """Every batch item's rms and largest magnitude at every module, from the full copies
    of one step, to find the sample that stands out (`.outlier()`).

    Args:
        recording: a `Tracker` (live or `load`ed) or a list of `Stash` that recorded full
            copies (`track(model)` without `stats=`; `keep_steps=`, `dtype=` and
            `device=` copies work, `sample=` copies do not: they keep random elements).
        step: which step; default: the last step recorded.
        call: which call of each module in that step (default the first, 0).
        grad: `True` for the gradients of the outputs, `False` (default) for the outputs.
        names: the modules (a substring or regex, or a list of names); default: all.
        batch_dim: the batch dimension of the outputs (default 0).

    Returns:
        A `SampleStats`: `rms` and `abs_max` `[modules, batch]`; modules whose output has
        no batch dimension of the batch's size (the most common one) are in `skipped`.

    Raises:
        NotRecordedError: the step holds statistics (`stats=`), not full copies, or no
            module output with a batch and a channel dimension.
        ArgumentValueError: a step that was not recorded, or an argument out of range.

    Example:
        >>> x = torch.randn(8, 16); x[3] *= 50  # one sample far out
        >>> with tensor_tracker.track(model) as t:
        ...     model(x).sum().backward()
        >>> tensor_tracker.sample_stats(t).outlier()
        3
    """
    return sample_rows(recording, "sample_stats", step, call, grad, names, batch_dim, None).stats


def sample_values(
    recording: Any,
    sample: int | None = None,
    *,
    position: int | None = None,
    step: int | None = None,
    call: int = 0,
    grad: bool = False,
    names: Names = None,
    batch_dim: int = 0,
    channel_dim: int | None = None,
) -> SampleValues:
    """One batch item's values per channel at every module, from the full copies of one
    step: where in the network, and in which channels, a sample's values go wrong.

    Args:
        recording: a `Tracker` (live or `load`ed) or a list of `Stash` that recorded full
            copies (see `sample_stats`).
        sample: the batch index; default: the sample that stands out most from its batch
            (`sample_stats(...).outlier()`, by rms).
        position: the position within the sample, e.g. the token of a `[batch, tokens,
            channels]` output (all dimensions but the batch and channel ones, flattened
            in order); default: each channel's value of largest magnitude over the
            positions, its sign kept.
        step: which step; default: the last step recorded.
        call: which call of each module in that step (default the first, 0).
        grad: `True` for the gradients of the outputs, `False` (default) for the outputs.
        names: the modules (a substring or regex, or a list of names); default: all.
        batch_dim: the batch dimension of the outputs (default 0).
        channel_dim: the channel dimension; default: each output's own
            (`tensor_tracker.stats.channel_dim`: 1 for a CNN's 4-D `[batch, channels,
            height, width]`, else the last, the features of a transformer).

    Returns:
        A `SampleValues`: per module the sample's values `[channels]`, and the batch's
        `SampleStats` in `.stats`.

    Raises:
        NotRecordedError: the step holds statistics (`stats=`), not full copies.
        ArgumentValueError: `sample` or `position` out of range, a step that was not
            recorded, `channel_dim` the same as `batch_dim`.

    Example:
        >>> x = torch.randn(8, 5, 16); x[3] *= 50  # 8 samples of 5 tokens
        >>> with tensor_tracker.track(model) as t:
        ...     model(x).sum().backward()
        >>> v = tensor_tracker.sample_values(t, position=2)  # the outlier sample, token 2
        >>> v.sample, v.value("2").shape
        (3, torch.Size([4]))
        >>> torch.equal(v.value("2"), t["2"][0].value[3, 2].double())
        True
        >>> v.to_frame().columns.tolist()
        ['name', 'channel', 'value']
    """
    if sample is not None:
        check_int(sample, "sample_values(sample=...)", "a batch index (int) or None")
    if position is not None:
        check_int(position, "sample_values(position=...)", "a position index (int) or None")
    read = sample_rows(recording, "sample_values", step, call, grad, names, batch_dim, channel_dim)
    batch = read.stats.batch_size
    if sample is None:
        sample = read.stats.outlier()
    if not -batch <= sample < batch:
        raise ArgumentValueError(
            f"sample_values(sample={sample}): out of range; the batch at step "
            f"{read.stats.step} holds {batch} samples: pass 0 to {batch - 1}"
        )
    sample %= batch
    # Outputs without positions ([batch, channels]) hold one each: position 0 (or -1).
    most = max((p.shape[1] for p in read.positions), default=1)
    if position is not None and not -most <= position < most:
        held = f"{most} positions" if most > 1 else "one position ([batch, channels])"
        choice = f"0 to {most - 1}" if most > 1 else "0"
        raise ArgumentValueError(
            f"sample_values(position={position}): out of range; the outputs hold at most "
            f"{held} per sample: pass {choice}, or None for each channel's largest value"
        )
    names_kept, values, shapes = [], [], []
    skipped = dict(read.stats.skipped)
    for name, rows, shape in zip(read.stats.names, read.positions, read.shapes, strict=True):
        x = rows[sample]  # [positions, channels]
        if x.shape[0] == 1:
            value = x[0]
        elif position is None:
            index = x.abs().nan_to_num(math.inf).argmax(dim=0, keepdim=True)
            value = x.gather(0, index)[0]
        elif -x.shape[0] <= position < x.shape[0]:
            value = x[position]
        else:
            skipped[name] = f"its output has {x.shape[0]} positions per sample, not {position}"
            continue
        names_kept.append(name)
        values.append(value)
        shapes.append(shape)
    stats = (
        dataclasses.replace(read.stats, skipped=skipped)
        if skipped != read.stats.skipped
        else read.stats
    )
    return SampleValues(sample, position, names_kept, values, shapes, stats)


@dataclasses.dataclass(frozen=True)
class SampleRows:
    """The copies of one step split per sample (what `sample_rows` returns).

    Attributes:
        stats: every sample's statistics per module (`SampleStats`).
        positions: per module of `stats.names`, float64 `[batch, positions, channels]`.
        shapes: per module the shape of the recorded output.
    """

    stats: SampleStats
    positions: list[Tensor]
    shapes: list[tuple[int, ...]]


def _label(stash: Stash) -> str:
    """How the sample functions name a record: its module's name, or an op or tap record as
    what it is inside its module (`"softmax#0 of 0.attn"`)."""
    return member_label(stash.name, stash.kind, stash.attr)


def sample_rows(
    recording: Any,
    caller: str,
    step: int | None,
    call: int,
    grad: bool,
    names: Names,
    batch_dim: int,
    channel_dim: int | None,
) -> SampleRows:
    """The copies of one step, split per sample: the work behind both public functions."""
    check_bool(grad, f"{caller}(grad=...)")
    check_int(call, f"{caller}(call=...)", "a call index (int)")
    check_int(batch_dim, f"{caller}(batch_dim=...)", "a dimension (int)")
    if channel_dim is not None:
        check_int(channel_dim, f"{caller}(channel_dim=...)", "a dimension (int) or None")
    if step is not None:
        check_int(step, f"{caller}(step=...)", "a recorded step (int) or None")
    steps = recorded_steps(recording, f"{caller}(recording)", kind="output")
    if not steps:
        raise empty_error(caller, "recording")
    if step is None:
        step = steps[-1]
    elif step not in steps:
        raise ArgumentValueError(
            f"{caller}(step={step}): no record at that step; recorded steps: "
            f"{steps[:10]}" + (" ..." if len(steps) > 10 else "")
        )
    # An op or tap record inside a module is an output too, named "softmax#0 of 0.attn".
    outputs = ("output", *CHILD_KINDS)
    found = select_from(
        recording, f"{caller}(recording)", names=names, grad=grad, kind=outputs, step=step
    )
    found = [s for s in found if s.call == call]
    if not found:
        what = "gradients" if grad else "outputs"
        raise ArgumentValueError(
            f"{caller}: no module {what} at step {step}, call {call}"
            + (f" for names={names!r}" if names is not None else "")
            + ("; was the tracker's grad=True?" if grad else "")
        )
    tensors: dict[str, Tensor] = {}
    skipped: dict[str, str] = {}
    for s in found:
        value = shown_value(s)
        if isinstance(value, Stats):
            raise NotRecordedError(
                f"{caller}: step {step} holds statistics (stats=), not full copies; record "
                "the step with a tracker of copies, e.g. beside the statistics a flight "
                "recorder tensor_tracker.track(model, keep_steps=3)"
            )
        label = _label(s)
        if value is None:
            skipped[label] = "its output holds no tensor"
        elif value.is_complex() or value.dtype == torch.bool:
            skipped[label] = f"its output is {value.dtype}"
        elif value.dim() < 2:
            skipped[label] = f"its output {tuple(value.shape)} has no batch and channel dimensions"
        else:
            tensors.setdefault(label, value)
    if not tensors:
        raise NotRecordedError(
            f"{caller}: no output at step {step} has a batch and a channel dimension "
            "(full copies of whole tensors are needed; sample= copies keep random elements "
            f"only); skipped: {skipped}"
        )
    ndims = {t.dim() for t in tensors.values()}
    for dim, argument in ((batch_dim, "batch_dim"), (channel_dim, "channel_dim")):
        if dim is not None and not any(-n <= dim < n for n in ndims):
            raise ArgumentValueError(
                f"{caller}({argument}={dim}): the outputs have {sorted(ndims)} dimensions"
            )
    batch = Counter(
        t.shape[batch_dim] for t in tensors.values() if -t.dim() <= batch_dim < t.dim()
    ).most_common(1)[0][0]
    kept_names, rows, shapes, rms, abs_max = [], [], [], [], []
    # Gradients too in the order the modules ran forward (not that of the backward pass).
    order = (
        module_order(
            select_from(recording, f"{caller}(recording)", names=names, kind=outputs, step=step),
            _label,
        )
        if grad
        else module_order(found, _label)
    )
    for name in order:
        if name not in tensors:
            continue
        t = tensors[name]
        n = t.dim()
        channel = channel_dim_of(n) if channel_dim is None else channel_dim
        if not (-n <= batch_dim < n and -n <= channel < n):
            skipped[name] = f"its output {tuple(t.shape)} has no dimension {batch_dim} or {channel}"
            continue
        b, c = batch_dim % n, channel % n
        if b == c:
            raise ArgumentValueError(
                f"{caller}(channel_dim={channel_dim}): the same dimension as batch_dim="
                f"{batch_dim} for {display_name(name)}'s output {tuple(t.shape)}; "
                "pass channel_dim=-1 (features last) or 1 (CNN channels)"
            )
        if t.shape[b] != batch:
            skipped[name] = f"its dimension {batch_dim} holds {t.shape[b]}, not the batch's {batch}"
            continue
        if t.numel() == 0:
            skipped[name] = f"its output {tuple(t.shape)} is empty"
            continue
        x = t.detach().to("cpu", torch.float64).movedim((b, c), (0, -1))
        x = x.reshape(batch, -1, x.shape[-1])  # [batch, positions, channels]
        flat = x.reshape(batch, -1)
        rms.append(flat.square().mean(dim=1).sqrt())
        abs_max.append(flat.abs().amax(dim=1))
        kept_names.append(name)
        rows.append(x)
        shapes.append(tuple(t.shape))
    if not kept_names:
        raise NotRecordedError(
            f"{caller}: no output at step {step} splits into samples; skipped: {skipped}"
        )
    stats = SampleStats(
        kept_names,
        step,
        call,
        grad,
        batch,
        torch.stack(rms),
        torch.stack(abs_max),
        skipped,
    )
    return SampleRows(stats, rows, shapes)
