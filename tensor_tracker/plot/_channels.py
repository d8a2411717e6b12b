"""`channel_map`: a statistic per channel for every module, channels x modules, on a log
colour scale, so that outlier channels stand out."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._data.channels import DEFAULT_OUTLIER_RATIO, channel_table
from .._data.select import display_name
from .._optional import require
from .._validate import check_bool, check_int, check_number, check_type
from ..errors import ArgumentValueError
from ._figure import MAX_WIDTH, category_ticks, new_axes, themed

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["channel_map"]


@themed
def channel_map(
    recording: Any,
    column: str = "abs_max_per_channel",
    *,
    grad: bool = False,
    step: int | None = None,
    modules: Sequence[str] | None = None,
    mark: float | None = DEFAULT_OUTLIER_RATIO,
    ax: Axes | None = None,
) -> Figure:
    """Channels x modules: a statistic per channel (default `abs_max`) of every module's
    output, one row per module, on a log colour scale.

    A channel carrying values far larger than its neighbours (LLM.int8's outlier
    features, "massive activations") is a bright column segment in a dark row; in a
    residual network it continues down every later row. With `mark`, the channels that
    stand out as `diagnose` reports them (over `mark` times their module's median channel,
    in the values shown) are circled. Every row spans the whole width: a module with fewer
    channels than the widest has its channels stretched over its row (its channel count in
    brackets after its name), so that 64 channels beside 512 are as readable.

    Args:
        recording: a `Tracker` (or list of `Stash`) recorded with
            `stats=[..., tensor_tracker.stats.per_channel("abs_max")]`, or holding full
            copies (channels: the last dimension).
        column: the per-channel statistic, `"<stat>_per_channel"`.
        grad: show gradients instead of forward values.
        step: one step; `None` (default): each channel's largest value over the steps.
        modules: the modules to show, by name, in that order; `None`: every module with
            at least 2 channels, in recording order.
        mark: circle channels above this many times their module's median channel
            (as `tensor_tracker._data.channels.outlier_channels` does per step); `None`:
            no marks.
        ax: a matplotlib Axes to draw into (a new figure otherwise).

    Returns:
        The matplotlib `Figure`.

    Raises:
        NotRecordedError: no per-channel statistic and no full copies.
        ArgumentValueError: `step` was not recorded, a name in `modules` was not, `mark`
            not above 1, or nothing to show.
        ArgumentTypeError: an argument of the wrong type.

    Example:
        >>> spec = [*stats.DEFAULT, stats.per_channel("abs_max")]
        >>> with tensor_tracker.track(model, stats=spec) as t:
        ...     _ = model(x)
        >>> fig = plot.channel_map(t)
        >>> fig.axes[0].get_xlabel()   # modules of fewer channels stretched over the row
        'channel (of 8; a module of [n] channels stretched over the row)'
    """
    np = require("numpy", "pandas")
    colors = require("matplotlib.colors", "plot")
    check_bool(grad, "channel_map(grad=...)")
    if step is not None:
        check_int(step, "channel_map(step=...)", "a recorded step, or None")
    if mark is not None:
        check_number(
            mark,
            "channel_map(mark=...)",
            "a ratio to the median channel, or None",
            low=1,
            open_low=True,
        )
    if modules is not None:
        check_type(modules, (list, tuple), "channel_map(modules=...)", "a list of module names")
    table = channel_table(recording, column, grad=grad)
    if step is None:
        values = table.over_steps()
        steps_label = (
            "largest over the steps"
            if len(table.steps) > 1
            else f"step {table.steps[0]}"
            if table.steps
            else ""
        )
    else:
        if step not in table.steps:
            raise ArgumentValueError(
                f"channel_map(step=...): step {step} was not recorded; recorded: "
                f"{list(table.steps)[:20]}"
            )
        values = table.values[:, table.steps.index(step), :]
        steps_label = f"step {step}"
    if modules is None:
        rows = [m for m, w in enumerate(table.widths) if w >= 2]
    else:
        missing = [m for m in modules if m not in table.modules]
        if missing:
            raise ArgumentValueError(
                f"channel_map(modules=...): {missing[:5]} recorded no {column}; recorded: "
                f"{list(table.modules)[:10]}"
            )
        rows = [table.modules.index(m) for m in modules]
    if not rows:
        raise ArgumentValueError(f"channel_map: no module recorded {column} of 2 channels or more")
    widths = [table.widths[r] for r in rows]
    width = max(widths)
    # Each module's row as wide as the widest: a narrower module's channels stretched over
    # it (64 channels beside 512 would otherwise fill an eighth of the row).
    spread = np.arange(width)
    shown = np.stack([values[r, (spread * w) // width] for r, w in zip(rows, widths, strict=True)])
    stretched = len(set(widths)) > 1
    positive = shown[np.isfinite(shown) & (shown > 0)]
    # Room for every module's label up to ~60 modules; beyond, `category_ticks` thins them.
    height = min(16.0, 1.4 + 0.23 * len(rows))
    own_figure = ax is None
    fig, ax = new_axes(ax, (min(MAX_WIDTH, 4.0 + width / 60), max(3.0, height)))
    cmap = require("matplotlib", "plot").colormaps["magma"].with_extremes(bad="#d9d9d9")
    masked = np.ma.masked_where(~(np.isfinite(shown) & (shown > 0)), shown)
    norm = (
        colors.LogNorm(vmin=float(positive.min()), vmax=float(positive.max()))
        if len(positive) and positive.max() > positive.min()
        else None
    )
    image = ax.imshow(
        masked, aspect="auto", interpolation="nearest", cmap=cmap, norm=norm, origin="upper"
    )
    stat = column.removesuffix("_per_channel")
    what = "gradient" if grad else "output"
    fig.colorbar(image, ax=ax, label=f"{stat} per channel (log scale)")
    names = [display_name(table.modules[r]) for r in rows]
    if stretched:  # each row's channel count beside its name
        names = [f"{name} [{w}]" for name, w in zip(names, widths, strict=True)]
    category_ticks(ax.yaxis, names, fontsize="x-small")
    ax.set_xlabel(
        "channel"
        + (f" (of {width}; a module of [n] channels stretched over the row)" if stretched else "")
    )
    ax.set_ylabel("module")
    # Two lines: the figure is as narrow as 4.5 inches for a few dozen channels.
    ax.set_title(
        f"{stat} per channel of each module's {what}" + (f"\n{steps_label}" if steps_label else ""),
        fontsize="medium",
    )
    if mark is not None:
        ys: list[int] = []
        xs: list[int] = []
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a row of NaN: no marks
            own = values[rows]  # each module's own channels (the median is over them)
            median = np.nanmedian(own, axis=1)
            hit = (own / median[:, None] > mark) & (median[:, None] > 0)
        for i, w in enumerate(widths):
            if w < 4:
                continue
            for c in np.flatnonzero(hit[i, :w]):
                ys.append(i)
                xs.append((c + 0.5) * width / w - 0.5)  # the middle of its stretched cell
        if ys:
            ax.scatter(
                xs,
                ys,
                s=40,
                facecolors="none",
                edgecolors="tab:cyan",
                linewidths=1.2,
                label=f"over {mark:g}x the module's median channel",
            )
            if own_figure:  # below it: inside the axes the legend hides the first rows
                fig.legend(loc="outside lower center", fontsize="small", frameon=False)
            else:  # the caller's figure may hold other axes
                ax.legend(loc="upper right", fontsize="small")
    ax.set_xlim(-0.5, width - 0.5)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    return fig
