"""The thin shell every viewer shares: the panel (controls, image, message), drawing a
`Drawing`, setting a control from a `Choice`, quiet updates.

The viewers' logic (what each control offers, what is drawn) is in the data layer's
`_*_view` modules, tested without ipywidgets; a viewer module here builds the controls,
observes them, and calls that logic. This module is the one place where the viewers meet
`tensor_tracker.plot`: a viewer shows a figure, so widgets sit above plot.
"""

from __future__ import annotations

import html
import io
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .. import plot
from .._data._views import Choice, Drawing, Note
from .._data.diagnose import diagnose, verdict_html
from .._optional import require
from ..plot._figure import at_most, fixed_margins

if TYPE_CHECKING:
    from matplotlib.figure import Figure
__all__ = [
    "MIN_SCALE",
    "PX_PER_INCH",
    "RASTER_DPI",
    "VIEWER_WIDTH",
    "Panel",
    "Quiet",
    "empty_viewer",
    "error_html",
    "ipywidgets_module",
    "make_viewer",
    "observe",
    "render",
    "set_options",
]


VIEWER_WIDTH = 9.6
"""The widest figure a viewer draws, in inches: JupyterLab's output area (about 960 px),
so that a figure is never shown shrunk."""

PX_PER_INCH = 100
"""How wide a viewer shows its figure: as many CSS pixels per inch as a figure displayed
directly in Jupyter (matplotlib's default dpi), so fonts match across both."""

MIN_SCALE = 0.7
"""The most a viewer narrows its figure to fit a narrow output area (a phone, a side
panel): at 70% of its size, matplotlib's 10 pt text is still about 10 CSS px. In a narrower
output area the figure scrolls sideways inside its own box instead (the page does not),
since text shrunk to 3 px cannot be read at all."""

RASTER_DPI = 200
"""Resolution of the few artists drawn as pixels inside a viewer's SVG (heatmaps, dense
scatter plots): sharp on high-DPI screens."""


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
    """A message for the viewer, as HTML in the notebook theme's error colour (JupyterLab's
    own, light or dark; a dark red elsewhere)."""
    return f'<span style="color:var(--jp-error-color1, #b00020)">{html.escape(text)}</span>'


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
        # Scrolls sideways the figure that `MIN_SCALE` keeps wider than the output area.
        self.frame = w.Box([self.image], layout={"width": "100%", "overflow": "auto hidden"})
        self.box = w.VBox([self.message, self.frame], layout={"width": "100%"})

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
        width = figure.get_size_inches()[0] * PX_PER_INCH
        self.image.layout.max_width = f"{round(width)}px"
        self.image.layout.min_width = f"{round(width * MIN_SCALE)}px"
        self.image.layout.display = ""
        self.message.value = ""

    def fail(self, text: str) -> None:
        """Show why there is no figure, as an error."""
        self.note(error_html(text))

    def say(self, note: Note) -> None:
        """Show `note` in place of the figure."""
        if note.html:
            self.note(note.text)
        else:
            self.note(error_html(note.text) if note.error else html.escape(note.text))

    def note(self, html_text: str) -> None:
        """Show `html_text` (not an error: what the figure needs) in place of the figure."""
        self.figure = None
        self.image.value = b""
        self.image.layout.display = "none"
        self.message.value = html_text


def make_viewer(
    w: Any,
    controls: dict[str, Any],
    rows: Sequence[Any],
    panel: Panel,
    redraw: Callable[[], None],
    recording: Any = None,
) -> Any:
    """The VBox with `controls`, `figure`, `message`, `image`, `redraw` and `verdict`
    attached. With a `recording` that `diagnose` finds problems in, their verdict is the
    viewer's first output (`verdict`: that HTML widget; None when nothing was found)."""
    for row in rows:
        # A row of controls wraps onto the next line when the output area is narrow (a
        # phone, a side-by-side notebook) instead of cutting the last controls off.
        row.layout.flex_flow = "row wrap"
        for control in getattr(row, "children", ()):  # a dropdown's 300 px: wider than a phone
            control.layout.max_width = "100%"
    diagnosis = None if recording is None else diagnose(recording)
    verdict = w.HTML(value=verdict_html(diagnosis)) if diagnosis else None
    box = w.VBox(
        [*([verdict] if verdict else []), *rows, panel.box],
        layout={"width": "100%", "max_width": "100%"},
    )
    box.verdict = verdict
    box.controls = controls
    box.message = panel.message
    box.image = panel.image
    box.figure = None

    def redraw_and_keep() -> None:
        redraw()
        box.figure = panel.figure

    box.redraw = redraw_and_keep
    return box


def empty_viewer(w: Any, note: Note) -> Any:
    """A viewer with no controls that only says why there is nothing to show."""
    panel = Panel(w)
    panel.say(note)
    return make_viewer(w, {}, [], panel, lambda: None)


def render(drawing: Drawing) -> Figure:
    """The figure `drawing` describes."""
    make = getattr(plot, drawing.figure)
    if drawing.margins is None:
        return make(drawing.source, **drawing.options)  # type: ignore[no-any-return]
    with fixed_margins(**drawing.margins):
        return make(drawing.source, **drawing.options)  # type: ignore[no-any-return]


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


def set_options(control: Any, choice: Choice) -> None:
    """Set a control's options, value and visibility from `choice` (options and value reach
    the page in one message, so it never holds an index out of its options)."""
    with control.hold_sync():
        control.options = choice.options
        control.value = choice.value
    control.layout.display = "" if choice.shown else "none"
