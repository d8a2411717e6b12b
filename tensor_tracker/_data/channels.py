"""Statistics per channel arranged by module and step (`channel_table`), and the channels
that stand out against the other channels of their module (`outlier_channels`), behind
`plot.channel_map` and `diagnose`'s `outlier_channels` check."""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import TYPE_CHECKING, Any

from torch import Tensor

from .._optional import require
from .._validate import check_bool, check_number, check_type
from ..errors import ArgumentValueError, NotRecordedError
from ..stats._spec import channel_dim
from .frame import holds_copies, recording_frame
from .select import CHILD_KINDS, member_label

if TYPE_CHECKING:
    import numpy

__all__ = [
    "DEFAULT_OUTLIER_RATIO",
    "ChannelTable",
    "OutlierChannels",
    "channel_table",
    "outlier_channels",
    "table_of_frame",
]

DEFAULT_OUTLIER_RATIO = 10.0
"""The default `k` of `outlier_channels` (and of `diagnose(outlier_ratio=...)`): a channel
is an outlier when its `abs_max` passes 10 times the median channel of its module.

Why 10: channels of Gaussian values give a ratio of 1.4 to 2.4 (largest over the median
channel, 64 to 3072 channels, 16 to 4096 values per channel) and 4 to 6.6 at worst with a
single value per channel; trained networks spread their channel scales a few times wider
than that. The outliers that matter are far above: LLM.int8 (Dettmers et al., 2022) sees
outlier features of magnitude 6 and more where the other hidden values stay around 1
and below (20 times and more), and "massive activations" (Sun et al., 2024) are 100 to
10,000 times the median. 10 sits above what random channels reach and below every
outlier those papers describe."""


@dataclasses.dataclass(frozen=True, repr=False)
class ChannelTable:
    """A statistic per channel for each module and step (see `channel_table`).

    Attributes:
        column: the statistic, e.g. `"abs_max_per_channel"`.
        grad: whether these are gradients.
        modules: module names (an op or tap record inside a module as `"softmax#0 of
            0.attn"`), in recording order.
        steps: the steps, ascending.
        values: float64 `[modules, steps, channels]`: the statistic per channel, the largest
            over the calls of a step (the mean for `mean_per_channel`); NaN where a module
            was not recorded at a step, and past a module's own width.
        widths: each module's number of channels (its widest record).
        calls: for each module, each record it was read from, in recording order: its
            place among the step's records, the step's index in `steps`, and its vector.
            Empty for a table built by hand; `outlier_channels` reads it to tell which call
            of a module called several times in a step (a reused ReLU) shows an outlier.

    Example:
        >>> import numpy as np
        >>> values = np.array([[[1.0, 2.0], [3.0, 0.5]]])  # 1 module, 2 steps, 2 channels
        >>> table = ChannelTable("abs_max_per_channel", False, ("fc",), (0, 1), values, (2,))
        >>> table.over_steps().tolist()
        [[3.0, 2.0]]
    """

    column: str
    grad: bool
    modules: tuple[str, ...]
    steps: tuple[int, ...]
    values: numpy.ndarray
    widths: tuple[int, ...]
    calls: tuple[tuple[tuple[int, int, numpy.ndarray], ...], ...] = ()

    def __repr__(self) -> str:
        return (
            f"ChannelTable({self.column!r}, {len(self.modules)} modules, {len(self.steps)} "
            f"steps, up to {max(self.widths, default=0)} channels)"
        )

    def over_steps(self) -> numpy.ndarray:
        """`[modules, channels]`: each channel's largest value over the steps (NaN past a
        module's width)."""
        np = require("numpy", "pandas")
        out = np.full(self.values.shape[::2], math.nan)
        for m in range(len(self.modules)):
            rows = self.values[m]
            seen = ~np.isnan(rows).all(axis=0)
            out[m, seen] = np.nanmax(rows[:, seen], axis=0)
        result: numpy.ndarray = out
        return result


def _vector_from_copy(value: Any, stat: str) -> Any:
    np = require("numpy", "pandas")
    if not isinstance(value, Tensor) or value.dim() == 0 or value.numel() == 0:
        return None
    x = value.detach()
    x = (x.abs() if x.is_complex() else x).double()
    x = x.movedim(channel_dim(x.dim()), -1)
    x = x.reshape(-1, x.shape[-1])
    if stat == "abs_max":
        v = x.abs().amax(0)
    elif stat == "rms":
        v = x.square().mean(0).sqrt()
    elif stat == "abs_mean":
        v = x.abs().mean(0)
    else:
        v = x.mean(0)
    return np.asarray(v.cpu().numpy(), dtype=np.float64)


def channel_table(
    recording: Any,
    column: str = "abs_max_per_channel",
    *,
    grad: bool = False,
    kind: str = "output",
) -> ChannelTable:
    """A statistic per channel (`stats.per_channel`) for each module and step, as one
    array: what the channels x modules figure (`plot.channel_map`) and `diagnose`'s
    outlier channels read.

    Args:
        recording: a `Tracker` (or list of `Stash`) recorded with e.g.
            `stats=[*stats.DEFAULT, stats.per_channel("abs_max")]`, or holding full copies
            (then the statistic is computed from them, per channel as `stats.per_channel`
            keeps them: `stats.channel_dim`, dimension 1 of a 4-D or 5-D tensor, else the
            last).
        column: the per-channel column of `to_frame()`: `"<stat>_per_channel"`.
        grad: read gradients instead of forward values.
        kind: which records: `"output"` (module outputs, the default, with the op and tap
            records inside modules, named like `"softmax#0 of 0.attn"`), `"input"` or
            `"param"`.

    Returns:
        A `ChannelTable`.

    Raises:
        NotRecordedError: the recording holds neither that column nor full copies.
        ArgumentValueError: `column` is not a per-channel statistic's name, or `kind` unknown.
        ArgumentTypeError: `grad` is not a bool.

    Example:
        >>> spec = [*tensor_tracker.stats.DEFAULT, tensor_tracker.stats.per_channel("abs_max")]
        >>> with tensor_tracker.track(model, stats=spec) as t:
        ...     _ = model(x)
        >>> table = channel_table(t)
        >>> table.values.shape[0] == len(table.modules), table.column
        (True, 'abs_max_per_channel')
    """
    require("numpy", "pandas")
    check_type(column, str, "channel_table(column=...)", "a column name like 'abs_max_per_channel'")
    stat = column.removesuffix("_per_channel")
    if stat == column or stat not in ("abs_max", "rms", "mean", "abs_mean"):
        raise ArgumentValueError(
            "channel_table(column=...) must name a statistic per channel, e.g. "
            f"'abs_max_per_channel' (stats.per_channel('abs_max')); got {column!r}"
        )
    check_bool(grad, "channel_table(grad=...)")
    if kind not in ("output", "input", "param"):
        raise ArgumentValueError(
            f"channel_table(kind=...) must be 'output', 'input' or 'param', got {kind!r}"
        )
    frame, stashes = recording_frame(recording, "channel_table(recording)")
    return table_of_frame(frame, stashes, column, grad, kind)


def table_of_frame(frame: Any, stashes: Any, column: str, grad: bool, kind: str) -> ChannelTable:
    """`channel_table` of a recording's frame and stashes (arguments already checked)."""
    np = require("numpy", "pandas")
    stat = column.removesuffix("_per_channel")
    # An op or tap record inside a module is an output too: a row of its own.
    kinds = (kind, *CHILD_KINDS) if kind == "output" else (kind,)
    rows = frame.index[(frame["grad"] == grad) & frame["kind"].isin(kinds)] if len(frame) else []
    if column in frame.columns:
        vectors = {int(r): frame[column].iat[int(r)] for r in rows}
    elif len(frame) and holds_copies(stashes):
        vectors = {int(r): _vector_from_copy(stashes[int(r)].value, stat) for r in rows}
    else:
        raise NotRecordedError(
            f"channel_table: {column!r} was not recorded; track with "
            f"stats=[*tensor_tracker.stats.DEFAULT, tensor_tracker.stats.per_channel({stat!r})] "
            "(or keep full copies)"
        )
    names = frame["name"].to_numpy()
    attrs = frame["attr"].to_numpy()
    record_kinds = frame["kind"].to_numpy()
    step_of = frame["step"].to_numpy()
    kept: dict[str, dict[int, list[Any]]] = {}
    placed: dict[str, list[tuple[int, int, Any]]] = {}  # (place in its step, step, vector)
    count: dict[int, int] = {}
    for r, v in vectors.items():
        step = int(step_of[r])
        place = count[step] = count.get(step, -1) + 1
        if not isinstance(v, np.ndarray) or not len(v):
            continue
        if kind == "param":
            name = f"{names[r]}.{attrs[r]}".lstrip(".")
        else:
            name = member_label(str(names[r]), str(record_kinds[r]), str(attrs[r]))
        kept.setdefault(name, {}).setdefault(step, []).append(v)
        placed.setdefault(name, []).append((place, step, v))
    modules = tuple(kept)
    steps = tuple(sorted({s for by_step in kept.values() for s in by_step}))
    widths = tuple(max(len(v) for vs in kept[m].values() for v in vs) for m in modules)
    values = np.full((len(modules), len(steps), max(widths, default=0)), math.nan)
    where = {s: i for i, s in enumerate(steps)}
    combine = np.mean if stat == "mean" else np.max
    for m, name in enumerate(modules):
        for step, vs in kept[name].items():
            width = max(len(v) for v in vs)
            padded = np.full((len(vs), width), math.nan)
            for i, v in enumerate(vs):
                padded[i, : len(v)] = v
            with np.errstate(all="ignore"):
                values[m, where[step], :width] = combine(padded, axis=0)
    calls = tuple(tuple((p, where[s], v) for p, s, v in placed[m]) for m in modules)
    return ChannelTable(column, grad, modules, steps, values, widths, calls)


@dataclasses.dataclass(frozen=True)
class OutlierChannels:
    """The outlier channels of one module (see `outlier_channels`).

    Attributes:
        module: the module's name.
        channels: the outlier channels' indices, ascending.
        steps: the steps where at least one of them was an outlier, ascending.
        ratio: the largest ratio seen, channel over the module's median channel.
        median: the module's median channel value at that step.
    """

    module: str
    channels: tuple[int, ...]
    steps: tuple[int, ...]
    ratio: float
    median: float


def outlier_channels(
    table: ChannelTable, k: float = DEFAULT_OUTLIER_RATIO
) -> list[OutlierChannels]:
    """The channels whose value passes `k` times the median channel of their module, at
    the same step (read from a `ChannelTable` of `abs_max`, best), in forward order: a
    module called several times in a step (a ReLU reused after a residual addition)
    takes the place of its first call that shows an outlier. An outlier channel written
    into a residual stream shows in every module after the one that writes it: the first
    module listed is where it appears.

    A module's median channel is its typical channel scale, which an outlier channel
    cannot move (it is one channel among many); modules whose median channel is 0 (all
    but a few channels silent) and modules of fewer than 4 channels are left out, since
    a ratio to their median says nothing.

    Args:
        table: from `channel_table`.
        k: the ratio above which a channel is an outlier; see `DEFAULT_OUTLIER_RATIO`
            for why it defaults to 10.

    Returns:
        One `OutlierChannels` per module with any.

    Raises:
        ArgumentValueError: `k` not above 1.
        ArgumentTypeError: `table` is not a `ChannelTable`, or `k` not a number.

    Example:
        >>> import numpy as np
        >>> values = np.ones((1, 2, 8)); values[0, 1, 3] = 50.0
        >>> table = ChannelTable("abs_max_per_channel", False, ("fc",), (0, 1), values, (8,))
        >>> outlier_channels(table)
        [OutlierChannels(module='fc', channels=(3,), steps=(1,), ratio=50.0, median=1.0)]
    """
    np = require("numpy", "pandas")
    check_type(table, ChannelTable, "outlier_channels(table)", "a ChannelTable")
    check_number(
        k, "outlier_channels(k=...)", "a ratio to the median channel", low=1, open_low=True
    )
    out: list[tuple[int, OutlierChannels]] = []  # (place in forward order, finding)
    for m, module in enumerate(table.modules):
        width = table.widths[m]
        if width < 4:
            continue
        values = table.values[m, :, :width]  # [steps, channels]
        # A step where the module was not recorded is a row of NaN: its median is NaN
        # (left out below), not a warning.
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            median = np.nanmedian(values, axis=1)
            ratio = values / median[:, None]
        usable = np.isfinite(median) & (median > 0)
        hit = (ratio > k) & usable[:, None]
        if not hit.any():
            continue
        steps = np.flatnonzero(hit.any(axis=1))
        channels = np.flatnonzero(hit.any(axis=0))
        masked = np.where(hit, ratio, -np.inf)
        s, _ = np.unravel_index(int(np.argmax(masked)), masked.shape)
        finding = OutlierChannels(
            module,
            tuple(int(c) for c in channels),
            tuple(table.steps[int(i)] for i in steps),
            float(masked.max()),
            float(median[s]),
        )
        out.append((_place(table, m, channels, median * k), finding))
    out.sort(key=lambda placed: placed[0])  # stable: ties keep the table's order
    return [finding for _, finding in out]


def _place(table: ChannelTable, m: int, channels: Any, limits: Any) -> int:
    """Where module `m`'s outlier `channels` first show in forward order: the earliest
    place (among its step's records) of a call where one of them passes that step's
    `limits` (k times the median channel); the module's index in a table without
    `calls`."""
    if not table.calls:
        return m
    calls = table.calls[m]
    showing = [
        place
        for place, step, vector in calls
        if (vector[channels[channels < len(vector)]] > limits[step]).any()
    ]
    return min(showing, default=calls[0][0])
