"""`scale_plot`: every module's forward and gradient scale against number-format limits."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._data.select import (
    CHILD_KINDS,
    as_stashes,
    display_name,
    module_order,
    recorded_steps,
    select,
    select_from,
    short_labels,
)
from .._optional import require
from .._validate import check_bool, check_int
from ..errors import ArgumentValueError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
from .._data.depth import Depth, depth_layout, leaf_names
from .._data.embedding import Names
from .._data.series import (
    empty_error,
    log2_abs,
    mean_by,
    nothing_selected,
    stat_values,
    tensor_label,
    tensor_labels,
)
from ..stats.formats import BlockFormat, Format
from ._figure import (
    DEFAULT_FORMATS,
    MANY_MODULES,
    MAX_WIDTH,
    category_ticks,
    foreground,
    format_lines,
    limits_legend,
    new_axes,
    new_figure,
    reference_formats,
    root_figure,
    series_key,
    series_styles,
    themed,
)

__all__ = ["scale_plot"]


@themed
def scale_plot(
    tracker_or_stashes: Any,
    *,
    stat: str = "rms",
    kind: str = "output",
    step: int | None = None,
    formats: Sequence[str] = DEFAULT_FORMATS,
    names: Names = None,
    leaves: bool | None = None,
    group: bool | None = None,
    ax: Axes | None = None,
) -> Figure:
    """The scale of every module's forward value and gradient, against format limits.

    Values are plotted as log2|stat|, so each unit is a factor of 2. Horizontal lines mark
    the range of each number format: its largest value (overflow above, solid), smallest
    normal (dashed) and smallest subnormal (underflow below, dotted); the legend below the
    plot lists each format's range.

    Small models get one x position per module, in execution order (the order of each
    module's first forward stash; the root model is shown as `"<model>"`), with two series:
    forward (circles) and gradient (squares). With `kind="input"`, `"param"` or
    `"optimizer"` a module can hold several tensors (a LayerNorm's weight and bias, a
    block's `hidden_states` and `position_ids`): each gets its own x position, named
    module and attribute (`"1.weight"`, `"1.bias"`), never a mean of different tensors.

    Large models (more than 40 modules) are drawn by depth: leaf modules only, and the
    repeated blocks (`encoder.layer.0` … `encoder.layer.11`, `layer1.0`, …) recognised
    from the names, so that x is the block and each *role* inside a block
    (`attention.self.query`, `intermediate.dense`, …) is one line; modules outside every
    block (embeddings, head) keep their places at the ends, as black diamonds. Forward
    values and gradients are then two panels. The figure stays within 14 inches whatever
    the module count, and tick labels are thinned to fit.

    When a module ran several times in the step (several calls), the plotted value is the
    mean of the statistic over its calls (of each tensor's over its calls, for inputs).
    Only one step is shown: the last recorded one unless `step=` is given (see `history`
    for steps over time).

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
            `()` for none. Under a block-format error (`stat="nvfp4_error"`) the range
            limits mean nothing: the lines are then that format's error on Gaussian data
            (its floor) and twice it, or those of the keys of `BLOCK_FORMATS` named here.
        names: which modules: a substring or regex of module names, or a list of exact
            names; default: all.
        leaves: `True` for leaf modules only (no recorded submodule), `False` for parents
            too; default: leaves only above 40 modules (counted before leaving any out).
        group: `True` to group repeated blocks as described above, `False` for one x
            position per module; default: group above 40 modules (the same count as
            `leaves`, so a large model of blocks is grouped however few leaves it has).
        ax: draw into this matplotlib axes instead of a new figure (grouped, forward and
            gradient share it: gradients dashed).

    Returns:
        The matplotlib `Figure`. Per module: its axes hold the series lines labelled
        `"forward"` and `"gradient"`, its x tick labels name the modules (or the tensors,
        `"1.weight"`, for kinds other than `"output"`); grouped: one line per role
        (labelled with the role, plus `" (grad)"` when sharing `ax`) and
        `"outside blocks"`. Every axes holds one
        horizontal line per format limit, with `gid`
        `"limit:<format>:<max|min_normal|min_subnormal>"` at y = log2(limit).

    Raises:
        TypeError: `tracker_or_stashes` is not a tracker or a list of stashes.
        ValueError: no stashes, none of this `kind`/`step`/`names`, an unknown or
            unrecorded `stat`, or every value is zero/NaN.

    Example:
        >>> with tensor_tracker.track(model, stats=True) as t:
        ...     loss_fn(model(x)).backward()
        >>> fig = plot.scale_plot(t, stat="abs_max")
        >>> with tensor_tracker.track(lm, stats=True) as t:
        ...     lm(tokens).logsumexp(-1).mean().backward()
        >>> fig = plot.scale_plot(t, names=r"^blocks", group=True)  # x: block, a line per role
        >>> len(fig.axes)  # forward and gradient panels
        2
    """
    if step is not None:
        check_int(step, "scale_plot(step=...)", "a recorded step (int) or None")
    for flag, flag_name in ((leaves, "leaves"), (group, "group")):
        if flag is not None:
            check_bool(flag, f"scale_plot({flag_name}=...)")
    source, argument = tracker_or_stashes, "tracker_or_stashes"
    # From a tracker only the stashes of one step are built: fast on a long run.
    steps = recorded_steps(source, argument, kind)
    if not steps:
        stashes = as_stashes(source, argument)
        if not stashes:
            raise empty_error("scale_plot", argument)
        kinds = sorted({s.kind for s in stashes})
        raise ArgumentValueError(f"scale_plot: no stash of kind={kind!r}; recorded kinds: {kinds}")
    if step is None:
        step = steps[-1]
    if step not in steps:
        raise ArgumentValueError(f"scale_plot: no stash at step={step}; recorded steps: {steps}")
    # Outputs come with the ops and taps recorded inside their modules, as children.
    wanted = (kind, *CHILD_KINDS) if kind == "output" else kind
    chosen = select_from(source, argument, kind=wanted, step=step)
    if names is not None:
        chosen = select(chosen, kind=None, names=names)
        if not chosen:
            raise nothing_selected("scale_plot", f"names={names!r}", as_stashes(source, argument))
    fmts = reference_formats(formats, stat)
    # An op or tap is a child of its module (`"0.attn.softmax#0"`), placed where it ran:
    # after the children that ran before it, before its module's output.
    children = kind == "output" and any(s.kind in CHILD_KINDS for s in chosen)
    order = _run_order(chosen) if children else module_order(chosen)
    # Leaves and grouping are decided on one count, the modules chosen: leaves alone are
    # fewer, and counting them would leave a large model of blocks ungrouped.
    many = len(order) > MANY_MODULES
    if leaves if leaves is not None else many:
        order = leaf_names(order)
        kept = set(order)
        chosen = [s for s in chosen if tensor_label(s.name, s.attr) in kept]
    # One position per tensor: a module's tensors of this kind (weight and bias, ...) are
    # different numbers, never averaged; outputs have no attr, so one per module.
    positions = order if children else tensor_labels(((s.name, s.attr) for s in chosen), order)
    values = stat_values(chosen, stat)
    means = mean_by([(tensor_label(s.name, s.attr), s.grad) for s in chosen], values)
    if all(math.isnan(v) for v in log2_abs(list(means.values()))):
        raise ArgumentValueError(
            f"scale_plot: every {stat} value is zero, NaN or infinite (or no stash holds a "
            "tensor), so there is no scale to plot; try another stat= such as 'abs_max'"
        )
    has_grad = any(s.grad for s in chosen)
    depth = depth_layout(positions)
    grouped = depth.grouped and (group if group is not None else many)
    calls = "mean over calls, " if any(s.call for s in chosen) else ""
    per = "tensor" if any(s.attr for s in chosen) else "module"
    shown = ", ".join(dict.fromkeys(s.kind for s in chosen)) if children else kind
    title = f"{stat} per {per} ({shown}, {calls}step {step})"
    ylabel = f"log2({stat})" if stat not in ("mean", "min", "max") else f"log2|{stat}|"
    if grouped:
        return _by_depth(depth, means, has_grad, fmts, title, ylabel, ax)

    # The legend beside the axes takes about 3.5 inches.
    width = min(MAX_WIDTH, max(9.0, 0.3 * len(positions) + 5.5))
    owned = ax is None
    labels = short_labels([display_name(n) for n in positions])
    # About 2.6 inches of axes above the labels and the legend of formats.
    fig, ax = new_axes(ax, (width, 4.3 + _label_room(labels)), _label_length(labels))
    x = list(range(len(positions)))
    fwd = log2_abs([means.get((n, False), math.nan) for n in positions])
    bwd = log2_abs([means.get((n, True), math.nan) for n in positions])
    handles = [ax.plot(x, fwd, marker="o", linestyle="-", color="C0", label="forward", zorder=3)[0]]
    if has_grad:
        handles.append(
            ax.plot(x, bwd, marker="s", linestyle="-", color="C1", label="gradient", zorder=3)[0]
        )
    limits = format_lines(ax, fmts, fwd + bwd)
    _module_axis(ax, labels)
    ax.set_ylabel(ylabel)
    ax.set_title(title, y=1.0)  # placed without measuring the axis: no ticks on top
    names = [str(h.get_label()) for h in handles]
    series_key(fig, ax, handles, names, [], "", limits=() if owned else limits)
    if owned:
        limits_legend(fig, limits)
    return fig


def _run_order(stashes: Sequence[Any]) -> list[str]:
    """The `tensor_label` of each record (a module's output by its name, an op or tap as
    its child) in the order of its first forward record, then those seen only in
    gradients."""
    return module_order(stashes, key=lambda s: tensor_label(s.name, s.attr))


def _label_room(labels: list[str]) -> float:
    """Inches below the axes for rotated x tick labels (about 0.06 inch per character)."""
    return 0.3 + _label_length(labels)


def _label_length(labels: list[str]) -> float:
    """Inches the longest rotated x tick label reaches below the axes, beyond a plain
    axis' row of tick labels (what figures with fixed margins add)."""
    return 0.06 * max((len(label) for label in labels), default=0)


def _module_axis(ax: Axes, labels: list[str]) -> None:
    """Categorical x axis: labels at 0..n-1 (thinned to fit), rotated, with light grid lines;
    a y axis of at most 7 whole powers of 2 (each tick is a costly object to draw)."""
    category_ticks(ax.xaxis, labels)
    ax.set_xlim(-0.5, len(labels) - 0.5)
    ax.grid(axis="x", alpha=0.3)
    ticker = require("matplotlib.ticker", "plot")
    ax.yaxis.set_major_locator(ticker.MaxNLocator(nbins=6, integer=True))


def _by_depth(
    depth: Depth,
    means: dict[Any, float],
    has_grad: bool,
    fmts: list[Format | BlockFormat],
    title: str,
    ylabel: str,
    ax: Axes | None,
) -> Figure:
    """Draw `scale_plot` by depth: x = block (or lone module), one line per role."""
    panels = [False, True] if has_grad else [False]
    width = min(MAX_WIDTH, max(9.0, 0.3 * len(depth.slots) + 6.0))
    if ax is None:
        labels = short_labels(depth.slots)
        height = min(10.0, 3.2 * len(panels) + 1.0 + _label_room(labels))
        fig = new_figure((width, height), _label_length(labels))
        axes = list(fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0])
        owned = True
    else:
        fig, axes, owned = root_figure(ax), [ax] * len(panels), False
    styles = series_styles(len(depth.roles))
    x = list(range(len(depth.slots)))
    handles: list[Any] = []
    drawn: dict[Axes, list[float]] = {}
    for grad, panel in zip(panels, axes, strict=True):
        values = {role: [math.nan] * len(depth.slots) for role in (*depth.roles, None)}
        for (name, g), value in means.items():
            if g == grad and name in depth.place:
                slot, role = depth.place[name]
                values[role][slot] = value
        shared = grad and not owned
        for role, style in zip(depth.roles, styles, strict=True):
            ys = log2_abs(values[role])
            line = panel.plot(
                x,
                ys,
                marker="o",
                markersize=3,
                linewidth=1.2,
                label=role + (" (grad)" if shared else ""),
                zorder=3,
                **{**style, "linestyle": "--" if shared else style["linestyle"]},
            )[0]
            handles += [] if grad else [line]
            drawn.setdefault(panel, []).extend(ys)
        outside = log2_abs(values[None])
        panel.plot(
            x, outside, "D", color=foreground(), markersize=4, label="outside blocks", zorder=3
        )
        drawn[panel].extend(outside)
        panel.set_ylabel(f"{ylabel}, {'gradient' if grad else 'forward'}" if owned else ylabel)
    limits: list[Any] = []
    for panel, data in drawn.items():  # one axes when sharing the user's
        limits = format_lines(panel, fmts, data)
        _module_axis(panel, short_labels(depth.slots))
    axes[0].set_title(f"{title}: {len(depth.roles)} roles in {sum(depth.is_block)} blocks", y=1.0)
    axes[-1].set_xlabel("block (black diamonds: modules outside the repeated blocks)")
    key = () if owned else limits
    series_key(fig, axes, handles, depth.roles, styles, "role in block", limits=key)
    if owned:
        limits_legend(fig, limits)
    return fig
