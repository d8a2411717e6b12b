"""`scale_plot`: every module's forward and gradient scale against number-format limits."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..data.select import (
    as_stashes,
    display_name,
    module_order,
    select,
)
from ..errors import ArgumentValueError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
from ..data.series import empty_error, last_step, log2_abs, mean_by, stat_values
from ._figure import DEFAULT_FORMATS, format_lines, format_list, new_axes

__all__ = ["scale_plot"]


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
        >>> fig = plot.scale_plot(t, stat="abs_max")
    """
    stashes = as_stashes(tracker_or_stashes, "tracker_or_stashes")
    if not stashes:
        raise empty_error("scale_plot", "tracker_or_stashes")
    chosen = select(stashes, kind=kind)
    if not chosen:
        kinds = sorted({s.kind for s in stashes})
        raise ArgumentValueError(f"scale_plot: no stash of kind={kind!r}; recorded kinds: {kinds}")
    if step is None:
        step = last_step(chosen)
    chosen = select(chosen, kind=None, step=step)
    if not chosen:
        steps = sorted({s.step for s in select(stashes, kind=kind)})
        raise ArgumentValueError(f"scale_plot: no stash at step={step}; recorded steps: {steps}")
    fmts = format_list(formats)
    values = stat_values(chosen, stat)
    order = module_order(chosen)
    means = mean_by([(s.name, s.grad) for s in chosen], values)
    fwd = log2_abs([means.get((n, False), math.nan) for n in order])
    bwd = log2_abs([means.get((n, True), math.nan) for n in order])
    has_grad = any(s.grad for s in chosen)
    if all(math.isnan(v) for v in fwd + bwd):
        raise ArgumentValueError(
            f"scale_plot: every {stat} value is zero, NaN or infinite (or no stash holds a "
            "tensor), so there is no scale to plot; try another stat= such as 'abs_max'"
        )

    # The legend beside the axes takes about 3.5 inches.
    fig, ax = new_axes(ax, (max(9.0, 0.35 * len(order) + 5.5), 4.5))
    x = list(range(len(order)))
    handles = [ax.plot(x, fwd, marker="o", linestyle="-", color="C0", label="forward", zorder=3)[0]]
    if has_grad:
        handles.append(
            ax.plot(x, bwd, marker="s", linestyle="-", color="C1", label="gradient", zorder=3)[0]
        )
    handles += format_lines(ax, fmts, fwd + bwd)
    ax.set_xticks(x, [display_name(n) for n in order], rotation=90, fontsize="small")
    ax.set_ylabel(f"log2({stat})" if stat not in ("mean", "min", "max") else f"log2|{stat}|")
    calls = "mean over calls, " if any(s.call for s in chosen) else ""
    ax.set_title(f"{stat} per module ({kind}, {calls}step {step})")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(handles=handles, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig
