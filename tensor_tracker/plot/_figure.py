"""Figure plumbing shared by the plots: headless figures that display themselves, axes, number-format reference lines."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._optional import require
from ..errors import ArgumentTypeError, ArgumentValueError
from ..stats.formats import FORMATS, Format

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
__all__ = [
    "DEFAULT_FORMATS",
    "format_lines",
    "format_list",
    "new_axes",
    "new_figure",
    "root_figure",
]


DEFAULT_FORMATS: tuple[str, ...] = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")
"""The `tensor_tracker.formats.FORMATS` keys whose limits `scale_plot` and `history` draw."""


# Reference lines: which limit, its line style, and how the legend describes the style.
_LIMITS: tuple[tuple[str, str, str], ...] = (
    ("max", "-", "max (overflow above)"),
    ("min_normal", "--", "smallest normal"),
    ("min_subnormal", ":", "smallest subnormal (underflow below)"),
)


_FORMAT_COLORS = ("tab:red", "tab:purple", "tab:olive", "tab:cyan")


# Reference lines further than this from 0 (in log2 units) do not stretch the view.
_VIEW_LIMIT = 32.0


def new_figure(figsize: tuple[float, float]) -> Figure:
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


def new_axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    """A fresh one-axes Figure, or `ax` and the figure it belongs to."""
    if ax is None:
        fig = new_figure(figsize)
        return fig, fig.add_subplot()
    return root_figure(ax), ax


def root_figure(ax: Any) -> Figure:
    """The figure an axes belongs to; refuses anything that is not an axes of a figure."""
    if not hasattr(ax, "get_figure"):
        raise ArgumentTypeError(f"ax must be a matplotlib Axes, got {type(ax).__name__}")
    fig = ax.get_figure(root=True)
    if fig is None:
        raise ArgumentValueError("ax must belong to a figure (create it with fig.add_subplot())")
    return fig  # type: ignore[no-any-return]


def format_list(formats: Sequence[str]) -> list[Format]:
    """The `FORMATS` entries named by `formats` (one name or several); refuses unknown names."""
    if isinstance(formats, str):
        formats = (formats,)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ArgumentValueError(
            f"formats: unknown format(s) {unknown}; known: {list(FORMATS)} (or () for none)"
        )
    return [FORMATS[f] for f in formats]


def format_lines(ax: Axes, formats: Sequence[Format], data: Sequence[float]) -> list[Any]:
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
