"""`histogram`: the distribution of stashed tensors or recorded histograms."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .._core.records import Stash
from .._data.select import (
    as_stashes,
    shown_value,
)
from .._optional import require
from .._validate import check_bool, check_count
from ..errors import ArgumentTypeError, ArgumentValueError
from ..stats import Stats

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
from .._data.series import (
    Series,
    auto_range,
    bin_counts,
    check_range,
    empty_error,
    not_shown,
    recorded_series,
    series_labels,
    tensor_series,
)
from ._figure import MAX_LEGEND, category_ticks, new_axes, short_label, themed

__all__ = ["histogram"]


@themed
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

    Each stash's tensor (the first one of a tuple, dict or `ModelOutput`) is binned with
    torch (no Python loop over elements), so a million values redraw in milliseconds. Values that cannot be shown are counted and
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
        >>> fig.axes[0].get_xlabel()
        'log2|value|'
    """
    if isinstance(stashes, Tensor):
        items: list[Stash] = []
        tensors: list[Any] = [stashes]
        default_labels = ["tensor"]
    else:
        items = as_stashes(stashes, "stashes")
        if not items:
            raise empty_error("histogram", "stashes")
        # A stash holding no tensor keeps its value, for the error below to name its type.
        tensors = [v if (v := shown_value(s)) is not None else s.first_value for s in items]
        default_labels = series_labels(items)
    check_count(bins, "histogram(bins=...)", "bins")
    if log2 is not None:
        check_bool(log2, "histogram(log2=...)")
    span = check_range(range)
    if labels is not None:
        labels = [str(label) for label in labels]
        if len(labels) != len(tensors):
            raise ArgumentValueError(
                f"labels has {len(labels)} entries for {len(tensors)} stashes; give one per stash"
            )
    names = list(labels) if labels is not None else default_labels

    n_stats = sum(isinstance(v, Stats) for v in tensors)
    for name, value in zip(names, tensors, strict=True):
        if not isinstance(value, (Tensor, Stats)):
            raise ArgumentTypeError(
                f"histogram: {name} holds a {type(value).__name__}, not a tensor; plot stashes "
                "recorded with the default copy (or stats=[tensor_tracker.stats.histogram()])"
            )
    if 0 < n_stats < len(tensors):
        raise ArgumentValueError(
            "histogram: stashes mix tensors and recorded statistics; plot them separately"
        )
    if n_stats:
        series, edges_t, log2 = recorded_series(items, tensors, names, stat, log2)
        edges = list(edges_t)
        if not any(s.shown for s in series):
            detail = "; ".join(s.legend() for s in series)
            raise ArgumentValueError(f"histogram: no value falls in the recorded bins ({detail})")
    else:
        log2 = bool(log2)
        series = [tensor_series(t, n, log2) for t, n in zip(tensors, names, strict=True)]
        if not any(s.finite for s in series):
            detail = "; ".join(s.legend() for s in series)
            raise ArgumentValueError(
                f"histogram: nothing to plot, no finite{' nonzero' if log2 else ''} values "
                f"({detail})" + (" ; try log2=False" if log2 else "")
            )
        lo, hi = span if span is not None else auto_range(series)
        edges = torch.linspace(lo, hi, bins + 1, dtype=torch.float64).tolist()
        for s in series:
            s.counts = bin_counts(s, bins, lo, hi)

    if len(series) > MAX_LEGEND:
        return _rows(series, edges, log2, ax)
    fig, ax = new_axes(ax, (7.0, 4.0))
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
    if n_stats:
        _fit_to_counts(ax, series, edges)
    ax.set_xlabel("log2|value|" if log2 else "value")
    ax.set_ylabel("count")
    ax.set_title(names[0] if len(series) == 1 else f"{len(series)} tensors")
    ax.legend(fontsize="small")
    return fig


def _fit_to_counts(ax: Axes, series: list[Series], edges: list[float]) -> None:
    """Narrow the x axis to the recorded bins that hold values, one bin either side: a
    fixed-range histogram (`exp_hist`: 254 binades) is otherwise mostly empty."""
    held = [i for s in series for i, v in enumerate(s.counts) if v > 0]
    if held:
        lo, hi = max(min(held) - 1, 0), min(max(held) + 2, len(edges) - 1)
        ax.set_xlim(edges[lo], edges[hi])


def _rows(series: list[Series], edges: list[float], log2: bool, ax: Axes | None) -> Figure:
    """Many histograms as a heatmap: one row per series (first at the top), x the bins,
    colour the count on a log scale; row labels thinned to fit."""
    colors = require("matplotlib.colors", "plot")
    numpy = require("numpy", "plot")
    fig, ax = new_axes(ax, (9.0, min(10.0, 3.0 + 0.1 * len(series))))
    counts = numpy.array([s.counts for s in series], dtype=float)
    positive = counts[counts > 0]
    if positive.size == 0:
        raise ArgumentValueError("histogram: no value falls in the bins")
    norm = colors.LogNorm(vmin=float(positive.min()), vmax=max(float(positive.max()), 1.0))
    rows = numpy.arange(len(series) + 1) - 0.5
    masked = numpy.ma.masked_equal(counts, 0.0)
    mesh = ax.pcolormesh(edges, rows, masked, norm=norm, cmap="viridis", rasterized=True)
    ax.invert_yaxis()
    category_ticks(ax.yaxis, [short_label(s.label) for s in series], fontsize="x-small")
    fig.colorbar(mesh, ax=ax, label="count (log scale)")
    ax.set_xlabel("log2|value|" if log2 else "value")
    left_out = not_shown(series)
    title = f"{len(series)} tensors, one row each"
    ax.set_title(title + (f"\nnot shown: {left_out}" if left_out else ""), fontsize="medium")
    return fig
