"""`history` and `histogram_heatmap`: statistics and histograms over training steps."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from .._data.select import (
    as_stashes,
    display_name,
    select_from,
    shown_value,
    stash_label,
    stash_tensor,
)
from .._optional import require
from .._validate import check_bool, check_count
from ..errors import ArgumentTypeError, ArgumentValueError
from ..stats import Stats

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
from .._data.depth import leaf_names
from .._data.embedding import Names
from .._data.history import (
    child_records,
    curves,
    first_nonfinite_step,
    history_rows,
    step_edges,
)
from .._data.series import (
    Series,
    auto_range,
    bin_counts,
    check_range,
    empty_error,
    not_shown,
    nothing_selected,
    recorded_series,
    tensor_label,
    tensor_labels,
    tensor_series,
)
from ._figure import (
    DEFAULT_FORMATS,
    MANY_MODULES,
    MAX_LEGEND,
    format_lines,
    limits_legend,
    new_axes,
    reference_formats,
    series_key,
    series_styles,
    themed,
)

__all__ = ["histogram_heatmap", "history"]


@themed
def history(
    tracker_or_frame: Any,
    *,
    stat: str = "rms",
    names: Names = None,
    grad: bool = False,
    kind: str = "output",
    formats: Sequence[str] = DEFAULT_FORMATS,
    leaves: bool | None = None,
    max_points: int = 400,
    ax: Axes | None = None,
) -> Figure:
    """A statistic over training steps, one line per module, on a log2 scale.

    With `kind="input"`, `"param"` or `"optimizer"` a module can hold several tensors (a
    LayerNorm's weight and bias): each gets its own line, named module and attribute
    (`"1.weight"`, `"1.bias"`), never a mean of different tensors.

    Record steps with one tracker around the training loop and `tracker.step()` after each
    step (`every=N` records every N-th). x is the `step` column; y is log2|stat|, the mean
    over a module's calls within each step. Horizontal lines mark the number-format limits
    as in `scale_plot` (their legend is below the plot). The first step where a shown
    value is NaN or infinite is marked with a red vertical line.

    Up to 12 modules are named in a legend; more are coloured by depth (execution order,
    dark to light) with a colour bar naming them. Runs longer than `max_points` recorded
    steps are drawn as means over buckets of consecutive steps, with a band from each
    bucket's smallest to largest value (up to 12 lines), so spikes stay visible; the
    recording is not changed.

    Args:
        tracker_or_frame: a `Tracker`, a list of `Stash`, or `tracker.to_frame()` (any
            DataFrame with `name`, `step`, `grad` and the `stat` column).
        stat: the statistic: recorded with `stats=`, a DataFrame column, or a name from
            `tensor_tracker.stats.NAMES` computed from full-tensor stashes.
        names: which modules: a substring or regex of module names, or a list of exact names
            (`"<model>"` for the root); default: all, in execution order.
        grad: `True` for the gradients, `False` for the forward values.
        kind: `"output"` (the default), `"input"`, `"param"` or `"optimizer"`.
        formats: which formats' limits to draw; `()` for none. Under a block-format
            error (`stat="nvfp4_error"`): that format's error on Gaussian data and twice
            it, or those of the `BLOCK_FORMATS` keys named here (see `scale_plot`).
        leaves: `True` for leaf modules only (no recorded submodule); default: leaves only
            when `names` is not given and more than 40 modules match.
        max_points: the most points drawn per line (see above).
        ax: draw into this matplotlib axes instead of a new figure.

    Returns:
        The matplotlib `Figure`: one line per module (labelled with its name; per tensor,
        labelled `"1.weight"`, for kinds other than `"output"`) plus the
        reference lines (`gid` `"limit:<format>:<limit>"`) and, if any, the line with gid
        `"first-nonfinite"` at the first non-finite step.

    Raises:
        TypeError: `tracker_or_frame` is of the wrong type.
        ValueError: nothing recorded, no module matches `names`, an unknown `stat`, or every
            value is zero/NaN.

    Example:
        >>> with tensor_tracker.track(lm, stats=True) as t:
        ...     for _ in range(3):
        ...         lm(tokens).logsumexp(-1).mean().backward(); t.step()
        >>> fig = plot.history(t, stat="rms", names=r"blocks\\.\\d+$", grad=True)
    """
    check_count(max_points, "history(max_points=...)", "points drawn per line", minimum=2)
    check_bool(grad, "history(grad=...)")
    if leaves is not None:
        check_bool(leaves, "history(leaves=...)")
    row_names, attrs, steps, values, modules = history_rows(
        tracker_or_frame, stat, names, grad, kind
    )
    fmts = reference_formats(formats, stat)
    if leaves if leaves is not None else (names is None and len(modules) > MANY_MODULES):
        modules = leaf_names(modules)
        kept = set(modules)
        rows = [r for r in zip(row_names, attrs, steps, values, strict=True) if r[0] in kept]
        row_names, attrs = [r[0] for r in rows], [r[1] for r in rows]
        steps, values = [r[2] for r in rows], [r[3] for r in rows]
    # One line per tensor: a module's tensors of this kind (weight and bias, ...) are
    # different numbers, never averaged; outputs have no attr, so one line per module.
    keys = [tensor_label(n, a) for n, a in zip(row_names, attrs, strict=True)]
    lines = curves(keys, steps, values, max_points)
    shown = tensor_labels(zip(row_names, attrs, strict=True), modules)
    owned = ax is None
    fig, ax = new_axes(ax, (10.0, 5.0))
    styles = series_styles(len(shown))
    handles = []
    everything: list[float] = []
    for module, style in zip(shown, styles, strict=True):
        curve = lines[module]
        everything += curve.lo + curve.hi
        handles.append(
            ax.plot(
                curve.x,
                curve.y,
                marker="." if len(curve.x) <= 60 else None,
                linewidth=1.0,
                label=display_name(module),
                zorder=3,
                **style,
            )[0]
        )
        if curve.lo is not curve.y and len(shown) <= MAX_LEGEND:
            ax.fill_between(curve.x, curve.lo, curve.hi, color=style["color"], alpha=0.2, lw=0)
    if all(math.isnan(v) for v in everything):
        raise ArgumentValueError(
            f"history: every {stat} value is zero, NaN or infinite, so there is nothing to draw "
            "on a log scale; try another stat= such as 'abs_max'"
        )
    limits = format_lines(ax, fmts, everything)
    bad = first_nonfinite_step(steps, values)
    if bad is not None:
        ax.axvline(bad, color="red", linestyle=":", linewidth=1.5, zorder=4, gid="first-nonfinite")
        ax.annotate(
            f"first non-finite: step {bad}",
            (bad, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, -12),
            textcoords="offset points",
            color="red",
            fontsize="small",
        )
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(require("matplotlib.ticker", "plot").MaxNLocator(integer=True))
    ax.set_ylabel(f"log2({stat})" if stat not in ("mean", "min", "max") else f"log2|{stat}|")
    what = "gradients" if grad else ("outputs" if kind == "output" else f"{kind}s")
    size = len(next(iter(lines.values())).x)
    drawn = f"; drawn as {size} bucket means, band min..max" if len(set(steps)) > max_points else ""
    # The details on a second line: one long line runs past a narrow figure's edges.
    # y=1: no ticks on top, so matplotlib need not measure the axis to place the title.
    ax.set_title(f"{stat} of {what} over steps\n(mean over calls{drawn})", fontsize="medium", y=1.0)
    series_key(
        fig,
        ax,
        handles,
        [str(h.get_label()) for h in handles],
        styles,
        "module (by depth)",
        limits=() if owned else limits,
    )
    if owned:
        limits_legend(fig, limits)
    return fig


@themed
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
        name: the module's name (`"<model>"` or `""` for the root); with `kind="output"`
            also an operation or tap recorded inside a module, named as its child
            (`"0.attn.softmax#0"`, as `history` and the viewers name it).
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
        >>> with tensor_tracker.track(lm, stats=["rms", stats.histogram()]) as t:
        ...     for _ in range(3):
        ...         lm(tokens).logsumexp(-1).mean().backward(); t.step()
        >>> fig = plot.histogram_heatmap(t, "blocks.0", grad=True)
    """
    if not isinstance(name, str):
        raise ArgumentTypeError(f"name must be a module name (str), got {type(name).__name__}")
    check_bool(grad, "histogram_heatmap(grad=...)")
    check_count(bins, "histogram_heatmap(bins=...)", "bins")
    if log2 is not None:
        check_bool(log2, "histogram_heatmap(log2=...)")
    chosen = select_from(tracker, "tracker", names=[name], grad=grad, kind=kind)
    if not chosen and kind == "output":  # an op or tap, named as a child of its module
        chosen = child_records(tracker, name, grad)
    chosen = [s for s in chosen if shown_value(s) is not None]
    if not chosen:
        stashes = as_stashes(tracker, "tracker")
        if not stashes:
            raise empty_error("histogram_heatmap", "tracker")
        raise nothing_selected(
            "histogram_heatmap",
            f"name={name!r}, grad={grad}, kind={kind!r} (holding a tensor or statistics)",
            stashes,
        )
    steps = sorted({s.step for s in chosen})
    position = {st: i for i, st in enumerate(steps)}
    recorded = [s for s in chosen if isinstance(shown_value(s), Stats)]
    if recorded:
        if len(recorded) < len(chosen):
            raise ArgumentValueError(
                "histogram_heatmap: the module's stashes mix tensors and statistics"
            )
        stats_list = [v for s in recorded if isinstance(v := shown_value(s), Stats)]
        labels = [stash_label(s) for s in recorded]
        series, edges_t, log2_used = recorded_series(
            recorded, stats_list, labels, stat, None, "histogram_heatmap"
        )
        edges = list(edges_t)
        counts = torch.zeros(len(steps), len(edges) - 1, dtype=torch.float64)
        for s, ser in zip(recorded, series, strict=True):
            counts[position[s.step]] += torch.tensor(ser.counts, dtype=torch.float64)
    else:
        if not isinstance(bins, int) or isinstance(bins, bool) or bins < 1:
            raise ArgumentValueError(f"bins must be a positive int, got {bins!r}")
        log2_used = True if log2 is None else bool(log2)
        per_step: dict[int, list[Series]] = {}
        for s in chosen:
            tensor = stash_tensor(s)
            if tensor is not None:  # each one: none of `chosen` holds statistics here
                ser = tensor_series(tensor, stash_label(s), log2_used)
                per_step.setdefault(s.step, []).append(ser)
        everything = [ser for group in per_step.values() for ser in group]
        span = check_range(range)
        if not any(ser.finite for ser in everything):
            raise ArgumentValueError(
                f"histogram_heatmap: {display_name(name)!r} has no finite"
                f"{' nonzero' if log2_used else ''} values at any step"
            )
        lo, hi = span if span is not None else auto_range(everything)
        edges = torch.linspace(lo, hi, bins + 1, dtype=torch.float64).tolist()
        counts = torch.zeros(len(steps), bins, dtype=torch.float64)
        for st, group in per_step.items():
            for ser in group:
                c = bin_counts(ser, bins, lo, hi)
                counts[position[st]] += torch.tensor(c, dtype=torch.float64)
        series = everything
    left_out = not_shown(series)
    if float(counts.sum()) == 0:
        raise ArgumentValueError(
            f"histogram_heatmap: no value of {display_name(name)!r} falls in the bins "
            f"(not shown: {left_out or 'nothing'})"
        )
    colors = require("matplotlib.colors", "plot")
    fig, ax = new_axes(ax, (8.0, 4.5))
    grid = counts.T.numpy()
    masked = require("numpy", "plot").ma.masked_equal(grid, 0.0)
    positive = counts[counts > 0]
    norm = colors.LogNorm(vmin=float(positive.min()), vmax=max(float(positive.max()), 1.0))
    # As pixels inside vector output (SVG, PDF): one vector cell per bin and step is large.
    mesh = ax.pcolormesh(
        step_edges(steps), edges, masked, norm=norm, cmap="viridis", rasterized=True
    )
    fig.colorbar(mesh, ax=ax, label="count (log scale)")
    if recorded:
        # Fixed recorded bins (`exp_hist`: 254 binades) are mostly empty: show the ones
        # holding values, one bin either side.
        held = (counts.sum(0) > 0).nonzero().flatten().tolist()
        ax.set_ylim(edges[max(held[0] - 1, 0)], edges[min(held[-1] + 2, len(edges) - 1)])
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(require("matplotlib.ticker", "plot").MaxNLocator(integer=True))
    ax.set_ylabel("log2|value|" if log2_used else "value")
    title = f"{display_name(name)} ({'grad' if grad else 'fwd'}): histogram over steps"
    ax.set_title(title + (f"\nnot shown: {left_out}" if left_out else ""), fontsize="medium")
    return fig
