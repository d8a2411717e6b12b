"""Matplotlib figures of what a tracker recorded.

- `histogram`: the distribution of one or several stashed tensors (or recorded histograms).
- `scale_plot`: forward and gradient scale of every module, against number-format limits.
- `umap_plot`: each token's path through the layers, embedded in 2-D (UMAP or PCA).
- `history`: a statistic over training steps, per module.
- `histogram_heatmap`: one module's histogram over training steps.

Every function returns a `matplotlib.figure.Figure` built without pyplot, so it works
headless and leaves no global state behind; in a notebook the returned figure displays
itself (as a PNG, unless a matplotlib backend such as `%matplotlib inline` shows it). Pass `ax=` to draw into an axes of your own figure instead. matplotlib is imported
only when a function is called (`pip install 'tensor-tracker[plot]'`).

Example:
    >>> import tensor_tracker
    >>> from tensor_tracker import plot
    >>> with tensor_tracker.track(model) as t:
    ...     model(x).sum().backward()
    >>> plot.scale_plot(t)                 # rms per module, forward and gradient
    >>> plot.histogram(t[0], log2=True)    # log2|x| of the first stash
"""

from __future__ import annotations

import itertools
import math
import re
import sys
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor

from ._optional import require
from ._select import (
    ROOT_LABEL,
    as_stashes,
    display_name,
    module_order,
    name_filter,
    select,
    stash_label,
    stash_tensor,
)
from .core.records import Stash
from .stats import NAMES, Stats, parse, stats_table
from .stats.formats import FORMATS, Format

if TYPE_CHECKING:
    import pandas
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "DEFAULT_FORMATS",
    "MAX_TOKENS",
    "default_layers",
    "histogram",
    "histogram_heatmap",
    "history",
    "scale_plot",
    "umap_plot",
]

DEFAULT_FORMATS: tuple[str, ...] = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")
"""The `tensor_tracker.formats.FORMATS` keys whose limits `scale_plot` and `history` draw."""

MAX_TOKENS = 64
"""How many tokens (rows) `umap_plot` embeds when `tokens=` is not given: the first 64."""

_Names = str | Sequence[str] | None

# Reference lines: which limit, its line style, and how the legend describes the style.
_LIMITS: tuple[tuple[str, str, str], ...] = (
    ("max", "-", "max (overflow above)"),
    ("min_normal", "--", "smallest normal"),
    ("min_subnormal", ":", "smallest subnormal (underflow below)"),
)
_FORMAT_COLORS = ("tab:red", "tab:purple", "tab:olive", "tab:cyan")
# Reference lines further than this from 0 (in log2 units) do not stretch the view.
_VIEW_LIMIT = 32.0


# --------------------------------------------------------------------------------------
# Shared helpers


def _figure(figsize: tuple[float, float]) -> Figure:
    """A new Figure outside pyplot, displayable in IPython (see `_show_figures_in_ipython`)."""
    figure_module = require("matplotlib.figure", "plot")
    _show_figures_in_ipython(figure_module.Figure)
    fig: Figure = figure_module.Figure(figsize=figsize, layout="constrained")
    return fig


def _show_figures_in_ipython(figure_class: type) -> None:
    """Figures made without pyplot display in a notebook only once a matplotlib backend has
    registered an image formatter for them (`%matplotlib inline`, or importing pyplot).
    Register a PNG one when there is none yet, so that a returned figure shows itself."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    formatters = getattr(getattr(shell, "display_formatter", None), "formatters", {})
    png = formatters.get("image/png")
    if png is None:
        return
    try:
        png.lookup_by_type(figure_class)
    except KeyError:
        from IPython.core.pylabtools import print_figure

        png.for_type(
            figure_class,
            lambda fig: print_figure(fig, "png", bbox_inches="tight"),  # type: ignore[no-untyped-call]
        )


def _new_axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    """A fresh one-axes Figure, or `ax` and the figure it belongs to."""
    if ax is None:
        fig = _figure(figsize)
        return fig, fig.add_subplot()
    return _root_figure(ax), ax


def _root_figure(ax: Any) -> Figure:
    if not hasattr(ax, "get_figure"):
        raise TypeError(f"ax must be a matplotlib Axes, got {type(ax).__name__}")
    fig = ax.get_figure(root=True)
    if fig is None:
        raise ValueError("ax must belong to a figure (create it with fig.add_subplot())")
    return fig  # type: ignore[no-any-return]


def _check_choice(value: Any, argument: str, choices: Sequence[Any]) -> None:
    if value not in choices:
        raise ValueError(f"{argument} must be one of {list(choices)}, got {value!r}")


def _log2_abs(values: Sequence[float]) -> list[float]:
    """log2|v|, NaN where that is not finite (zeros, NaN, inf)."""
    out = []
    for v in values:
        a = abs(v)
        out.append(math.log2(a) if a > 0 and math.isfinite(a) else math.nan)
    return out


def _formats(formats: Sequence[str]) -> list[Format]:
    if isinstance(formats, str):
        formats = (formats,)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(
            f"formats: unknown format(s) {unknown}; known: {list(FORMATS)} (or () for none)"
        )
    return [FORMATS[f] for f in formats]


def _format_lines(ax: Axes, formats: Sequence[Format], data: Sequence[float]) -> list[Any]:
    """Horizontal lines at log2 of each format's limits, and legend handles describing them.

    Every line has `gid` `"limit:<format>:<max|min_normal|min_subnormal>"`. The view covers
    the data and the limits within 2**±32 (bfloat16's ±2**128 would flatten the data; its
    legend entry then says "off-scale").
    """
    lines = require("matplotlib.lines", "plot")
    finite = [v for v in data if math.isfinite(v)]
    lo, hi = (min(finite), max(finite)) if finite else (-1.0, 1.0)
    for fmt in formats:
        for which, _, _ in _LIMITS:
            y = math.log2(getattr(fmt, which))
            if abs(y) <= _VIEW_LIMIT:
                lo, hi = min(lo, y), max(hi, y)
    pad = max(1.0, 0.05 * (hi - lo))
    ax.set_ylim(lo - pad, hi + pad)
    handles = []
    for i, fmt in enumerate(formats):
        color = _FORMAT_COLORS[i % len(_FORMAT_COLORS)]
        off = False
        for which, style, _ in _LIMITS:
            y = math.log2(getattr(fmt, which))
            off = off or not (lo - pad <= y <= hi + pad)
            ax.axhline(
                y,
                color=color,
                linestyle=style,
                linewidth=0.9,
                alpha=0.7,
                zorder=1,
                gid=f"limit:{fmt.name}:{which}",
                label=f"_{fmt.name} {which}",
            )
        span = f"2^{math.log2(fmt.min_subnormal):.0f} .. 2^{math.log2(fmt.max):.1f}" + (
            ", off-scale" if off else ""
        )
        handles.append(lines.Line2D([], [], color=color, label=f"{fmt.label} ({span})"))
    if formats:
        for _, style, text in _LIMITS:
            handles.append(lines.Line2D([], [], color="gray", linestyle=style, label=text))
    return handles


def _stat_values(stashes: Sequence[Stash], stat: str, argument: str = "stat") -> list[float]:
    """`stat` of each stash as a float (NaN where the stash holds no tensor): read from
    `stats=` stashes, or computed on each tensor's device; one batched read either way."""
    if not isinstance(stat, str):
        raise TypeError(f"{argument} must be a statistic name (str), got {type(stat).__name__}")
    recorded: list[tuple[int, Stats]] = []
    computed: list[tuple[int, Stats]] = []
    fn = None
    for i, s in enumerate(stashes):
        value = s.first_value
        if isinstance(value, Stats):
            if stat not in value:
                raise ValueError(
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
                    raise ValueError(
                        f"{argument}={stat!r} is not a statistic of tensor_tracker.stats "
                        f"({error}); choose one of {list(NAMES)}"
                    ) from None
            computed.append((i, fn(value)))
    out = [math.nan] * len(stashes)
    pairs = recorded + computed
    if pairs:
        column = stats_table([p[1] for p in pairs])[stat]
        for (i, _), v in zip(pairs, column):
            if isinstance(v, list):
                raise ValueError(
                    f"{argument}={stat!r} is a histogram; choose a scalar statistic such as "
                    "'rms' (see histogram_heatmap for histograms)"
                )
            out[i] = float(v)
    return out


def _last_step(stashes: Sequence[Stash]) -> int:
    return max(s.step for s in stashes)


def _mean_by(keys: Sequence[Any], values: Sequence[float]) -> dict[Any, float]:
    """Mean of the non-NaN values per key (NaN if there are none)."""
    sums: dict[Any, list[float]] = {}
    for k, v in zip(keys, values):
        acc = sums.setdefault(k, [0.0, 0.0])
        if not math.isnan(v):
            acc[0] += v
            acc[1] += 1
    return {k: (a / n if n else math.nan) for k, (a, n) in sums.items()}


def _empty_error(function: str, argument: str) -> ValueError:
    return ValueError(
        f"{function}: {argument} holds no stashes; record some first, e.g. "
        "`with tensor_tracker.track(model) as t: model(x).sum().backward()`"
    )


def _nothing_selected(function: str, criteria: str, stashes: Sequence[Stash]) -> ValueError:
    names = ", ".join(display_name(n) for n in module_order(stashes)[:12])
    return ValueError(
        f"{function}: no stash matches {criteria}; recorded modules: {names}"
        + (" ..." if len(module_order(stashes)) > 12 else "")
    )


# --------------------------------------------------------------------------------------
# histogram


class _Series:
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


def _float_values(tensor: Tensor, label: str) -> Tensor:
    if tensor.is_complex():
        raise TypeError(
            f"histogram: {label} is a complex tensor; pass tensor.real, tensor.imag or "
            "tensor.abs() instead"
        )
    flat = tensor.detach().reshape(-1)
    if flat.dtype in (torch.float32, torch.float64):
        return flat
    # Integers and bools are exact in float64; low-precision floats widen to float32.
    return flat.to(torch.float32 if flat.dtype.is_floating_point else torch.float64)


def _tensor_series(tensor: Tensor, label: str, log2: bool) -> _Series:
    """The values to bin (log2|x| when `log2`; non-finite entries are left in place, as
    `torch.histc` ignores them), how many are finite, their range, and what is left out."""
    series = _Series(label)
    x = _float_values(tensor, label)
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


def _bin(series: _Series, bins: int, lo: float, hi: float) -> list[float]:
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


def _auto_range(series: Sequence[_Series]) -> tuple[float, float]:
    spans = [s.span for s in series if s.span is not None]
    lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
    if lo == hi:  # one value, or all equal: a bin of width 1 around it
        lo, hi = lo - 0.5, hi + 0.5
    return lo, hi


def _check_range(range: Any) -> tuple[float, float] | None:
    if range is None:
        return None
    try:
        lo, hi = (float(v) for v in range)
    except (TypeError, ValueError):
        raise ValueError(f"range must be None or (lo, hi), got {range!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"range must be (lo, hi) with finite lo < hi, got {range!r}")
    return lo, hi


def _series_labels(stashes: Sequence[Stash]) -> list[str]:
    keys = [(s.name, s.grad, s.kind, s.attr) for s in stashes]
    steps: dict[tuple[Any, ...], set[int]] = {}
    calls: dict[tuple[Any, ...], set[tuple[int, int]]] = {}
    for s, k in zip(stashes, keys):
        steps.setdefault(k, set()).add(s.step)
        calls.setdefault(k, set()).add((s.step, s.call))
    return [
        stash_label(s, step=len(steps[k]) > 1, call=len(calls[k]) > len(steps[k]))
        for s, k in zip(stashes, keys)
    ]


def _recorded_series(
    stashes: Sequence[Stash],
    stats_list: list[Stats],
    labels: list[str],
    stat: str,
    log2: bool | None,
) -> tuple[list[_Series], tuple[float, ...], bool]:
    for s, st in zip(stashes, stats_list):
        if stat not in st.layout.histograms:
            held = list(st.layout.histograms)
            raise ValueError(
                f"histogram: {stash_label(s)} holds statistics without a histogram named "
                f"{stat!r} (histograms: {held or 'none'}); track with "
                "stats=[..., tensor_tracker.stats.histogram()], or without stats= to keep tensors"
            )
    edges = stats_list[0].edges(stat)
    recorded_log2 = stats_list[0].is_log2(stat)
    if any(st.edges(stat) != edges or st.is_log2(stat) != recorded_log2 for st in stats_list):
        raise ValueError(
            "histogram: the recorded histograms have different bins; plot them one at a time"
        )
    if log2 is not None and log2 != recorded_log2:
        raise ValueError(
            f"histogram: log2={log2} but the recorded histogram {stat!r} was binned with "
            f"log2={recorded_log2}; leave log2=None for recorded histograms"
        )
    table = stats_table(stats_list)
    out = []
    for i, label in enumerate(labels):
        series = _Series(label)
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


def histogram(
    stashes: Stash | Sequence[Stash] | Tensor | Any,
    *,
    bins: int = 64,
    log2: bool | None = None,
    range: tuple[float, float] | None = None,
    ax: Axes | None = None,
    labels: Sequence[str] | None = None,
    stat: str = "hist",
) -> Figure:
    """Histogram of one stashed tensor, or of several overlaid.

    Each stash's `first_value` tensor is binned with torch (no Python loop over elements),
    so a million values redraw in milliseconds. Values that cannot be shown are counted and
    named in the legend rather than dropped silently: NaN/±inf, zeros (in log2 mode, as
    log2(0) is undefined) and values outside an explicit `range`. Integer and bool tensors
    are binned as floats.

    Stashes recorded with `track(model, stats=[..., tensor_tracker.stats.histogram()])` hold
    counts rather than tensors; their recorded bins are drawn as they are (`bins` and
    `range` are then ignored).

    Args:
        stashes: a `Stash`, a list of stashes (e.g. `[t[0], t[3]]`, or a whole `Tracker`),
            or a tensor.
        bins: number of equal-width bins (tensors only).
        log2: bin log2|x| instead of x, to see the scale of the values. Default: `False`
            for tensors, the recorded mode for recorded histograms.
        range: `(lo, hi)` of the binned axis (in log2 units when `log2`); default: the
            smallest to the largest value over all series.
        ax: draw into this matplotlib axes instead of a new figure.
        labels: legend labels, one per stash; default: module name, `fwd`/`grad`, and the
            step/call when several stashes of one module are shown.
        stat: for recorded histograms, the name of the histogram statistic.

    Returns:
        The matplotlib `Figure`; each series is one filled step patch in `ax.patches`
        (`patch.get_data().values` holds its counts, one per bin).

    Raises:
        TypeError: `stashes` is not a stash, a list of stashes or a tensor, or a stash holds
            something else (e.g. `None` or a complex tensor).
        ValueError: nothing to plot (no stashes, only NaN/Inf values, or only zeros with
            `log2=True`), invalid `bins`/`range`/`labels`, or a mix of tensors and recorded
            histograms.

    Example:
        >>> fig = plot.histogram([t[0], t[-1]], log2=True)  # two stashes, overlaid
        >>> fig.savefig("hist.png")
    """
    if isinstance(stashes, Tensor):
        items: list[Stash] = []
        tensors: list[Any] = [stashes]
        default_labels = ["tensor"]
    else:
        items = as_stashes(stashes, "stashes")
        if not items:
            raise _empty_error("histogram", "stashes")
        tensors = [s.first_value for s in items]
        default_labels = _series_labels(items)
    if not isinstance(bins, int) or isinstance(bins, bool) or bins < 1:
        raise ValueError(f"bins must be a positive int, got {bins!r}")
    span = _check_range(range)
    if labels is not None:
        labels = [str(label) for label in labels]
        if len(labels) != len(tensors):
            raise ValueError(
                f"labels has {len(labels)} entries for {len(tensors)} stashes; give one per stash"
            )
    names = list(labels) if labels is not None else default_labels

    n_stats = sum(isinstance(v, Stats) for v in tensors)
    for name, value in zip(names, tensors):
        if not isinstance(value, (Tensor, Stats)):
            raise TypeError(
                f"histogram: {name} holds a {type(value).__name__}, not a tensor; plot stashes "
                "recorded with the default copy (or stats=[tensor_tracker.stats.histogram()])"
            )
    if 0 < n_stats < len(tensors):
        raise ValueError(
            "histogram: stashes mix tensors and recorded statistics; plot them separately"
        )
    if n_stats:
        series, edges_t, log2 = _recorded_series(items, tensors, names, stat, log2)
        edges = list(edges_t)
        if not any(s.shown for s in series):
            detail = "; ".join(s.legend() for s in series)
            raise ValueError(f"histogram: no value falls in the recorded bins ({detail})")
    else:
        log2 = bool(log2)
        series = [_tensor_series(t, n, log2) for t, n in zip(tensors, names)]
        if not any(s.finite for s in series):
            detail = "; ".join(s.legend() for s in series)
            raise ValueError(
                f"histogram: nothing to plot, no finite{' nonzero' if log2 else ''} values "
                f"({detail})" + (" ; try log2=False" if log2 else "")
            )
        lo, hi = span if span is not None else _auto_range(series)
        edges = torch.linspace(lo, hi, bins + 1, dtype=torch.float64).tolist()
        for s in series:
            s.counts = _bin(s, bins, lo, hi)

    fig, ax = _new_axes(ax, (7.0, 4.0))
    to_rgba = require("matplotlib.colors", "plot").to_rgba
    alpha = 0.8 if len(series) == 1 else 0.4
    for i, s in enumerate(series):
        color = f"C{i % 10}"
        ax.stairs(
            s.counts,
            edges,
            fill=True,
            facecolor=to_rgba(color, alpha),
            edgecolor=color,
            linewidth=1.0,
            label=s.legend(),
        )
    ax.set_xlabel("log2|value|" if log2 else "value")
    ax.set_ylabel("count")
    ax.set_title(names[0] if len(series) == 1 else f"{len(series)} tensors")
    ax.legend(fontsize="small")
    return fig


# --------------------------------------------------------------------------------------
# scale_plot


def scale_plot(
    tracker_or_stashes: Any,
    *,
    stat: str = "rms",
    kind: str = "output",
    step: int | None = None,
    formats: Sequence[str] = DEFAULT_FORMATS,
    ax: Axes | None = None,
) -> Figure:
    """The scale of every module's forward value and gradient, against format limits.

    One x position per module, in execution order (the order of each module's first
    forward stash; the root model is shown as `"<model>"`), with two series: forward
    (circles) and gradient (squares), plotted as log2|stat| so each unit is a factor of 2.
    Horizontal lines mark the range of each number format: its largest value (overflow
    above, solid), smallest normal (dashed) and smallest subnormal (underflow below,
    dotted); the legend lists each format's range.

    When a module ran several times in the step (several calls), the plotted value is the
    mean of the statistic over its calls. Only one step is shown: the last recorded one
    unless `step=` is given (see `history` for steps over time).

    Works with full-tensor stashes (the statistic is computed from each tensor on its
    device) and with `track(model, stats=...)` stashes (the recorded statistic is read in
    one batched transfer).

    Args:
        tracker_or_stashes: a `Tracker` or a list of `Stash`.
        stat: a statistic name from `tensor_tracker.stats.NAMES` (e.g. `"rms"`, `"abs_max"`,
            `"std"`); for `stats=` stashes, one of the recorded statistics.
        kind: which stashes: `"output"` (the default), `"input"`, `"param"`, `"optimizer"`.
        step: the step to show; default: the last recorded step.
        formats: which formats' limits to draw (keys of `tensor_tracker.formats.FORMATS`);
            `()` for none.
        ax: draw into this matplotlib axes instead of a new figure.

    Returns:
        The matplotlib `Figure`. Its axes hold the series lines labelled `"forward"` and
        `"gradient"` and one horizontal line per format limit, with `gid`
        `"limit:<format>:<max|min_normal|min_subnormal>"` at y = log2(limit).

    Raises:
        TypeError: `tracker_or_stashes` is not a tracker or a list of stashes.
        ValueError: no stashes, none of this `kind`/`step`, an unknown or unrecorded `stat`,
            or every value is zero/NaN.

    Example:
        >>> with tensor_tracker.track(model, stats=True) as t:
        ...     loss_fn(model(x)).backward()
        >>> plot.scale_plot(t, stat="abs_max")
    """
    stashes = as_stashes(tracker_or_stashes, "tracker_or_stashes")
    if not stashes:
        raise _empty_error("scale_plot", "tracker_or_stashes")
    chosen = select(stashes, kind=kind)
    if not chosen:
        kinds = sorted({s.kind for s in stashes})
        raise ValueError(f"scale_plot: no stash of kind={kind!r}; recorded kinds: {kinds}")
    if step is None:
        step = _last_step(chosen)
    chosen = select(chosen, kind=None, step=step)
    if not chosen:
        steps = sorted({s.step for s in select(stashes, kind=kind)})
        raise ValueError(f"scale_plot: no stash at step={step}; recorded steps: {steps}")
    fmts = _formats(formats)
    values = _stat_values(chosen, stat)
    order = module_order(chosen)
    means = _mean_by([(s.name, s.grad) for s in chosen], values)
    fwd = _log2_abs([means.get((n, False), math.nan) for n in order])
    bwd = _log2_abs([means.get((n, True), math.nan) for n in order])
    has_grad = any(s.grad for s in chosen)
    if all(math.isnan(v) for v in fwd + bwd):
        raise ValueError(
            f"scale_plot: every {stat} value is zero, NaN or infinite (or no stash holds a "
            "tensor), so there is no scale to plot; try another stat= such as 'abs_max'"
        )

    # The legend beside the axes takes about 3.5 inches.
    fig, ax = _new_axes(ax, (max(9.0, 0.35 * len(order) + 5.5), 4.5))
    x = list(range(len(order)))
    handles = [ax.plot(x, fwd, marker="o", linestyle="-", color="C0", label="forward", zorder=3)[0]]
    if has_grad:
        handles.append(
            ax.plot(x, bwd, marker="s", linestyle="-", color="C1", label="gradient", zorder=3)[0]
        )
    handles += _format_lines(ax, fmts, fwd + bwd)
    ax.set_xticks(x, [display_name(n) for n in order], rotation=90, fontsize="small")
    ax.set_ylabel(f"log2({stat})" if stat not in ("mean", "min", "max") else f"log2|{stat}|")
    calls = "mean over calls, " if any(s.call for s in chosen) else ""
    ax.set_title(f"{stat} per module ({kind}, {calls}step {step})")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(handles=handles, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


# --------------------------------------------------------------------------------------
# umap_plot


_NUMBERED = re.compile(r"(^|\.)\d+$")


def default_layers(stashes: Sequence[Stash]) -> list[str]:
    """The layers `umap_plot` uses when `layers=None`.

    Among modules whose forward output is a float tensor with at least 2 dimensions: the
    numbered ones (names ending in a number, like `blocks.0`, `blocks.1` of a
    `ModuleList`, or `0`, `1` of a `Sequential`) whose outputs share the most common shape;
    when fewer than 2 are numbered, all modules with the most common output shape. In
    execution order.

    Example:
        >>> plot.default_layers(list(t))
        ['blocks.0', 'blocks.1']
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for s in stashes:
        if s.grad or s.kind != "output" or s.name in shapes:
            continue
        tensor = stash_tensor(s)
        if tensor is not None and tensor.dim() >= 2 and not tensor.is_complex():
            shapes[s.name] = tuple(tensor.shape)

    def largest_group(names: list[str]) -> list[str]:
        groups: dict[tuple[int, ...], list[str]] = {}
        for n in names:
            groups.setdefault(shapes[n], []).append(n)
        return max(groups.values(), key=len, default=[])

    numbered = largest_group([n for n in shapes if _NUMBERED.search(n)])
    return numbered if len(numbered) >= 2 else largest_group(list(shapes))


def _layer_names(stashes: Sequence[Stash], layers: _Names) -> list[str]:
    if layers is None:
        names = default_layers(stashes)
        if len(names) < 2:
            raise ValueError(
                "umap_plot: could not find 2 or more layers with outputs of the same shape; "
                "pass layers=[...] (module names) or a regex such as layers=r'blocks\\.\\d+$'"
            )
        return names
    if isinstance(layers, (str, re.Pattern)):
        keep = name_filter(layers, "layers")
        assert keep is not None
        return [n for n in module_order(stashes) if keep(n)]
    names = list(layers)
    bad = next((n for n in names if not isinstance(n, str)), None)
    if bad is not None:
        raise TypeError(f"layers must be module names (str) or a regex string, found {bad!r}")
    return ["" if n == ROOT_LABEL else n for n in names]


def _layer_rows(
    stashes: Sequence[Stash], names: list[str], grad: bool, step: int, call: int
) -> list[Tensor]:
    """Each layer's tensor as rows `[tokens, features]` (all leading dims flattened)."""
    rows = []
    what = "gradient" if grad else "forward"
    for name in names:
        found = select(stashes, names=[name], grad=grad, step=step, call=call)
        tensor = next((t for t in map(stash_tensor, found) if t is not None), None)
        if tensor is None and any(isinstance(s.first_value, Stats) for s in found):
            raise ValueError(
                f"umap_plot: layer {display_name(name)!r} holds statistics (stats=), not the "
                "tensor; track without stats= to keep the full tensors"
            )
        if tensor is None:
            raise ValueError(
                f"umap_plot: no {what} tensor for layer {display_name(name)!r} at step {step}, "
                f"call {call}"
                + (" (was it tracked with grad=True?)" if grad else "")
                + "; choose layers among the recorded modules, e.g. "
                f"{[display_name(n) for n in module_order(stashes)[:6]]}"
            )
        if tensor.is_complex():
            raise TypeError(f"umap_plot: layer {display_name(name)!r} holds a complex tensor")
        if tensor.dim() == 0:
            raise ValueError(
                f"umap_plot: layer {display_name(name)!r} holds a single number; choose layers "
                "whose outputs have a feature dimension, e.g. [batch, seq, features]"
            )
        x = tensor.detach().to("cpu", torch.float64)
        rows.append(x.reshape(-1, x.shape[-1]))
    sizes = {display_name(n): r.shape[1] for n, r in zip(names, rows)}
    if len(set(sizes.values())) > 1:
        raise ValueError(
            f"umap_plot: the layers' feature sizes differ ({sizes}); choose layers whose "
            "outputs share the last dimension, e.g. the hidden states of every block"
        )
    counts = {display_name(n): r.shape[0] for n, r in zip(names, rows)}
    if len(set(counts.values())) > 1:
        raise ValueError(
            f"umap_plot: the layers have different numbers of tokens (rows) ({counts}); "
            "choose layers that see the same tokens"
        )
    return rows


def _token_index(tokens: Any, n_rows: int, max_tokens: int) -> Tensor:
    if tokens is None:
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
        return torch.arange(min(n_rows, max_tokens))
    if isinstance(tokens, slice):
        tokens = range(n_rows)[tokens]
    if isinstance(tokens, int):
        tokens = [tokens]
    index = torch.as_tensor(list(tokens) if not isinstance(tokens, Tensor) else tokens)
    if index.dtype == torch.bool or index.is_floating_point() or index.dim() != 1:
        raise TypeError(f"tokens must be row indices (ints), a range or a slice, got {tokens!r}")
    if index.numel() == 0:
        raise ValueError("tokens selects no token; give at least one row index")
    bad = index[(index < -n_rows) | (index >= n_rows)]
    if bad.numel():
        raise ValueError(
            f"tokens: index {int(bad[0])} is out of range; the layers have {n_rows} tokens "
            "(rows after flattening all dims but the last)"
        )
    return index % n_rows


def _token_labels(token_labels: Any, index: Tensor, n_rows: int) -> list[str] | None:
    if token_labels is None:
        return None
    labels = [str(label) for label in token_labels]
    if len(labels) == n_rows:
        return [labels[i] for i in index.tolist()]
    if len(labels) == index.numel():
        return labels
    raise ValueError(
        f"token_labels has {len(labels)} entries; give one per chosen token ({index.numel()}) "
        f"or one per row of the layers ({n_rows})"
    )


def _embed(x: Tensor, method: str, seed: int) -> Tensor:
    """Rows of `x` `[N, d]` in 2-D: `[N, 2]`."""
    n = x.shape[0]
    if method == "pca":
        centered = x - x.mean(0)
        _, _, vh = torch.linalg.svd(centered, full_matrices=False)
        components = vh[:2]
        # Fix each component's sign (SVD's is arbitrary): largest loading positive.
        signs = torch.sign(components.gather(1, components.abs().argmax(1, keepdim=True)))
        components = components * torch.where(signs == 0, 1.0, signs)
        y: Tensor = centered @ components.T
        if y.shape[1] < 2:
            y = torch.cat([y, torch.zeros(n, 2 - y.shape[1], dtype=y.dtype)], dim=1)
        return y
    if n < 5:
        raise ValueError(
            f"umap_plot: method='umap' needs at least 5 points (layers x tokens), got {n}; "
            "use more tokens or method='pca'"
        )
    umap = require("umap", "umap")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # n_jobs overridden by random_state, small data, ...
        reducer = umap.UMAP(
            n_components=2,
            n_neighbors=min(15, n - 1),
            random_state=seed,
            init="spectral" if n > 20 else "random",
        )
        out = reducer.fit_transform(x.to(torch.float32).numpy())
    return torch.as_tensor(out, dtype=torch.float64)


def _draw_paths(
    ax: Axes,
    points: Tensor,
    labels: list[str] | None,
    cmap: Any,
    norm: Any,
    title: str,
    axis: str,
) -> None:
    collections = require("matplotlib.collections", "plot")
    n_layers, n_tokens = points.shape[0], points.shape[1]
    if n_layers > 1:
        segments = torch.stack([points[:-1], points[1:]], dim=2).reshape(-1, 2, 2)
        depth = torch.arange(n_layers - 1, dtype=torch.float64).repeat_interleave(n_tokens)
        paths = collections.LineCollection(
            segments.numpy(), cmap=cmap, norm=norm, linewidths=0.8, alpha=0.6, zorder=2
        )
        paths.set_array((depth + 0.5).numpy())
        ax.add_collection(paths)
    flat = points.reshape(-1, 2)
    layer = torch.arange(n_layers).repeat_interleave(n_tokens)
    ax.scatter(
        flat[:, 0].numpy(),
        flat[:, 1].numpy(),
        c=layer.numpy(),
        cmap=cmap,
        norm=norm,
        s=14,
        zorder=3,
        edgecolors="none",
    )
    if labels is not None:
        for (x, y), text in zip(points[-1].tolist(), labels):
            ax.annotate(
                text,
                (x, y),
                xytext=(3, 3),
                textcoords="offset points",
                fontsize="x-small",
                zorder=4,
            )
    ax.autoscale_view()
    ax.set_xlabel(f"{axis} 1")
    ax.set_ylabel(f"{axis} 2")
    ax.set_title(title)


def umap_plot(
    tracker_or_stashes: Any,
    *,
    layers: _Names = None,
    grad: bool | Literal["both"] = False,
    method: Literal["umap", "pca"] = "umap",
    tokens: Sequence[int] | range | slice | Tensor | None = None,
    token_labels: Sequence[Any] | None = None,
    max_tokens: int = MAX_TOKENS,
    step: int | None = None,
    call: int = 0,
    seed: int = 0,
    ax: Axes | Sequence[Axes] | None = None,
) -> Figure:
    """Each token's path through the layers, embedded in 2-D.

    Takes the output of each chosen layer (e.g. the hidden states `[batch, seq, d]` of every
    transformer block), flattens all leading dimensions so that each row is one token,
    embeds the rows of all layers jointly in 2-D, and draws each token as a line through
    its per-layer points, coloured by depth (the colorbar names the layers). With
    `grad="both"`, activations and gradients are embedded separately and drawn side by side.

    Args:
        tracker_or_stashes: a `Tracker` or a list of `Stash` (full tensors: track without
            `stats=`).
        layers: module names in the order to connect them (`"<model>"` is the root), or a
            regex/substring selecting modules in execution order; default: see
            `default_layers` (the numbered layers, e.g. `blocks.0`, `blocks.1`, ...).
            Their outputs must share the feature size (last dimension) and token count.
        grad: `False` for activations, `True` for gradients, `"both"` for two panels.
        method: `"umap"` (umap-learn, seeded with `seed`; a few seconds, the first call
            also compiles numba code) or `"pca"` (first two principal components, instant).
        tokens: which rows (tokens, after flattening) to draw: indices, a `range` or a
            `slice`; default: the first `max_tokens` rows.
        token_labels: text shown next to each token's last point: one per chosen token, or
            one per row (indexed like `tokens`), e.g. the decoded input tokens.
        max_tokens: how many rows to take when `tokens` is not given (default 64).
        step: which step's stashes; default: the last recorded step.
        call: which call of each layer in that step (default the first, 0).
        seed: random seed for UMAP.
        ax: draw into this axes (two axes when `grad="both"`) instead of a new figure.

    Returns:
        The matplotlib `Figure`: per panel a `LineCollection` (tokens x (layers - 1)
        segments) and a scatter of layers x tokens points; plus a colorbar whose tick
        labels are the layer names.

    Raises:
        TypeError: wrong argument types (e.g. `tokens` not integers).
        ValueError: fewer than 2 layers, layers with different feature sizes or token
            counts, a layer without a tensor, non-finite values, an unknown `method`, or too
            few points for UMAP.

    Example:
        >>> with tensor_tracker.track(model, include=r"blocks\\.\\d+$") as t:
        ...     model(tokens).sum().backward()
        >>> plot.umap_plot(t, method="pca", grad="both", tokens=range(16))
    """
    stashes = as_stashes(tracker_or_stashes, "tracker_or_stashes")
    if not stashes:
        raise _empty_error("umap_plot", "tracker_or_stashes")
    _check_choice(method, "method", ("umap", "pca"))
    _check_choice(grad, "grad", (False, True, "both"))
    if not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    outputs = select(stashes, kind="output")
    if not outputs:
        raise ValueError("umap_plot: no module outputs recorded (track with capture='outputs')")
    names = _layer_names(outputs, layers)
    if len(names) < 2:
        raise ValueError(
            f"umap_plot: needs at least 2 layers to draw paths through, got {len(names)} "
            f"({[display_name(n) for n in names]}); choose more layers="
        )
    if step is None:
        step = _last_step(outputs)
    panels = [False, True] if grad == "both" else [bool(grad)]
    data = [_layer_rows(outputs, names, g, step, call) for g in panels]
    n_rows = data[0][0].shape[0]
    if any(rows[0].shape[0] != n_rows for rows in data):
        raise ValueError("umap_plot: activations and gradients have different token counts")
    index = _token_index(tokens, n_rows, max_tokens)
    labels = _token_labels(token_labels, index, n_rows)
    embedded = []
    for g, rows in zip(panels, data):
        x = torch.cat([r[index] for r in rows])
        if not torch.isfinite(x).all():
            bad = [
                display_name(n) for n, r in zip(names, rows) if not torch.isfinite(r[index]).all()
            ]
            raise ValueError(
                f"umap_plot: the {'gradients' if g else 'activations'} of {bad} hold NaN or "
                "inf values, which cannot be embedded; choose other layers or tokens"
            )
        embedded.append(_embed(x, method, seed).reshape(len(names), index.numel(), 2))

    if ax is None:
        fig = _figure((6.5 * len(panels) + 1.0, 5.5))
        axes = list(fig.subplots(1, len(panels), squeeze=False)[0])
    else:
        axes = list(ax) if isinstance(ax, Sequence) else [ax]
        if len(axes) != len(panels):
            raise ValueError(f"ax: grad={grad!r} draws {len(panels)} panel(s); give as many axes")
        fig = _root_figure(axes[0])
    colors = require("matplotlib.colors", "plot")
    cm = require("matplotlib.cm", "plot")
    cmap = require("matplotlib", "plot").colormaps["viridis"]
    norm = colors.Normalize(0, max(len(names) - 1, 1))
    axis = "UMAP" if method == "umap" else "PC"
    for a, g, points in zip(axes, panels, embedded):
        what = "gradients" if g else "activations"
        title = f"{axis} of {what}: {index.numel()} tokens x {len(names)} layers (step {step})"
        _draw_paths(a, points, labels, cmap, norm, title, axis)
    bar = fig.colorbar(
        cm.ScalarMappable(norm=norm, cmap=cmap), ax=axes, ticks=list(range(len(names)))
    )
    bar.ax.set_yticklabels([display_name(n) for n in names], fontsize="small")
    bar.set_label("layer (depth)")
    return fig


# --------------------------------------------------------------------------------------
# history


def _is_frame(obj: Any) -> bool:
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(obj, pd.DataFrame)


def _history_rows(
    source: Any, stat: str, names: _Names, grad: bool, kind: str
) -> tuple[list[str], list[int], list[float], list[str]]:
    """(name, step, value) rows of the chosen modules, and all module names seen."""
    if _is_frame(source):
        frame: pandas.DataFrame = source
        missing = [c for c in ("name", "step", "grad") if c not in frame.columns]
        if missing:
            raise ValueError(
                f"history: the DataFrame lacks column(s) {missing}; pass tracker.to_frame()"
            )
        if stat not in frame.columns:
            numeric = [
                c
                for c in frame.columns
                if c not in ("name", "type", "grad", "call", "step", "kind", "attr", "training")
            ]
            raise ValueError(
                f"history: stat={stat!r} is not a column of the DataFrame; its statistics: "
                f"{numeric} (or pass the tracker to compute {stat!r} from its tensors)"
            )
        all_names = [str(n) for n in frame["name"].tolist()]
        keep_kind = frame["kind"].tolist() if "kind" in frame.columns else [kind] * len(frame)
        rows = [
            (n, int(st), float(v))
            for n, st, g, k, v in zip(
                all_names,
                frame["step"].tolist(),
                frame["grad"].tolist(),
                keep_kind,
                frame[stat].tolist(),
            )
            if bool(g) == grad and k == kind
        ]
        order = list(dict.fromkeys(all_names))
    else:
        stashes = as_stashes(source, "tracker_or_frame")
        if not stashes:
            raise _empty_error("history", "tracker_or_frame")
        chosen = select(stashes, grad=grad, kind=kind)
        values = _stat_values(chosen, stat)
        rows = [(s.name, s.step, v) for s, v in zip(chosen, values)]
        order = module_order(stashes)
        all_names = order
    if not all_names:
        raise _empty_error("history", "tracker_or_frame")
    keep = name_filter(names, "names")
    present = dict.fromkeys(n for n, _, _ in rows)
    modules = [n for n in order if n in present and (keep is None or keep(n))]
    if isinstance(names, Sequence) and not isinstance(names, str):  # the user's order
        wanted = ["" if n == ROOT_LABEL else n for n in names]
        modules = [n for n in wanted if n in present]
    if not modules:
        what = f"{'gradient' if grad else 'forward'} {kind} stashes"
        shown = ", ".join(display_name(n) for n in list(dict.fromkeys(all_names))[:12])
        raise ValueError(f"history: no {what} match names={names!r}; recorded modules: {shown}")
    chosen_rows = [r for r in rows if r[0] in set(modules)]
    return (
        [r[0] for r in chosen_rows],
        [r[1] for r in chosen_rows],
        [r[2] for r in chosen_rows],
        modules,
    )


def history(
    tracker_or_frame: Any,
    *,
    stat: str = "rms",
    names: _Names = None,
    grad: bool = False,
    kind: str = "output",
    formats: Sequence[str] = DEFAULT_FORMATS,
    ax: Axes | None = None,
) -> Figure:
    """A statistic over training steps, one line per module, on a log2 scale.

    Record steps with one tracker around the training loop and `tracker.step()` after each
    step (`every=N` records every N-th). x is the `step` column; y is log2|stat|, the mean
    over a module's calls within each step. Horizontal lines mark the number-format limits
    as in `scale_plot`.

    Args:
        tracker_or_frame: a `Tracker`, a list of `Stash`, or `tracker.to_frame()` (any
            DataFrame with `name`, `step`, `grad` and the `stat` column).
        stat: the statistic: recorded with `stats=`, a DataFrame column, or a name from
            `tensor_tracker.stats.NAMES` computed from full-tensor stashes.
        names: which modules: a substring or regex of module names, or a list of exact names
            (`"<model>"` for the root); default: all, in execution order.
        grad: `True` for the gradients, `False` for the forward values.
        kind: `"output"` (the default), `"input"`, `"param"` or `"optimizer"`.
        formats: which formats' limits to draw; `()` for none.
        ax: draw into this matplotlib axes instead of a new figure.

    Returns:
        The matplotlib `Figure`: one line per module (labelled with its name) plus the
        reference lines (`gid` `"limit:<format>:<limit>"`).

    Raises:
        TypeError: `tracker_or_frame` is of the wrong type.
        ValueError: nothing recorded, no module matches `names`, an unknown `stat`, or every
            value is zero/NaN.

    Example:
        >>> with tensor_tracker.track(model, stats=True, every=10) as t:
        ...     for batch in loader:
        ...         train_step(batch); t.step()
        >>> plot.history(t, stat="rms", names=r"blocks\\.\\d+$", grad=True)
    """
    row_names, steps, values, modules = _history_rows(tracker_or_frame, stat, names, grad, kind)
    fmts = _formats(formats)
    means = _mean_by(list(zip(row_names, steps)), values)
    fig, ax = _new_axes(ax, (8.0, 4.5))
    handles = []
    everything: list[float] = []
    for i, module in enumerate(modules):
        xs = sorted(st for (n, st) in means if n == module)
        ys = _log2_abs([means[(module, st)] for st in xs])
        everything += ys
        line = ax.plot(
            xs, ys, marker=".", color=f"C{i % 10}", label=display_name(module), zorder=3
        )[0]
        handles.append(line)
    if all(math.isnan(v) for v in everything):
        raise ValueError(
            f"history: every {stat} value is zero, NaN or infinite, so there is nothing to draw "
            "on a log scale; try another stat= such as 'abs_max'"
        )
    handles += _format_lines(ax, fmts, everything)
    ax.set_xlabel("step")
    ax.set_ylabel(f"log2({stat})" if stat not in ("mean", "min", "max") else f"log2|{stat}|")
    what = "gradients" if grad else ("outputs" if kind == "output" else f"{kind}s")
    ax.set_title(f"{stat} of {what} over steps (mean over calls)")
    ax.legend(handles=handles, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


# --------------------------------------------------------------------------------------
# histogram_heatmap


def _step_edges(steps: list[int]) -> list[float]:
    if len(steps) == 1:
        return [steps[0] - 0.5, steps[0] + 0.5]
    mids = [(a + b) / 2 for a, b in itertools.pairwise(steps)]
    return [steps[0] - (mids[0] - steps[0]), *mids, steps[-1] + (steps[-1] - mids[-1])]


def histogram_heatmap(
    tracker: Any,
    name: str,
    *,
    grad: bool = False,
    kind: str = "output",
    stat: str = "hist",
    bins: int = 64,
    log2: bool | None = None,
    range: tuple[float, float] | None = None,
    ax: Axes | None = None,
) -> Figure:
    """One module's histogram at every recorded step, as a heatmap.

    x is the step, y the histogram's bins (log2|value| for log2 bins), colour the count on
    a log scale (empty bins are blank). Counts of a step sum over the module's calls.

    With `track(model, stats=[..., tensor_tracker.stats.histogram()])` the recorded
    histogram `stat` is drawn with its own bins (`bins`, `log2` and `range` are ignored).
    With full-tensor stashes, each step's values are binned with torch over a common range.
    Values not shown (zeros in log2 mode, NaN/inf, outside the bins) are counted in the
    title.

    Args:
        tracker: a `Tracker` or a list of `Stash`.
        name: the module's name (`"<model>"` or `""` for the root).
        grad: `True` for the gradients, `False` for the forward values.
        kind: `"output"` (the default), `"input"`, `"param"` or `"optimizer"`.
        stat: the name of the recorded histogram statistic (default `"hist"`).
        bins: number of bins for full-tensor stashes.
        log2: bin log2|x| (default for full tensors: `True`).
        range: `(lo, hi)` of the binned axis for full tensors; default: all steps' values.
        ax: draw into this matplotlib axes instead of a new figure.

    Returns:
        The matplotlib `Figure`; the axes holds one `QuadMesh` whose array has shape
        `[bins, steps]`.

    Raises:
        TypeError: `tracker` is not a tracker or a list of stashes.
        ValueError: no stashes, none for this module, no histogram statistic named `stat`
            recorded, or no value to show.

    Example:
        >>> with tensor_tracker.track(model, stats=["rms", stats.histogram()]) as t:
        ...     for batch in loader:
        ...         train_step(batch); t.step()
        >>> plot.histogram_heatmap(t, "blocks.0", grad=True)
    """
    stashes = as_stashes(tracker, "tracker")
    if not stashes:
        raise _empty_error("histogram_heatmap", "tracker")
    if not isinstance(name, str):
        raise TypeError(f"name must be a module name (str), got {type(name).__name__}")
    chosen = select(stashes, names=[name], grad=grad, kind=kind)
    chosen = [s for s in chosen if isinstance(s.first_value, (Tensor, Stats))]
    if not chosen:
        raise _nothing_selected(
            "histogram_heatmap",
            f"name={name!r}, grad={grad}, kind={kind!r} (holding a tensor or statistics)",
            stashes,
        )
    steps = sorted({s.step for s in chosen})
    position = {st: i for i, st in enumerate(steps)}
    recorded = [s for s in chosen if isinstance(s.first_value, Stats)]
    missing: dict[str, float] = {}
    if recorded:
        if len(recorded) < len(chosen):
            raise ValueError("histogram_heatmap: the module's stashes mix tensors and statistics")
        stats_list: list[Stats] = [s.first_value for s in recorded]
        labels = [stash_label(s) for s in recorded]
        series, edges_t, log2_used = _recorded_series(recorded, stats_list, labels, stat, None)
        edges = list(edges_t)
        counts = torch.zeros(len(steps), len(edges) - 1, dtype=torch.float64)
        for s, ser in zip(recorded, series):
            counts[position[s.step]] += torch.tensor(ser.counts, dtype=torch.float64)
            for what, n in ser.missing.items():
                missing[what] = missing.get(what, 0) + n
    else:
        if not isinstance(bins, int) or isinstance(bins, bool) or bins < 1:
            raise ValueError(f"bins must be a positive int, got {bins!r}")
        log2_used = True if log2 is None else bool(log2)
        per_step: dict[int, list[_Series]] = {}
        for s in chosen:
            tensor = s.first_value
            per_step.setdefault(s.step, []).append(
                _tensor_series(tensor, stash_label(s), log2_used)
            )
        everything = [ser for group in per_step.values() for ser in group]
        span = _check_range(range)
        if not any(ser.finite for ser in everything):
            raise ValueError(
                f"histogram_heatmap: {display_name(name)!r} has no finite"
                f"{' nonzero' if log2_used else ''} values at any step"
            )
        lo, hi = span if span is not None else _auto_range(everything)
        edges = torch.linspace(lo, hi, bins + 1, dtype=torch.float64).tolist()
        counts = torch.zeros(len(steps), bins, dtype=torch.float64)
        for st, group in per_step.items():
            for ser in group:
                c = _bin(ser, bins, lo, hi)
                counts[position[st]] += torch.tensor(c, dtype=torch.float64)
                for what, n in ser.missing.items():
                    missing[what] = missing.get(what, 0) + n
    if float(counts.sum()) == 0:
        raise ValueError(
            f"histogram_heatmap: no value of {display_name(name)!r} falls in the bins "
            f"(not shown: {missing})"
        )
    colors = require("matplotlib.colors", "plot")
    fig, ax = _new_axes(ax, (8.0, 4.5))
    grid = counts.T.numpy()
    masked = require("numpy", "plot").ma.masked_equal(grid, 0.0)
    positive = counts[counts > 0]
    norm = colors.LogNorm(vmin=float(positive.min()), vmax=max(float(positive.max()), 1.0))
    mesh = ax.pcolormesh(_step_edges(steps), edges, masked, norm=norm, cmap="viridis")
    fig.colorbar(mesh, ax=ax, label="count (log scale)")
    ax.set_xlabel("step")
    ax.set_ylabel("log2|value|" if log2_used else "value")
    left_out = ", ".join(f"{round(n):,} {what}" for what, n in missing.items() if n)
    title = f"{display_name(name)} ({'grad' if grad else 'fwd'}): histogram over steps"
    ax.set_title(title + (f"\nnot shown: {left_out}" if left_out else ""), fontsize="medium")
    return fig
