"""Figure plumbing shared by the plots: headless figures that display themselves, axes, number-format reference lines."""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, ParamSpec

from .._data.select import short_label
from .._optional import require
from ..errors import ArgumentTypeError, ArgumentValueError
from ..stats._spec import BLOCK_NAMES
from ..stats.formats import BLOCK_FORMATS, FORMATS, BlockFormat, Format

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
__all__ = [
    "DEFAULT_FORMATS",
    "FOREGROUND",
    "MANY_MODULES",
    "MAX_LEGEND",
    "MAX_WIDTH",
    "at_most",
    "category_ticks",
    "fixed_margins",
    "foreground",
    "format_lines",
    "format_list",
    "limits_legend",
    "new_axes",
    "new_figure",
    "reference_formats",
    "root_figure",
    "series_key",
    "series_styles",
    "short_label",
    "themed",
]

MAX_LEGEND = 12
"""The most entries a legend lists; more series get a colour scale with a colour bar."""

MANY_MODULES = 40
"""Above this many modules, figures show leaf modules only and group repeated blocks."""

MAX_WIDTH = 14.0
"""The widest figure we make, in inches: a notebook's width, whatever the module count."""


DEFAULT_FORMATS: tuple[str, ...] = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")
"""The `tensor_tracker.formats.FORMATS` keys whose limits `scale_plot` and `history` draw."""


FOREGROUND = "#787878"
"""Text, axes and tick colour of the figures we make: a mid grey that reads on a white page
and on JupyterLab's dark theme alike (contrast 4.4:1 against #ffffff and 4.3:1 against the
dark theme's #111111; no grey reaches 4.5:1 on both)."""

# What `themed` changes, while the user's matplotlib style is matplotlib's own: the kernel
# cannot know the notebook's theme, so the figure has no background of its own (the page's
# shows through, light or dark) and its text and lines are `FOREGROUND`.
_NOTEBOOK_THEME: dict[str, Any] = {
    "figure.facecolor": "none",
    "figure.edgecolor": "none",
    "axes.facecolor": "none",
    "legend.facecolor": "none",
    "text.color": FOREGROUND,
    "axes.labelcolor": FOREGROUND,
    "axes.edgecolor": FOREGROUND,
    "xtick.color": FOREGROUND,
    "ytick.color": FOREGROUND,
    "patch.edgecolor": FOREGROUND,
    "hatch.color": FOREGROUND,
}

# A style of the user's own (`plt.style.use("dark_background")`, seaborn's) changes these;
# then the figures follow it instead.
_STYLE_KEYS = ("text.color", "axes.facecolor")

_P = ParamSpec("_P")


def themed(draw: Callable[_P, Figure]) -> Callable[_P, Figure]:
    """Make the figures `draw` creates readable in a light and in a dark notebook: a
    transparent background and `FOREGROUND` text and lines, unless the user set a
    matplotlib style of their own (then theirs) or passed `ax=` (their figure, their
    colours). Colours are read when artists are made, so the whole drawing runs inside."""

    @functools.wraps(draw)
    def drawn(*args: _P.args, **kwargs: _P.kwargs) -> Figure:
        mpl = require("matplotlib", "plot")
        styled = any(mpl.rcParams[k] != mpl.rcParamsDefault[k] for k in _STYLE_KEYS)
        if styled or kwargs.get("ax") is not None:
            return draw(*args, **kwargs)
        with mpl.rc_context(_NOTEBOOK_THEME):
            return draw(*args, **kwargs)

    return drawn


def foreground() -> str:
    """The colour of text in the figure being drawn (`FOREGROUND`, or the user's style's),
    for marks that should read like text: reference lines, the highlighted bar."""
    return str(require("matplotlib", "plot").rcParams["text.color"])


# Reference lines: which limit, its line style, and how the legend describes the style.
_LIMITS: tuple[tuple[str, str, str], ...] = (
    ("max", "-", "max (overflow above)"),
    ("min_normal", "--", "smallest normal"),
    ("min_subnormal", ":", "smallest subnormal (underflow below)"),
)


_FORMAT_COLORS = ("tab:red", "tab:purple", "tab:olive", "tab:cyan")


# Reference lines further than this from 0 (in log2 units) do not stretch the view.
_VIEW_LIMIT = 32.0


# Inches per row of a small-font legend below a figure with fixed margins.
_LEGEND_ROW = 0.2

# Margins (left, right, bottom, top, in inches) of the figures made inside `fixed_margins`.
_MARGINS: ContextVar[tuple[float, float, float, float] | None] = ContextVar(
    "_MARGINS", default=None
)


@contextmanager
def fixed_margins(
    left: float = 0.8, right: float = 2.7, bottom: float = 0.6, top: float = 0.65
) -> Iterator[None]:
    """Figures made inside this block get these margins (inches; `right` holds a legend or
    colour bar, `top` a two-line title; `limits_legend` widens `bottom` for its rows) instead of constrained
    layout. For viewers redrawn on every click: constrained layout measures every text
    and takes longer than the drawing itself."""
    token = _MARGINS.set((left, right, bottom, top))
    try:
        yield
    finally:
        _MARGINS.reset(token)


# The widest figure `new_figure` makes inside `at_most`.
_WIDTH: ContextVar[float] = ContextVar("_WIDTH", default=MAX_WIDTH)


@contextmanager
def at_most(width: float) -> Iterator[None]:
    """Figures made inside this block are at most `width` inches wide: a viewer's output
    area, where a wider figure would be shown shrunk, its text too small to read."""
    token = _WIDTH.set(width)
    try:
        yield
    finally:
        _WIDTH.reset(token)


def new_figure(figsize: tuple[float, float], x_labels: float = 0.0) -> Figure:
    """A new Figure outside pyplot, displayable in IPython (see `_show_figures_in_ipython`),
    laid out by matplotlib's constrained layout unless inside `fixed_margins`, and no wider
    than `at_most` allows. `x_labels`: inches that rotated x tick labels take below the
    axes, which fixed margins leave room for (constrained layout measures them)."""
    figure_module = require("matplotlib.figure", "plot")
    _show_figures_in_ipython(figure_module.Figure)
    figsize = (min(figsize[0], _WIDTH.get()), figsize[1])
    margins = _MARGINS.get()
    if margins is None:
        fig: Figure = figure_module.Figure(figsize=figsize, layout="constrained")
        return fig
    left, right, bottom, top = margins
    bottom += x_labels
    width, height = figsize
    fig = figure_module.Figure(figsize=figsize, layout=None)
    fig.subplots_adjust(
        left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height
    )
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


def new_axes(
    ax: Axes | None, figsize: tuple[float, float], x_labels: float = 0.0
) -> tuple[Figure, Axes]:
    """A fresh one-axes Figure (see `new_figure`), or `ax` and the figure it belongs to."""
    if ax is None:
        fig = new_figure(figsize, x_labels)
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
        hint = ""
        if any(f in BLOCK_FORMATS for f in unknown):
            hint = (
                "; block-scaled formats have no fixed range to draw: plot their statistics, "
                'e.g. stat="nvfp4_error" (recorded with stats=[..., "nvfp4_error"])'
            )
        raise ArgumentValueError(
            f"formats: unknown format(s) {unknown}; known: {list(FORMATS)} (or () for none)" + hint
        )
    return [FORMATS[f] for f in formats]


def reference_formats(formats: Sequence[str], stat: str) -> list[Format | BlockFormat]:
    """What a plot of `stat` draws reference lines for: the range limits of `formats` for
    statistics of values; for a block-format error (`"<format>_error"`), that format's
    error on Gaussian data (its floor), or that of the block formats `formats` names;
    nothing for the other block statistics (underflow fractions, dynamic range)."""
    if stat not in BLOCK_NAMES:
        return list(format_list(formats))
    if not stat.endswith("_error"):
        return []
    named = [
        BLOCK_FORMATS[f]
        for f in ((formats,) if isinstance(formats, str) else formats)
        if f in BLOCK_FORMATS
    ]
    return list(named) or [BLOCK_FORMATS[stat.removesuffix("_error")]]


def format_lines(
    ax: Axes, formats: Sequence[Format | BlockFormat], data: Sequence[float]
) -> list[Any]:
    """Horizontal lines at log2 of each format's limits, and legend handles describing them.

    Every line has `gid` `"limit:<format>:<max|min_normal|min_subnormal>"`. The view covers
    the data and the limits within 2**±32 (bfloat16's ±2**128 would flatten the data; its
    legend entry then says "off-scale"). A block format (`BlockFormat`, drawn under a
    plot of its error) gets one solid line at its error on Gaussian data, `gid`
    `"limit:<format>:gaussian_error"`, and a dotted one at twice that, `gid`
    `"limit:<format>:twice"` (where `diagnose` reports by default).
    """
    blocks = [f for f in formats if isinstance(f, BlockFormat)]
    if blocks:
        return _floor_lines(ax, blocks, data)
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
            _limit_line(ax, y, color, style, fmt.name, which)
        span = f"2^{math.log2(fmt.min_subnormal):.0f} .. 2^{math.log2(fmt.max):.1f}" + (
            ", off-scale" if off else ""
        )
        handles.append(lines.Line2D([], [], color=color, label=f"{fmt.label} ({span})"))
    if formats:
        for _, style, text in _LIMITS:
            handles.append(lines.Line2D([], [], color="gray", linestyle=style, label=text))
    return handles


def _limit_line(ax: Axes, y: float, color: Any, style: str, name: str, which: str) -> None:
    """One reference line across the axes, `gid` `"limit:<name>:<which>"`, left out of
    legends (its label starts with `_`)."""
    ax.axhline(
        y,
        color=color,
        linestyle=style,
        linewidth=0.9,
        alpha=0.7,
        zorder=1,
        gid=f"limit:{name}:{which}",
        label=f"_{name} {which}",
    )


def _floor_lines(ax: Axes, formats: Sequence[BlockFormat], data: Sequence[float]) -> list[Any]:
    """`format_lines` under a plot of block-format errors: each format's floor (its error
    on Gaussian data) and twice it."""
    lines = require("matplotlib.lines", "plot")
    levels = [math.log2(f.gaussian_error * k) for f in formats for k in (1, 2)]
    finite = [v for v in data if math.isfinite(v)] + levels
    lo, hi = min(finite), max(finite)
    pad = max(0.5, 0.05 * (hi - lo))
    ax.set_ylim(lo - pad, hi + pad)
    handles = []
    for i, fmt in enumerate(formats):
        color = _FORMAT_COLORS[i % len(_FORMAT_COLORS)]
        for which, style, k in (("gaussian_error", "-", 1), ("twice", ":", 2)):
            _limit_line(ax, math.log2(fmt.gaussian_error * k), color, style, fmt.name, which)
        handles.append(
            lines.Line2D(
                [],
                [],
                color=color,
                label=f"{fmt.label} error of Gaussian data ({fmt.gaussian_error:.3g})",
            )
        )
    handles.append(
        lines.Line2D(
            [], [], color="gray", linestyle=":", label="twice that (diagnose reports above)"
        )
    )
    return handles


def series_styles(n: int) -> list[dict[str, Any]]:
    """Line styles for `n` series: distinct colours (dashed after the first 10) up to
    `MAX_LEGEND`, a viridis scale in series order (depth) beyond."""
    if n <= MAX_LEGEND:
        return [{"color": f"C{i % 10}", "linestyle": "-" if i < 10 else "--"} for i in range(n)]
    cmap = require("matplotlib", "plot").colormaps["viridis"]
    return [{"color": cmap(i / (n - 1)), "linestyle": "-"} for i in range(n)]


def series_key(
    fig: Figure,
    axes: Axes | list[Axes],
    handles: Sequence[Any],
    labels: Sequence[str],
    styles: Sequence[dict[str, Any]],
    title: str,
    limits: Sequence[Any] = (),
) -> None:
    """Name the series: a legend beside the axes up to `MAX_LEGEND` entries, otherwise a
    colour bar of the series' colours whose tick labels (thinned to fit) name them.

    `limits` (the handles of `format_lines`) go in a legend below the figure when the
    figure holds nothing else (`owned`); pass them here, for the series legend, when
    drawing into a user's axes."""
    first = axes[0] if isinstance(axes, list) else axes
    if len(labels) <= MAX_LEGEND:
        if labels or limits:
            first.legend(
                handles=[*handles, *limits],
                labels=[short_label(label) for label in labels] + [h.get_label() for h in limits],
                title=title or None,
                fontsize="small",
                title_fontsize="small",
                loc="upper left",
                bbox_to_anchor=(1.01, 1.0),
            )
        return
    colors = require("matplotlib.colors", "plot")
    cm = require("matplotlib.cm", "plot")
    cmap = colors.ListedColormap([style["color"] for style in styles])
    mappable = cm.ScalarMappable(norm=colors.Normalize(-0.5, len(labels) - 0.5), cmap=cmap)
    bar = fig.colorbar(mappable, ax=axes, fraction=0.04, pad=0.02)
    bar.ax.invert_yaxis()
    category_ticks(bar.ax.yaxis, [short_label(label) for label in labels], fontsize="x-small")
    bar.set_label(title)
    if limits:
        first.legend(handles=list(limits), fontsize="small", loc="upper left")


def category_ticks(axis: Any, labels: Sequence[str], fontsize: str = "small") -> None:
    """Label integer positions 0..n-1 of a matplotlib `Axis` with `labels` (x labels are
    rotated), keeping every k-th with k as small as lets them fit the axis' length at draw
    time, so tick labels never overlap however many categories there are."""
    ticker = require("matplotlib.ticker", "plot")
    font_manager = require("matplotlib.font_manager", "plot")
    names = list(labels)
    # A label takes one line height across the axis (x labels are drawn rotated by 90°);
    # two keep them apart and the ticks few (each one is a costly object to draw).
    spacing = 2.0 * font_manager.FontProperties(size=fontsize).get_size_in_points()

    locator: Any = ticker.Locator

    class FitLocator(locator):  # type: ignore[misc]
        def __call__(self) -> list[int]:
            lo, hi = sorted(self.axis.get_view_interval())
            first, last = max(0, math.ceil(lo)), min(len(names) - 1, math.floor(hi))
            box = self.axis.axes.get_window_extent()
            along = box.width if self.axis.axis_name == "x" else box.height
            room = max(1, int(along * 72 / self.axis.axes.get_figure(root=True).dpi / spacing))
            count = last - first + 1
            step = next(k for k in _STEPS if math.ceil(count / k) <= room or k == _STEPS[-1])
            return [i for i in range(first, last + 1) if i % step == 0]

    def label(value: float, _: Any) -> str:
        i = round(value)
        return names[i] if abs(value - i) < 1e-6 and 0 <= i < len(names) else ""

    axis.set_major_locator(FitLocator())
    axis.set_major_formatter(ticker.FuncFormatter(label))
    axis.set_minor_locator(ticker.NullLocator())
    axis.set_tick_params(labelsize=fontsize)
    if axis.axis_name == "x":
        axis.set_tick_params(labelrotation=90)


# Label every k-th category, k from this list (the last step is for absurd counts).
_STEPS = (1, 2, 3, 4, 5, 10, 20, 25, 50, 100, 200, 500, 1000, 10**9)


def limits_legend(fig: Figure, handles: Sequence[Any]) -> None:
    """The legend of the number-format lines, below the plot across the figure."""
    if not handles:
        return
    # One column per ~3 inches of figure width (the longest entries), so that the legend
    # never runs past the figure's edges.
    width, height = (float(v) for v in fig.get_size_inches())
    ncols = max(1, min(4, math.floor(width / 3.2 + 0.01)))
    constrained = fig.get_layout_engine() is not None
    if not constrained:
        # Made in `fixed_margins`: its bottom margin holds the x axis (and rotated labels,
        # see `new_figure`); the legend's rows go below.
        rows = math.ceil(len(handles) / ncols)
        bottom = fig.subplotpars.bottom * height + rows * _LEGEND_ROW + 0.05
        fig.subplots_adjust(bottom=bottom / height)
    fig.legend(
        handles=list(handles),
        loc="outside lower center" if constrained else "lower center",
        ncols=ncols,
        fontsize="small",
        frameon=False,
        borderaxespad=0.5 if constrained else 0.2,
    )
