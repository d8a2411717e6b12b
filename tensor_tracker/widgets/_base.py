"""What the viewers share: the panel (controls, image, message), option lists, quiet updates."""

from __future__ import annotations

import html
import io
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from torch import Tensor

from .._optional import require
from ..core.records import Stash
from ..data.select import (
    display_name,
    shown_value,
)
from ..plot._figure import at_most
from ..stats import NAMES, Stats

if TYPE_CHECKING:
    from matplotlib.figure import Figure
__all__ = [
    "EMPTY",
    "PX_PER_INCH",
    "RASTER_DPI",
    "VIEWER_WIDTH",
    "Panel",
    "Quiet",
    "default_stat",
    "empty_viewer",
    "error_html",
    "histogram_name",
    "ipywidgets_module",
    "make_viewer",
    "module_options",
    "observe",
    "plottable",
    "set_options",
    "stat_options",
]


VIEWER_WIDTH = 9.6
"""The widest figure a viewer draws, in inches: JupyterLab's output area (about 960 px),
so that a figure is never shown shrunk."""

PX_PER_INCH = 100
"""How wide a viewer shows its figure: as many CSS pixels per inch as a figure displayed
directly in Jupyter (matplotlib's default dpi), so fonts match across both."""

RASTER_DPI = 200
"""Resolution of the few artists drawn as pixels inside a viewer's SVG (heatmaps, dense
scatter plots): sharp on high-DPI screens."""


EMPTY = (
    "The tracker holds no stashes yet. Record something first, e.g. "
    "<code>with tensor_tracker.track(model) as t: model(x).sum().backward()</code>, "
    "then build the viewer again."
)


# Text as SVG text, not glyph outlines: a third less time to write a figure with legends, a
# smaller image, drawn sharp by the browser. Laid out with DejaVu Sans (matplotlib's own);
# where the browser lacks it, the next fonts are narrower, so no text outgrows its place.
_SVG_TEXT = {
    "svg.fonttype": "none",
    "font.sans-serif": ["DejaVu Sans", "Arial", "Helvetica", "Liberation Sans"],
}


def ipywidgets_module() -> Any:
    """ipywidgets, after checking that matplotlib is installed too (the `widgets` extra)."""
    require("matplotlib", "widgets")
    return require("ipywidgets", "widgets")


def error_html(text: str) -> str:
    """A message for the viewer, as HTML in an error colour."""
    return f'<span style="color:#b00020">{html.escape(text)}</span>'


class Panel:
    """A message line above a figure image; `show` draws a figure or shows why it can't.

    Figures are sent as SVG: vector graphics stay sharp at any output width and on
    high-DPI screens, where a PNG stretched to the output area looks soft (and a PNG
    rendered for every possible width and pixel ratio is not known in advance). The image
    is shown at the figure's own size (`PX_PER_INCH`), narrowed to fit the output area;
    figures are drawn at most `VIEWER_WIDTH` wide, so that they are rarely narrowed."""

    def __init__(self, w: Any) -> None:
        self.message = w.HTML(value="")
        # As wide as the output area up to the figure's own width: a fixed width would
        # widen the boxes around it past a narrower output area (a scroll bar), and so
        # would the widgets' usual margin around a width of 100%.
        self.image = w.Image(
            format="svg+xml", layout={"width": "100%", "height": "auto", "margin": "0"}
        )
        self.image.layout.display = "none"
        self.figure: Figure | None = None
        self.box = w.VBox([self.message, self.image])

    def show(self, draw: Callable[[], Figure]) -> None:
        try:
            with at_most(VIEWER_WIDTH):
                figure = draw()
            buffer = io.BytesIO()
            with require("matplotlib", "widgets").rc_context(_SVG_TEXT):
                figure.savefig(buffer, format="svg", dpi=RASTER_DPI)
        except (ValueError, TypeError, KeyError, ImportError) as error:
            self.fail(str(error).strip("'\""))
            return
        except Exception as error:  # never a traceback in the notebook: say what failed
            self.fail(f"could not draw this figure ({type(error).__name__}: {error})")
            return
        self.figure = figure
        self.image.value = buffer.getvalue()
        self.image.layout.max_width = f"{round(figure.get_size_inches()[0] * PX_PER_INCH)}px"
        self.image.layout.display = ""
        self.message.value = ""

    def fail(self, text: str) -> None:
        """Show why there is no figure, as an error."""
        self.note(error_html(text))

    def note(self, html_text: str) -> None:
        """Show `html_text` (not an error: what the figure needs) in place of the figure."""
        self.figure = None
        self.image.value = b""
        self.image.layout.display = "none"
        self.message.value = html_text


def make_viewer(
    w: Any, controls: dict[str, Any], rows: Sequence[Any], panel: Panel, redraw: Callable[[], None]
) -> Any:
    """The VBox with `controls`, `figure`, `message`, `image` and `redraw` attached."""
    for row in rows:
        # A row of controls wraps onto the next line when the output area is narrow (a
        # phone, a side-by-side notebook) instead of cutting the last controls off.
        row.layout.flex_flow = "row wrap"
    box = w.VBox([*rows, panel.box])
    box.controls = controls
    box.message = panel.message
    box.image = panel.image
    box.figure = None

    def redraw_and_keep() -> None:
        redraw()
        box.figure = panel.figure

    box.redraw = redraw_and_keep
    return box


def empty_viewer(w: Any, text: str, error: bool = True) -> Any:
    """A viewer with no controls that only shows `text` (why there is nothing to show), as
    an error unless `error=False` (what to record, said up front)."""
    panel = Panel(w)
    if text == EMPTY:
        panel.note(text)
    else:
        panel.note(error_html(text) if error else html.escape(text))
    return make_viewer(w, {}, [], panel, lambda: None)


def module_options(names: Sequence[str]) -> list[tuple[str, str]]:
    """Dropdown options for module names: (label shown, name)."""
    return [(display_name(n), n) for n in names]


def observe(controls: Sequence[Any], callback: Callable[[], None]) -> None:
    """Call `callback` whenever the value of any of `controls` changes."""
    for control in controls:
        control.observe(lambda _change: callback(), names="value")


class Quiet:
    """Suspends redraws while several controls are updated, then redraws once."""

    def __init__(self) -> None:
        self.depth = 0

    def __enter__(self) -> None:
        self.depth += 1

    def __exit__(self, *exc: object) -> None:
        self.depth -= 1

    @property
    def active(self) -> bool:
        return self.depth > 0


def set_options(control: Any, options: Sequence[Any], keep: Any, default: Any = None) -> None:
    """Replace a Dropdown's options, keeping its value when still offered (options and
    value reach the page in one message, so it never holds an index out of its options)."""
    values = [o[1] if isinstance(o, tuple) else o for o in options]
    with control.hold_sync():
        control.options = list(options)
        if keep in values:
            control.value = keep
        elif default in values:
            control.value = default
        elif values:
            control.value = values[0]


def plottable(stashes: Sequence[Stash]) -> list[Stash]:
    """The stashes a histogram can show: a tensor or statistics as their first value."""
    return [s for s in stashes if shown_value(s) is not None]


def stat_options(stashes: Sequence[Stash]) -> list[str]:
    """Scalar statistics available: the recorded ones for stats= stashes, else the
    built-in names (computed from tensors)."""
    recorded: dict[str, None] = {}
    has_tensors = False
    for s in stashes:
        value = shown_value(s)
        if isinstance(value, Stats):
            hist_names = {n for h in value.layout.histograms.values() for n in h.names}
            recorded.update(dict.fromkeys(n for n in value.names if n not in hist_names))
        elif isinstance(value, Tensor):
            has_tensors = True
    options = list(recorded)
    if has_tensors:
        options += [n for n in NAMES if n not in recorded]
    return options


def histogram_name(stashes: Sequence[Stash]) -> str:
    """The recorded histogram a viewer shows: `"hist"` (what `histogram()` records) when
    there is one, else the first one recorded (e.g. `"exp_hist"`), else `"hist"`."""
    found: dict[str, None] = {}
    for s in stashes:
        value = shown_value(s)
        if isinstance(value, Stats):
            found.update(dict.fromkeys(value.layout.histograms))
    return "hist" if "hist" in found or not found else next(iter(found))


def default_stat(options: Sequence[str]) -> str | None:
    """The statistic a viewer starts with: `rms` when available, else the first one."""
    return "rms" if "rms" in options else (options[0] if options else None)
