"""Numbers behind the histogram and scale figures: series of values, binning, statistic values per stash."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .._core.records import Stash
from ..errors import ArgumentTypeError, ArgumentValueError
from ..stats import EXP_HIST, NAMES, Stats, parse, stats_table
from .select import (
    display_name,
    module_order,
    shown_value,
    stash_label,
)

if TYPE_CHECKING:
    pass
__all__ = [
    "Series",
    "auto_range",
    "bin_counts",
    "check_range",
    "empty_error",
    "float_values",
    "last_step",
    "log2_abs",
    "mean_by",
    "not_shown",
    "nothing_selected",
    "recorded_series",
    "series_labels",
    "stat_values",
    "tensor_label",
    "tensor_labels",
    "tensor_series",
]


def log2_abs(values: Sequence[float]) -> list[float]:
    """log2|v|, NaN where that is not finite (zeros, NaN, inf)."""
    out = []
    for v in values:
        a = abs(v)
        out.append(math.log2(a) if a > 0 and math.isfinite(a) else math.nan)
    return out


def stat_values(stashes: Sequence[Stash], stat: str, argument: str = "stat") -> list[float]:
    """`stat` of each stash as a float (NaN where the stash holds no tensor): read from
    `stats=` stashes, or computed on each tensor's device; one batched read either way.
    A stash holding several tensors (a tuple, a dict, a `ModelOutput`) counts its first
    (`shown_value`), as the statistics columns of `to_frame` do."""
    if not isinstance(stat, str):
        raise ArgumentTypeError(
            f"{argument} must be a statistic name (str), got {type(stat).__name__}"
        )
    recorded: list[tuple[int, Stats]] = []
    computed: list[tuple[int, Stats]] = []
    fn = None
    for i, s in enumerate(stashes):
        value = shown_value(s)
        if isinstance(value, Stats):
            if stat not in value:
                raise ArgumentValueError(
                    f"{argument}={stat!r} was not recorded for {stash_label(s)}; recorded "
                    f"statistics: {list(value.names)}. Pick one of those, or track with "
                    f"stats=[..., {stat!r}]"
                )
            recorded.append((i, value))
        elif isinstance(value, Tensor):
            if fn is None:
                try:
                    fn = parse([stat])
                except (ValueError, TypeError) as error:
                    raise ArgumentValueError(
                        f"{argument}={stat!r} is not a statistic of tensor_tracker.stats "
                        f"({error}); choose one of {list(NAMES)}"
                    ) from None
            computed.append((i, fn(value)))
    out = [math.nan] * len(stashes)
    pairs = recorded + computed
    if pairs:
        column = stats_table([p[1] for p in pairs])[stat]
        for (i, _), v in zip(pairs, column, strict=True):
            if isinstance(v, list):
                raise ArgumentValueError(
                    f"{argument}={stat!r} is a histogram; choose a scalar statistic such as "
                    "'rms' (see histogram_heatmap for histograms)"
                )
            out[i] = float(v)
    return out


def tensor_label(name: str, attr: str) -> str:
    """How figures name one recorded tensor of a module: the module's name for its output
    (no `attr`), else the module's name and the attribute joined by a dot: `"1.weight"`,
    `"1.bias"`, `"encoder.hidden_states"`, `"<model>.input_ids"` (the root's input)."""
    return f"{display_name(name)}.{attr}" if attr else name


def tensor_labels(pairs: Iterable[tuple[str, str]], modules: Sequence[str]) -> list[str]:
    """The `tensor_label` of each distinct (module name, attr) pair: by module in the order
    of `modules`, and within a module in order of first appearance; pairs of modules not
    in `modules` are left out."""
    attrs: dict[str, dict[str, None]] = {}
    for name, attr in pairs:
        attrs.setdefault(name, {}).setdefault(attr, None)
    return [tensor_label(name, attr) for name in modules for attr in attrs.get(name, {})]


def last_step(stashes: Sequence[Stash]) -> int:
    """The latest step any of `stashes` was recorded at."""
    return max(s.step for s in stashes)


def mean_by(keys: Sequence[Any], values: Sequence[float]) -> dict[Any, float]:
    """Mean of the non-NaN values per key (NaN if there are none)."""
    sums: dict[Any, list[float]] = {}
    for k, v in zip(keys, values, strict=True):
        acc = sums.setdefault(k, [0.0, 0.0])
        if not math.isnan(v):
            acc[0] += v
            acc[1] += 1
    return {k: (a / n if n else math.nan) for k, (a, n) in sums.items()}


def empty_error(function: str, argument: str) -> ArgumentValueError:
    """The error for a figure or table asked of no stashes."""
    return ArgumentValueError(
        f"{function}: {argument} holds no stashes; record some first, e.g. "
        "`with tensor_tracker.track(model) as t: model(x).sum().backward()`"
    )


def nothing_selected(function: str, criteria: str, stashes: Sequence[Stash]) -> ArgumentValueError:
    """The error for a selection that matches no stash; it lists what was recorded."""
    names = ", ".join(display_name(n) for n in module_order(stashes)[:12])
    return ArgumentValueError(
        f"{function}: no stash matches {criteria}; recorded modules: {names}"
        + (" ..." if len(module_order(stashes)) > 12 else "")
    )


class Series:
    """One histogram series: counts per bin and what was left out."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.values: Tensor | None = None  # binned axis values (log2|x| or x)
        self.finite = 0  # how many of `values` are finite
        self.span: tuple[float, float] | None = None  # their min and max
        self.counts: list[float] = []
        self.shown = 0
        self.missing: dict[str, int] = {}

    def legend(self) -> str:
        text = f"{self.label}: {self.shown:,} values"
        left_out = [f"{n:,} {what}" for what, n in self.missing.items() if n]
        if left_out:
            text += "; not shown: " + ", ".join(left_out)
        return text


def not_shown(series: Iterable[Series]) -> str:
    """What the series left out, summed over them: `"4,840 zeros, 3 NaN/inf"` (or `""`)."""
    missing: dict[str, float] = {}
    for ser in series:
        for what, n in ser.missing.items():
            missing[what] = missing.get(what, 0) + n
    return ", ".join(f"{round(n):,} {what}" for what, n in missing.items() if n)


def float_values(tensor: Tensor, label: str) -> Tensor:
    """A tensor's values as a flat float tensor for binning (a complex tensor is refused)."""
    if tensor.is_complex():
        raise ArgumentTypeError(
            f"histogram: {label} is a complex tensor; pass tensor.real, tensor.imag or "
            "tensor.abs() instead"
        )
    flat = tensor.detach().reshape(-1)
    if flat.dtype in (torch.float32, torch.float64):
        return flat
    # Integers and bools are exact in float64; low-precision floats widen to float32.
    return flat.to(torch.float32 if flat.dtype.is_floating_point else torch.float64)


def tensor_series(tensor: Tensor, label: str, log2: bool) -> Series:
    """The values to bin (log2|x| when `log2`; non-finite entries are left in place, as
    `torch.histc` ignores them), how many are finite, their range, and what is left out."""
    series = Series(label)
    x = float_values(tensor, label)
    total = x.numel()
    if log2:
        x = x.abs().log2_()  # zeros become -inf
    finite = torch.isfinite(x)
    n_finite = int(finite.sum())
    zeros = int((x == -math.inf).sum()) if log2 and n_finite < total else 0
    if n_finite == total and total:
        lo, hi = torch.aminmax(x)
        series.span = (float(lo), float(hi))
    elif n_finite:
        lo = torch.where(finite, x, math.inf).min()
        hi = torch.where(finite, x, -math.inf).max()
        series.span = (float(lo), float(hi))
    series.values = x
    series.finite = n_finite
    if log2:
        series.missing["zeros"] = zeros
    series.missing["NaN/Inf"] = total - n_finite - zeros
    return series


def bin_counts(series: Series, bins: int, lo: float, hi: float) -> list[float]:
    """Bin `series.values` in `bins` equal bins over [lo, hi]; set `shown` and count the
    finite values outside as `"outside range"`."""
    counts = [0.0] * bins
    inside = 0
    if series.finite and series.values is not None:
        result = torch.histc(series.values, bins=bins, min=lo, max=hi).to(torch.float64)
        counts = result.tolist()
        inside = round(sum(counts))
    series.missing["outside range"] = series.finite - inside
    series.shown = inside
    series.values = None
    return counts


def auto_range(series: Sequence[Series]) -> tuple[float, float]:
    """The binned range that covers every series (one unit wide when all values are equal)."""
    spans = [s.span for s in series if s.span is not None]
    lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
    if lo == hi:  # one value, or all equal: a bin of width 1 around it
        lo, hi = lo - 0.5, hi + 0.5
    return lo, hi


def check_range(range: Any) -> tuple[float, float] | None:
    """A histogram `range=` as `(lo, hi)` floats, or None; refuses anything else."""
    if range is None:
        return None
    try:
        lo, hi = (float(v) for v in range)
    except (TypeError, ValueError):
        raise ArgumentValueError(f"range must be None or (lo, hi), got {range!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ArgumentValueError(f"range must be (lo, hi) with finite lo < hi, got {range!r}")
    return lo, hi


def series_labels(stashes: Sequence[Stash]) -> list[str]:
    """A legend label per stash: its name, plus call and step where several share a name."""
    keys = [(s.name, s.grad, s.kind, s.attr) for s in stashes]
    steps: dict[tuple[Any, ...], set[int]] = {}
    calls: dict[tuple[Any, ...], set[tuple[int, int]]] = {}
    for s, k in zip(stashes, keys, strict=True):
        steps.setdefault(k, set()).add(s.step)
        calls.setdefault(k, set()).add((s.step, s.call))
    return [
        stash_label(s, step=len(steps[k]) > 1, call=len(calls[k]) > len(steps[k]))
        for s, k in zip(stashes, keys, strict=True)
    ]


def recorded_series(
    stashes: Sequence[Stash],
    stats_list: list[Stats],
    labels: list[str],
    stat: str,
    log2: bool | None,
    function: str = "histogram",
) -> tuple[list[Series], tuple[float, ...], bool]:
    """Series from recorded histogram statistics, with their bin edges and whether they are
    log2; errors name `function`, the figure asked for. The default `stat="hist"` reads
    the exponent histogram (`"exp_hist"`) when that is the histogram every stash holds."""
    if stat == "hist" and all(
        EXP_HIST.name in st.layout.histograms and "hist" not in st.layout.histograms
        for st in stats_list
    ):
        stat = EXP_HIST.name
    for s, st in zip(stashes, stats_list, strict=True):
        if stat not in st.layout.histograms:
            held = list(st.layout.histograms)
            raise ArgumentValueError(
                f"{function}: {stash_label(s)} holds statistics without a histogram named "
                f"{stat!r} (histograms: {held or 'none'}); track with "
                'stats=[*tensor_tracker.stats.DEFAULT, "exp_hist"] (or stats.histogram()), '
                "or without stats= to keep tensors"
            )
    edges = stats_list[0].edges(stat)
    recorded_log2 = stats_list[0].is_log2(stat)
    if any(st.edges(stat) != edges or st.is_log2(stat) != recorded_log2 for st in stats_list):
        raise ArgumentValueError(
            f"{function}: the recorded histograms have different bins; plot them one at a time"
        )
    if log2 is not None and log2 != recorded_log2:
        raise ArgumentValueError(
            f"{function}: log2={log2} but the recorded histogram {stat!r} was binned with "
            f"log2={recorded_log2}; leave log2=None for recorded histograms"
        )
    table = stats_table(stats_list)
    out = []
    for i, label in enumerate(labels):
        series = Series(label)
        series.counts = [float(c) for c in table[stat][i]]
        series.shown = round(sum(series.counts))
        series.missing = {
            "zeros": round(table[f"{stat}_zero"][i]),
            "NaN/Inf": round(table[f"{stat}_nonfinite"][i]),
            "outside range": round(table[f"{stat}_below"][i] + table[f"{stat}_above"][i]),
            "rejected": round(table[f"{stat}_rejected"][i]),
        }
        out.append(series)
    return out, edges, recorded_log2
