"""`explain_spike`: which recorded quantities moved first, before or at a loss spike."""

from __future__ import annotations

import dataclasses
import itertools
import math
import numbers
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from torch import Tensor

from .._optional import require
from .._validate import check_int, check_type
from ..errors import ArgumentValueError
from ..stats import NAMES
from .frame import holds_copies, recording_frame, to_frame

if TYPE_CHECKING:
    import numpy
    import pandas

__all__ = [
    "Cause",
    "Explanation",
    "Trace",
    "explain_frame",
    "explain_spike",
    "loss_series",
    "loss_spikes",
    "param_updates",
]

SPIKE = 6.0
"""Robust standard deviations above the median of the 20 losses before it that make a spike
(`diagnose(spike=...)`'s default)."""

WINDOW = 24
"""Steps of a quantity's own history its baseline is taken from (median and MAD)."""

DEPARTURE = 6.0
"""Robust standard deviations from its baseline that a quantity must reach to have departed."""

ONSET = 3.0
"""Robust standard deviations from its baseline beyond which a quantity that departed by
less than `TRANSIENT` must stay up to the spike."""

TRANSIENT = math.log(10.0)
"""How far (in log factor) a departure must go to count even when it came back before the
spike: a learning rate or a batch wrong for one step moves its update or output 100-1000x
for that step only. Batch-to-batch noise stayed under a factor of 5.3 in every statistic
of healthy runs (kurtoses of gradients and updates the largest; doc/benchmarks.md)."""

MAX_SIZE = math.log(1e6)
"""The largest size of a departure (a factor of a million; a NaN, an infinity, a zero)."""

FLOOR = 0.02
"""The least spread a baseline is given, relative to its level: a flat series (a constant
rms) departs only on a change of `DEPARTURE * FLOOR` = 12% or more."""

SIGNIFICANT = 0.2
"""How far a departure must go, as a fraction of the farthest one (in log factor), not to be
ranked after the others."""

MIN_HISTORY = 6
"""Recorded steps a quantity needs before one of its values can depart."""

# Statistics read per record, and how the calls of one step combine: the largest magnitude
# is the largest of the calls, a size their mean. Vector statistics (one value per head) are
# read as their largest entry.
SCALAR_STATS: dict[str, str] = {"rms": "mean", "abs_max": "max", "kurtosis": "mean"}
VECTOR_STATS: tuple[str, ...] = ("max_logit_per_head",)

# Where in a step a record is made: forward records first (in the order modules finished),
# then gradients (in the order the backward reached them), then the optimizer's update.
_FORWARD, _BACKWARD, _UPDATE = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class Cause:
    """One quantity that moved away from its own recent history before or at a loss spike.

    Attributes:
        module: the module's name (`""` for the root); for a parameter's update, the module
            that owns the parameter.
        quantity: what moved: the kind of record and the statistic, `"output_rms"`,
            `"output_abs_max"`, `"output_kurtosis"`, `"grad_rms"` (the gradient of the
            output), `"update_rms"` (a parameter's change at the optimizer step),
            `"param_rms"`, `"input_rms"`, ...; vector statistics by their own name
            (`"max_logit_per_head"`, its largest head).
        step: the first step it was out of its baseline (and stayed out up to the spike, or
            went 10x or more away there).
        lead: the spike's step minus `step`: how many steps before the spike it moved.
        score: how early and how far it moved; causes are sorted by it, highest first.

    Example:
        >>> losses = []
        >>> with tensor_tracker.track(model, stats=True) as t:
        ...     for step in range(20):  # the batch is 100x too large at step 15
        ...         loss = model(x * (100 if step == 15 else 1)).square().mean()
        ...         loss.backward(); losses.append(loss.item()); t.step()
        >>> cause = tensor_tracker.explain_spike(t, losses).causes[0]
        >>> cause.module, cause.quantity, cause.step, cause.lead
        ('0', 'output_rms', 15, 0)
    """

    module: str
    quantity: str
    step: int
    lead: int
    score: float


class Trace(NamedTuple):
    """The series behind a `Cause`, for `plot.spike_plot`: its steps and values up to the
    spike, and the baseline it departed from (median and robust spread)."""

    steps: tuple[int, ...]
    values: tuple[float, ...]
    centre: float
    spread: float


@dataclasses.dataclass(frozen=True, repr=False)
class Explanation:
    """What `explain_spike` found: the loss spike and the quantities that moved first.

    Attributes:
        step: the spike's step, or None when no spike was found.
        causes: `Cause`s, most likely first (empty when nothing departed before the spike,
            or when there is no spike).
        loss: the losses per step, `{step: loss}`.
        traces: the series behind each cause, by `(module, quantity)`.
        message: one line saying what was found, or why there is nothing to explain.

    Print it (or leave it last in a notebook cell) for a summary; `to_frame()` for a table;
    `tensor_tracker.plot.spike_plot(explanation)` for a figure.

    Example:
        >>> losses = []
        >>> with tensor_tracker.track(model, stats=True) as t:
        ...     for step in range(20):  # the batch is 100x too large at step 15
        ...         loss = model(x * (100 if step == 15 else 1)).square().mean()
        ...         loss.backward(); losses.append(loss.item()); t.step()
        >>> explanation = tensor_tracker.explain_spike(t, losses)
        >>> explanation.step, len(explanation.causes)
        (15, 16)
        >>> explanation.to_frame()[["module", "quantity", "lead"]].head(2).values.tolist()
        [['0', 'output_rms', 0], ['0', 'output_abs_max', 0]]
    """

    step: int | None
    causes: list[Cause]
    loss: dict[int, float]
    traces: dict[tuple[str, str], Trace]
    message: str

    def to_frame(self) -> pandas.DataFrame:
        """The causes as a DataFrame, one row each, most likely first (columns as `Cause`'s
        fields)."""
        pd = require("pandas", "pandas")
        fields = [f.name for f in dataclasses.fields(Cause)]
        frame: pandas.DataFrame = pd.DataFrame(
            [[getattr(c, name) for name in fields] for c in self.causes], columns=fields
        )
        return frame

    def __repr__(self) -> str:
        lines = [self.message]
        for rank, c in enumerate(self.causes[:10], 1):
            when = "at the spike" if c.lead == 0 else f"{c.lead} step(s) before"
            trace = self.traces[(c.module, c.quantity)]
            moved = _moved(trace, c.step)
            lines.append(
                f"  {rank}. {c.module or '<root>'} {c.quantity}: from step {c.step} ({when}), "
                f"{moved}"
            )
        if len(self.causes) > 10:
            lines.append(f"  ... and {len(self.causes) - 10} more (to_frame() lists them all)")
        return "\n".join(lines)


def _moved(trace: Trace, step: int) -> str:
    """How far a series moved at `step`: its value against the baseline."""
    value = trace.values[trace.steps.index(step)]
    if not math.isfinite(value):
        return f"{value} (baseline {trace.centre:.3g})"
    if trace.centre and math.isfinite(trace.centre):
        return f"{value:.3g} = {value / trace.centre:.3g}x its baseline {trace.centre:.3g}"
    return f"{value:.3g} (baseline {trace.centre:.3g})"


def loss_series(loss: Any, caller: str) -> tuple[numpy.ndarray, numpy.ndarray]:
    """The steps (int64) and values (float64) of a loss given per step: a list, tuple,
    1-D numpy array or tensor (the loss of step i at index i), or `{step: loss}`.

    Raises:
        TypeError: something else, or a value that is not a number.
        ValueError: an array or tensor that is not 1-D.
    """
    np = require("numpy", "pandas")
    what = "the loss per step: a list, 1-D array or tensor of numbers, or {step: number}"
    argument = f"{caller}(loss=...)" if "(" not in caller else caller
    if isinstance(loss, (Tensor, np.ndarray)):
        if loss.ndim != 1:
            raise ArgumentValueError(
                f"{argument} must be 1-D ({what}), got shape {tuple(loss.shape)}"
            )
        loss = loss.detach().cpu().tolist() if isinstance(loss, Tensor) else loss.tolist()
    if isinstance(loss, (str, bytes)) or not isinstance(loss, (Sequence, Mapping)):
        check_type(loss, (list, tuple, dict), argument, what)
    items = sorted(loss.items()) if isinstance(loss, Mapping) else list(enumerate(loss))
    values = []
    for step, value in items:
        check_int(step, f"{argument} step", f"an int step ({what})")
        if isinstance(value, Tensor) and value.numel() == 1:
            value = value.item()
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            check_type(value, float, f"{argument} value", f"a number ({what})")
        values.append(float(value))
    return np.array([s for s, _ in items], dtype=np.int64), np.array(values, dtype=np.float64)


def loss_spikes(
    steps: numpy.ndarray, values: numpy.ndarray, spike: float = SPIKE
) -> list[tuple[int, float, float]]:
    """Every loss spike: `(step, loss, median before)` where the loss is more than `spike`
    robust standard deviations above the median of the 20 losses before it (at least 5 of
    them finite), or not finite."""
    np = require("numpy", "pandas")
    window = 20
    spikes: list[tuple[int, float, float]] = []
    for i in range(5, len(values)):
        past = values[max(0, i - window) : i]
        past = past[np.isfinite(past)]
        if len(past) < 5:
            continue
        centre = float(np.median(past))
        spread = 1.4826 * float(np.median(np.abs(past - centre)))  # robust std
        scale = max(spread, 1e-3 * abs(centre), 1e-12)
        if not math.isfinite(values[i]) or values[i] > centre + spike * scale:
            spikes.append((int(steps[i]), float(values[i]), centre))
    return spikes


def worst_spike(spikes: Sequence[tuple[int, float, float]]) -> tuple[int, float, float]:
    """The largest finite jump among `spikes` (a NaN loss is a spike too, but the largest
    only when no finite one is)."""
    return max(spikes, key=lambda s: s[1] - s[2] if math.isfinite(s[1]) else -math.inf)


def param_updates(
    frame: pandas.DataFrame, stashes: Sequence[Any]
) -> dict[tuple[str, str], list[tuple[int, float, float]]]:
    """From parameters recorded as copies (`capture=("outputs", "params")` without
    `stats=`): per `(module, parameter)`, `(step, rms(change), rms(parameter))` between each
    recorded step and the next, the change counted at the earlier step (the optimizer step
    that made it ends that step)."""
    rows = frame.index[(frame["kind"] == "param") & (~frame["grad"])]
    by_param: dict[tuple[str, str], list[tuple[int, Tensor]]] = {}
    names, attrs, steps = (frame[c].to_numpy() for c in ("name", "attr", "step"))
    for row in rows:
        value = stashes[int(row)].value
        if isinstance(value, Tensor):
            by_param.setdefault((str(names[row]), str(attrs[row])), []).append(
                (int(steps[row]), value)
            )
    out: dict[tuple[str, str], list[tuple[int, float, float]]] = {}
    for key, history in by_param.items():
        out[key] = [
            (
                step,
                float((after.double() - before.double()).square().mean().sqrt()),
                float(before.double().square().mean().sqrt()),
            )
            for (step, before), (_, after) in itertools.pairwise(history)
        ]
    return out


def _prefix(kind: str, grad: bool) -> str:
    """The first part of a quantity's name: what kind of record it is a statistic of."""
    if kind == "output":
        return "grad" if grad else "output"
    return f"{kind}_grad" if grad else kind


def _phase(kind: str, grad: bool) -> int:
    if grad:
        return _BACKWARD
    return _UPDATE if kind in ("update", "update_ratio", "param", "optimizer") else _FORWARD


class _Series(NamedTuple):
    module: str
    quantity: str
    phase: int
    steps: numpy.ndarray
    values: numpy.ndarray
    order: numpy.ndarray  # the record's position within its phase of each step, in [0, 1)


def _quantities(frame: pandas.DataFrame, stashes: Sequence[Any]) -> list[_Series]:
    """Every recorded quantity as a series per step: each statistic of `SCALAR_STATS` and
    `VECTOR_STATS` of each (module, kind, attr, gradient or not), and the updates of
    parameters recorded as copies."""
    np = require("numpy", "pandas")
    pd = require("pandas", "pandas")
    copies = len(frame) > 0 and holds_copies(stashes)
    keys = ["name", "kind", "attr", "grad"]
    base = frame[[*keys, "step"]].copy()
    phase = np.array(
        [_phase(k, g) for k, g in zip(base["kind"], base["grad"], strict=True)], dtype=np.int64
    )
    base["phase"] = phase
    # Where each record came in its step and phase: the order modules ran (forward) or the
    # backward reached them.
    base["position"] = base.groupby(["step", "phase"]).cumcount()
    base["count"] = base.groupby(["step", "phase"])["position"].transform("size")
    base["order"] = base["position"] / base["count"]
    columns: dict[str, Any] = {}
    for stat in SCALAR_STATS:
        if stat in frame.columns:
            columns[stat] = pd.to_numeric(frame[stat], errors="coerce").to_numpy(np.float64)
        elif copies and stat in NAMES:  # computed from the copies
            columns[stat] = to_frame(stashes, stat=stat, stat_name=stat)[stat].to_numpy(np.float64)
    for stat in VECTOR_STATS:
        if stat in frame.columns:
            columns[stat] = np.array(
                [_largest(v) for v in frame[stat].to_numpy()], dtype=np.float64
            )
    out: list[_Series] = []
    for stat, values in columns.items():
        how = SCALAR_STATS.get(stat, "max")
        grouped = (
            base.assign(value=values)
            .groupby([*keys, "step"], sort=True)
            .agg(value=("value", how), order=("order", "min"), phase=("phase", "first"))
        )
        for (name, kind, _, grad), g in grouped.groupby(level=[0, 1, 2, 3], sort=False):
            if kind in ("param", "optimizer") and not grad:
                continue  # values that training moves by design; their updates are read
            values_ = g["value"].to_numpy(np.float64)
            if np.isnan(values_).all():
                continue
            quantity = stat if stat in VECTOR_STATS else f"{_prefix(str(kind), bool(grad))}_{stat}"
            out.append(
                _Series(
                    str(name),
                    quantity,
                    int(g["phase"].iloc[0]),
                    g.index.get_level_values("step").to_numpy(np.int64),
                    values_,
                    g["order"].to_numpy(np.float64),
                )
            )
    if copies and len(frame):
        for (name, _attr), history in param_updates(frame, stashes).items():
            if history:
                data = np.array(history, dtype=np.float64)
                out.append(
                    _Series(
                        name,
                        "update_rms",
                        _UPDATE,
                        data[:, 0].astype(np.int64),
                        data[:, 1],
                        np.zeros(len(data)),
                    )
                )
    return out


def _largest(value: Any) -> float:
    """The largest entry of a vector statistic (one value per head), NaN when there is none."""
    np = require("numpy", "pandas")
    array = np.asarray(value, dtype=np.float64).reshape(-1)
    if not array.size or np.isnan(array).all():
        return math.nan
    return float(np.nanmax(array))


def _baselines(values: numpy.ndarray) -> tuple[numpy.ndarray, numpy.ndarray]:
    """For each entry of `values`, the median and robust spread of the `WINDOW` entries
    before it (their finite values), the spread at least `FLOOR` of the level; the median
    is NaN where fewer than `MIN_HISTORY` of them are finite. One pass over all steps."""
    np = require("numpy", "pandas")
    finite = np.where(np.isfinite(values), values, np.nan)
    past = np.concatenate([np.full(WINDOW, np.nan), finite[:-1]])
    windows = np.lib.stride_tricks.sliding_window_view(past, WINDOW)  # row i: the W before i
    enough = np.isfinite(windows).sum(axis=1) >= MIN_HISTORY
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the rows without a finite value
        centre = np.nanmedian(windows, axis=1)
        spread = 1.4826 * np.nanmedian(np.abs(windows - centre[:, None]), axis=1)
    spread = np.maximum(np.maximum(spread, FLOOR * np.abs(centre)), 1e-30)
    return np.where(enough, centre, np.nan), spread


def _departure(values: numpy.ndarray) -> tuple[int, float, float, float] | None:
    """Where `values` (up to the spike, its last entry) left its own history: the first
    index where it was more than `DEPARTURE` robust standard deviations from its baseline
    and either went `TRANSIENT` far or stayed more than `ONSET` out on that side up to the
    end (a NaN or infinity is out, on either side). Returns `(index, centre, spread,
    size)`, the size being how far it went there, `|log|, (|value| + spread) / (|centre| +
    spread)`, at most `MAX_SIZE`), or None when it never left."""
    np = require("numpy", "pandas")
    centres, spreads = _baselines(values)
    with np.errstate(invalid="ignore"):
        z = np.where(np.isnan(values), np.inf, (values - centres) / spreads)
    for i in np.flatnonzero(~np.isnan(centres) & (np.abs(z) > DEPARTURE)):
        centre, spread = float(centres[i]), float(spreads[i])
        ratio = (abs(float(values[i])) + spread) / (abs(centre) + spread)
        size = min(abs(math.log(ratio)) if math.isfinite(ratio) else MAX_SIZE, MAX_SIZE)
        later = (values[i:] - centre) / spread
        later = np.where(np.isnan(later), np.inf, later)
        if size >= TRANSIENT or ((np.sign(later[0]) * later > ONSET) | np.isinf(later)).all():
            return int(i), centre, spread, size
    return None


def _ranked(
    moved: list[tuple[_Series, int, float, Trace]], sizes: list[float], spike: int
) -> list[tuple[Cause, Trace]]:
    """The causes, most likely first, with their traces: one per (module, quantity).

    Ranked in four bands (the integer part of the score), then by time. Values and updates
    come before gradients: a gradient that moves follows from a loss that moved, which
    follows from a value or an update that moved, often within the noise at first; an
    update that moved at or after its module's gradient moved (by at least `SIGNIFICANT`
    of the farthest gradient) is ranked with the gradients (the optimizer computed it from
    them). In each,
    a quantity that moved less than `SIGNIFICANT` of the farthest (in log factor) comes
    after the others: batch-to-batch noise of a statistic with heavy tails (`abs_max`) can
    stay out for a few steps, but by a smaller factor than a real cause. Within
    a band, earlier is first: the step, then the forward before the backward before the
    update, modules in the order they ran; then how far it moved (the factor)."""
    # An update computed from its module's gradients after they moved follows from them
    # too; a gradient that only drifted (training that has not settled) or moved in another
    # module (noise in its abs_max) is not what it follows.
    grads = [k for k in range(len(moved)) if moved[k][0].phase == _BACKWARD]
    farthest = max((sizes[k] for k in grads), default=0.0)
    echo: dict[str, int] = {}
    for k in grads:
        if sizes[k] >= SIGNIFICANT * farthest:
            module = moved[k][0].module
            echo[module] = min(echo.get(module, moved[k][1]), moved[k][1])
    follows = [
        m[0].phase == _BACKWARD
        or (m[0].phase == _UPDATE and m[1] >= echo.get(m[0].module, spike + 1))
        for m in moved
    ]
    bands: list[tuple[float, Cause, Trace]] = []
    for kind in (False, True):
        members = [k for k in range(len(moved)) if follows[k] == kind]
        largest = max((sizes[k] for k in members), default=0.0)
        for k in members:
            series, step, within, trace = moved[k]
            lead = spike - step
            band = (0 if kind else 2) + (sizes[k] >= SIGNIFICANT * largest)
            # lead + 1 - within runs through (lead, lead + 1]: in the band's unit interval.
            early = lead + 1 - within + 1e-3 * sizes[k] / MAX_SIZE
            score = round(band + early / (early + 1), 9)
            bands.append((score, Cause(series.module, series.quantity, step, lead, score), trace))
    bands.sort(key=lambda b: -b[0])
    out: list[tuple[Cause, Trace]] = []
    seen: set[tuple[str, str]] = set()
    for _, cause, trace in bands:
        if (cause.module, cause.quantity) not in seen:  # another parameter of that module
            seen.add((cause.module, cause.quantity))
            out.append((cause, trace))
    return out


def explain_frame(
    frame: pandas.DataFrame,
    stashes: Sequence[Any],
    steps: numpy.ndarray,
    losses: numpy.ndarray,
    step: int | None,
) -> Explanation:
    """`explain_spike` on a recording already read as its frame and stashes, the loss as
    steps and values (`loss_series`)."""
    loss = dict(zip(steps.tolist(), losses.tolist(), strict=True))
    if step is None:
        spikes = loss_spikes(steps, losses)
        if not spikes:
            return Explanation(
                None,
                [],
                loss,
                {},
                f"No loss spike in {len(losses)} loss value(s) (none over {SPIKE:g} robust "
                "standard deviations above the median of the 20 before it): nothing to explain.",
            )
        step, value, before = worst_spike(spikes)
        head = f"Loss spike at step {step}: {value:.4g} after a median of {before:.4g}"
        # A change that lasts makes every step from its onset a spike, the largest often
        # the last: say where the run of spikes began.
        onset, spiked = steps.tolist().index(step), {s for s, _, _ in spikes}
        while onset and int(steps[onset - 1]) in spiked:
            onset -= 1
        if int(steps[onset]) != step:
            head += (
                f", the largest of the spikes at every step since step {int(steps[onset])} "
                f"(step={int(steps[onset])} explains that one)"
            )
    else:
        head = f"Loss at step {step}" + (f": {loss[step]:.4g}" if step in loss else "")
    sizes: list[float] = []
    moved: list[tuple[_Series, int, float, Trace]] = []
    for series in _quantities(frame, stashes) if len(frame) else []:
        upto = series.steps <= step
        s, v = series.steps[upto], series.values[upto]
        departed = _departure(v)
        if departed is not None:
            i, centre, spread, size = departed
            within = (series.phase + float(series.order[upto][i])) / 3
            trace = Trace(tuple(s.tolist()), tuple(v.tolist()), centre, spread)
            moved.append((series, int(s[i]), within, trace))
            sizes.append(size)
    causes = _ranked(moved, sizes, step)
    traces = {(c.module, c.quantity): t for c, t in causes}
    if causes:
        first = causes[0][0]
        message = (
            f"{head}. {len(causes)} quantit{'y' if len(causes) == 1 else 'ies'} moved "
            f"away from {WINDOW} steps of their own history before or at it; first: "
            f"{first.module or '<root>'} {first.quantity} at step {first.step}."
        )
    else:
        message = f"{head}. No recorded quantity moved away from its own history before it."
    return Explanation(step, [c for c, _ in causes], loss, traces, message)


def explain_spike(recording: Any, loss: Any, step: int | None = None) -> Explanation:
    """Why did the loss spike? The recorded quantities that moved away from their own recent
    history before or at the spike, earliest first.

    Finds the spike as `diagnose` does (a loss more than 6 robust standard deviations above
    the median of the 20 before it, or not finite; the largest one), unless `step=` names
    it; when the loss spikes at every step from some step on, the summary says where that
    began. Then for every recorded quantity (each statistic of each module's outputs,
    gradients, inputs, updates...: `rms`, `abs_max`, `kurtosis`, `max_logit_per_head`, and
    with parameters recorded as copies their updates' rms) it finds the first step where
    the quantity left its baseline (the median of its previous 24 recorded steps, give or
    take 6 robust standard deviations, at least 12% of the median) and either stayed out
    on the same side up to the spike or went 10x or more away (a learning rate or a batch
    wrong for one step moves its update or output for that step only). The causes are
    ranked by when they moved: the earlier step
    first, then within a step the forward before the backward before the optimizer's
    update, modules in the order they ran; how far they moved orders the rest. The first
    cause is where to look: what moved later usually follows from it.

    Args:
        recording: a `Tracker` (also one read back by `tensor_tracker.load`, from a run
            that crashed or was killed) or a list of `Stash`, recorded over training steps
            (`tracker.step()` after each) with statistics (`stats=True`) or full copies;
            records of any kind are read (an update record, `kind="update"`, gives
            `update_rms`), and `capture=("outputs", "params")` without `stats=` gives
            `update_rms` from the parameters' copies.
        loss: the loss of each step: a list, 1-D array or tensor (the loss of step i at
            index i), or `{step: loss}`.
        step: the spike to explain; default: the largest spike found in `loss`.

    Returns:
        An `Explanation`: the spike's step, the `Cause`s (empty when no spike was found,
        with a message saying so, or when nothing moved before it) and a summary.

    Raises:
        TypeError: `recording` is not a tracker or a list of stashes; `loss` is not numbers
            per step; `step` is not an int.

    Example:
        >>> losses = []
        >>> with tensor_tracker.track(model, stats=True) as t:
        ...     for step in range(20):  # the batch is 100x too large at step 15
        ...         loss = model(x * (100 if step == 15 else 1)).square().mean()
        ...         loss.backward(); losses.append(loss.item()); t.step()
        >>> explanation = tensor_tracker.explain_spike(t, losses)
        >>> print(explanation)  # doctest: +ELLIPSIS
        Loss spike at step 15: 586.7 after a median of 0.1009. 16 quantities moved ...
          1. 0 output_rms: from step 15 (at the spike), 57.5 = 97.6x its baseline 0.589
          2. 0 output_abs_max: from step 15 (at the spike), 148 = 96.2x its baseline 1.54
        ...
        >>> fig = tensor_tracker.plot.spike_plot(explanation)  # the top causes, aligned
    """
    steps, values = loss_series(loss, "explain_spike(loss=...)")
    if step is not None:
        check_int(step, "explain_spike(step=...)", "the step of the spike to explain (an int)")
    frame, stashes = recording_frame(recording, "explain_spike(recording)")
    return explain_frame(frame, stashes, steps, values, step)
