"""Notebook viewers (ipywidgets) around the figures of `tensor_tracker.plot`.

Each viewer is an `ipywidgets.VBox`: controls on top, the figure below (rendered to a PNG
image, so it works in any notebook front end without a matplotlib backend). Display it by
leaving it as the last expression of a cell. Only what a control changes is redrawn.

For scripting and tests each viewer also carries:

- `viewer.controls`: `{name: control widget}`; set `viewer.controls["module"].value = ...`
  to drive it from Python;
- `viewer.figure`: the matplotlib `Figure` on display (`None` while a message is shown);
- `viewer.message`: an `ipywidgets.HTML` with the reason when there is nothing to show
  (empty tracker, a filter matching nothing, NaN-only values, ...), empty otherwise;
- `viewer.image`: the `ipywidgets.Image` showing the figure;
- `viewer.redraw()`: draw again.

ipywidgets and matplotlib are imported when a viewer is built
(`pip install 'tensor-tracker[widgets]'`).

Example:
    >>> from tensor_tracker import widgets
    >>> with tensor_tracker.track(model) as t:
    ...     model(x).sum().backward()
    >>> widgets.histogram_viewer(t)   # last line of a notebook cell
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from torch import Tensor

from . import plot
from ._optional import require
from ._select import (
    ROOT_LABEL,
    as_stashes,
    display_name,
    match_names,
    module_order,
    select,
    stash_label,
)
from .core.records import Stash
from .stats import NAMES, Stats

if TYPE_CHECKING:
    import ipywidgets
    from matplotlib.figure import Figure

__all__ = ["histogram_viewer", "history_viewer", "scale_viewer", "umap_viewer"]

_DPI = 90
_NUMBERED = re.compile(r"(^|\.)\d+$")
_EMPTY = (
    "The tracker holds no stashes yet. Record something first, e.g. "
    "<code>with tensor_tracker.track(model) as t: model(x).sum().backward()</code>, "
    "then build the viewer again."
)


def _widgets() -> Any:
    require("matplotlib", "widgets")
    return require("ipywidgets", "widgets")


def _error_html(text: str) -> str:
    return f'<span style="color:#b00020">{html.escape(text)}</span>'


class _Panel:
    """A message line above a figure image; `show` draws a figure or shows why it can't."""

    def __init__(self, w: Any) -> None:
        self.message = w.HTML(value="")
        self.image = w.Image(format="png")
        self.image.layout.display = "none"
        self.figure: Figure | None = None
        self.box = w.VBox([self.message, self.image])

    def show(self, draw: Callable[[], Figure]) -> None:
        try:
            figure = draw()
            buffer = io.BytesIO()
            figure.savefig(buffer, format="png", dpi=_DPI)
        except (ValueError, TypeError, KeyError, ImportError) as error:
            self.fail(str(error).strip("'\""))
            return
        except Exception as error:  # never a traceback in the notebook: say what failed
            self.fail(f"could not draw this figure ({type(error).__name__}: {error})")
            return
        self.figure = figure
        self.image.value = buffer.getvalue()
        self.image.layout.display = ""
        self.message.value = ""

    def fail(self, text: str) -> None:
        self.figure = None
        self.image.value = b""
        self.image.layout.display = "none"
        self.message.value = _error_html(text)


def _viewer(
    w: Any, controls: dict[str, Any], rows: Sequence[Any], panel: _Panel, redraw: Callable[[], None]
) -> Any:
    """The VBox with `controls`, `figure`, `message`, `image` and `redraw` attached."""
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


def _empty_viewer(w: Any, text: str) -> Any:
    panel = _Panel(w)
    panel.fail(text)
    panel.message.value = text if text == _EMPTY else _error_html(text)
    return _viewer(w, {}, [], panel, lambda: None)


def _stashes(tracker: Any) -> list[Stash]:
    return as_stashes(tracker, "tracker")


def _module_options(names: Sequence[str]) -> list[tuple[str, str]]:
    return [(display_name(n), n) for n in names]


def _observe(controls: Sequence[Any], callback: Callable[[], None]) -> None:
    for control in controls:
        control.observe(lambda _change: callback(), names="value")


class _Quiet:
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


def _set_options(control: Any, options: Sequence[Any], keep: Any, default: Any = None) -> None:
    """Replace a Dropdown's options, keeping its value when still offered."""
    values = [o[1] if isinstance(o, tuple) else o for o in options]
    control.options = list(options)
    if keep in values:
        control.value = keep
    elif default in values:
        control.value = default
    elif values:
        control.value = values[0]


# --------------------------------------------------------------------------------------
# histogram_viewer


def _plottable(stashes: Sequence[Stash]) -> list[Stash]:
    return [s for s in stashes if isinstance(s.first_value, (Tensor, Stats))]


def histogram_viewer(tracker: Any) -> ipywidgets.VBox:
    """Browse the histogram of any stashed tensor.

    Controls (keys of `viewer.controls`):

    - `"filter"` (Text): substring or regular expression of module names; the module list
      shows the matches (`"<model>"` is the root).
    - `"module"` (Dropdown): the module.
    - `"what"` (Dropdown): `output`, or an input/parameter/optimizer entry when recorded.
    - `"grad"` (ToggleButtons): forward value (`False`) or gradient (`True`).
    - `"step"`, `"call"` (Dropdowns): which step and which call of the module.
    - `"log2"` (ToggleButtons): linear values (`False`) or log2|x| (`True`).
    - `"bins"` (IntSlider): number of bins.

    Stashes recorded with `stats=[..., tensor_tracker.stats.histogram()]` show their recorded
    bins (`log2` and `bins` are then fixed by the recording).

    Args:
        tracker: a `Tracker` or a list of `Stash`.

    Returns:
        An `ipywidgets.VBox` with `controls`, `figure`, `message`, `image` and `redraw()`
        (see the module docstring).

    Raises:
        TypeError: `tracker` is not a tracker or a list of stashes.

    Example:
        >>> v = widgets.histogram_viewer(t)
        >>> v.controls["filter"].value = "blocks.0"
        >>> v.controls["log2"].value = True
        >>> v.figure.axes[0].get_xlabel()
        'log2|value|'
    """
    w = _widgets()
    stashes = _stashes(tracker)
    if not stashes:
        return _empty_viewer(w, _EMPTY)
    usable = _plottable(stashes)
    if not usable:
        return _empty_viewer(
            w,
            "No stash holds a tensor or statistics (e.g. values of a custom stash_value); "
            "track with the default copy or stats=[..., tensor_tracker.stats.histogram()].",
        )
    names = module_order(usable)
    quiet = _Quiet()
    c: dict[str, Any] = {
        "filter": w.Text(
            value="",
            description="filter",
            placeholder="substring or regex",
            continuous_update=False,
        ),
        "module": w.Dropdown(options=_module_options(names), description="module"),
        "what": w.Dropdown(description="value"),
        "grad": w.ToggleButtons(options=[("forward", False), ("gradient", True)], value=False),
        "step": w.Dropdown(description="step"),
        "call": w.Dropdown(description="call"),
        "log2": w.ToggleButtons(options=[("linear", False), ("log2", True)], value=False),
        "bins": w.IntSlider(value=64, min=1, max=256, description="bins", continuous_update=False),
    }
    for key in ("grad", "log2"):
        c[key].style.button_width = "80px"
    panel = _Panel(w)

    def candidates() -> list[Stash]:
        name = c["module"].value
        if name is None:
            return []
        return [s for s in usable if s.name == name]

    def refresh_choices() -> None:
        """Update the dependent dropdowns from the module down."""
        with quiet:
            own = candidates()
            whats = list(dict.fromkeys((s.kind, s.attr) for s in own))
            _set_options(
                c["what"],
                [(k + (f" {a}" if a else ""), (k, a)) for k, a in whats],
                c["what"].value,
                ("output", ""),
            )
            kind, attr = c["what"].value or ("output", "")
            same = [
                s for s in own if s.kind == kind and s.attr == attr and s.grad == c["grad"].value
            ]
            _set_options(c["step"], sorted({s.step for s in same}), c["step"].value)
            at_step = [s for s in same if s.step == c["step"].value]
            _set_options(c["call"], sorted({s.call for s in at_step}), c["call"].value)

    def on_filter() -> None:
        with quiet:
            pattern = c["filter"].value
            matching = match_names(names, pattern)
            exact = "" if pattern == ROOT_LABEL else pattern
            keep = exact if pattern and exact in matching else c["module"].value
            _set_options(c["module"], _module_options(matching), keep)
            if not matching:
                c["module"].value = None
        refresh_choices()
        redraw()

    def draw() -> Figure:
        pattern = c["filter"].value
        if c["module"].value is None:
            raise ValueError(
                f"No module matches the filter {pattern!r}. Clear it, or try part of one of: "
                + ", ".join(display_name(n) for n in names[:10])
            )
        kind, attr = c["what"].value or ("output", "")
        grad = c["grad"].value
        chosen = [
            s
            for s in candidates()
            if s.kind == kind
            and s.attr == attr
            and s.grad == grad
            and s.step == c["step"].value
            and s.call == c["call"].value
        ]
        if not chosen:
            what = "gradient" if grad else "forward value"
            raise ValueError(
                f"No {what} recorded for {display_name(c['module'].value)} ({kind}"
                + (f" {attr}" if attr else "")
                + ")"
                + (" — track with grad=True to record gradients." if grad else ".")
            )
        stash = chosen[0]
        recorded = isinstance(stash.first_value, Stats)
        c["log2"].disabled = c["bins"].disabled = recorded
        return plot.histogram(
            stash,
            bins=c["bins"].value,
            log2=None if recorded else c["log2"].value,
            labels=[stash_label(stash, step=True, call=True)],
        )

    def redraw() -> None:
        if not quiet.active:
            panel.show(draw)
            box.figure = panel.figure

    def on_choice() -> None:
        if not quiet.active:
            refresh_choices()
            redraw()

    c["filter"].observe(lambda _change: on_filter(), names="value")
    _observe([c["module"], c["what"], c["grad"], c["step"]], on_choice)
    _observe([c["call"], c["log2"], c["bins"]], redraw)
    rows = [
        w.HBox([c["filter"], c["module"], c["what"]]),
        w.HBox([c["grad"], c["step"], c["call"]]),
        w.HBox([c["log2"], c["bins"]]),
    ]
    box = _viewer(w, c, rows, panel, redraw)
    refresh_choices()
    box.redraw()
    return box


# --------------------------------------------------------------------------------------
# scale_viewer and history_viewer: statistic choices


def _stat_options(stashes: Sequence[Stash]) -> list[str]:
    """Scalar statistics available: the recorded ones for stats= stashes, else the
    built-in names (computed from tensors)."""
    recorded: dict[str, None] = {}
    has_tensors = False
    for s in stashes:
        value = s.first_value
        if isinstance(value, Stats):
            hist_names = {n for h in value.layout.histograms.values() for n in h.names}
            recorded.update(dict.fromkeys(n for n in value.names if n not in hist_names))
        elif isinstance(value, Tensor):
            has_tensors = True
    options = list(recorded)
    if has_tensors:
        options += [n for n in NAMES if n not in recorded]
    return options


def _default_stat(options: Sequence[str]) -> str | None:
    return "rms" if "rms" in options else (options[0] if options else None)


def scale_viewer(tracker: Any) -> ipywidgets.VBox:
    """The forward and gradient scale of every module (`plot.scale_plot`), by statistic.

    Controls (keys of `viewer.controls`):

    - `"stat"` (Dropdown): the statistic: those recorded with `stats=`, or any built-in
      statistic for full-tensor stashes (default `"rms"`).
    - `"kind"` (Dropdown): `output`, `input`, `param` or `optimizer` (those recorded).
    - `"step"` (Dropdown): the step (default: the last one).

    Args:
        tracker: a `Tracker` or a list of `Stash`.

    Returns:
        An `ipywidgets.VBox` with `controls`, `figure`, `message`, `image` and `redraw()`.

    Raises:
        TypeError: `tracker` is not a tracker or a list of stashes.

    Example:
        >>> v = widgets.scale_viewer(t)
        >>> v.controls["stat"].value = "abs_max"
        >>> v.figure.axes[0].get_ylabel()
        'log2(abs_max)'
    """
    w = _widgets()
    stashes = _stashes(tracker)
    if not stashes:
        return _empty_viewer(w, _EMPTY)
    options = _stat_options(stashes)
    if not options:
        return _empty_viewer(w, "No stash holds a tensor or statistics to take the scale of.")
    kinds = list(dict.fromkeys(s.kind for s in stashes))
    kind = "output" if "output" in kinds else kinds[0]
    steps = sorted({s.step for s in stashes if s.kind == kind})
    c: dict[str, Any] = {
        "stat": w.Dropdown(options=options, value=_default_stat(options), description="statistic"),
        "kind": w.Dropdown(options=kinds, value=kind, description="kind"),
        "step": w.Dropdown(options=steps, value=steps[-1], description="step"),
    }
    panel = _Panel(w)
    quiet = _Quiet()

    def redraw() -> None:
        if not quiet.active:
            panel.show(
                lambda: plot.scale_plot(
                    stashes, stat=c["stat"].value, kind=c["kind"].value, step=c["step"].value
                )
            )
            box.figure = panel.figure

    def on_kind() -> None:
        with quiet:
            kind_steps = sorted({s.step for s in stashes if s.kind == c["kind"].value})
            _set_options(c["step"], kind_steps, c["step"].value, kind_steps[-1])
        redraw()

    c["kind"].observe(lambda _change: on_kind(), names="value")
    _observe([c["stat"], c["step"]], redraw)
    box = _viewer(w, c, [w.HBox([c["stat"], c["kind"], c["step"]])], panel, redraw)
    box.redraw()
    return box


# --------------------------------------------------------------------------------------
# umap_viewer


def umap_viewer(tracker: Any, token_labels: Sequence[Any] | None = None) -> ipywidgets.VBox:
    """Tokens' paths through the layers (`plot.umap_plot`), with layers and tokens to pick.

    Controls (keys of `viewer.controls`):

    - `"layers"` (SelectMultiple): modules whose outputs have a feature dimension; default
      `plot.default_layers` (e.g. every `blocks.N`). Pick 2 or more with the same shape.
    - `"tokens"` (IntRangeSlider): the rows (tokens after flattening) to draw, inclusive;
      default the first 64.
    - `"method"` (ToggleButtons): `"pca"` (the default here: instant) or `"umap"` (a few
      seconds per change; the first use compiles numba code).
    - `"grad"` (ToggleButtons): activations (`False`), gradients (`True`), or `"both"`.
    - `"step"` (Dropdown): which step.

    Args:
        tracker: a `Tracker` or a list of `Stash` holding full tensors.
        token_labels: optional text per row (e.g. the decoded tokens), passed to `umap_plot`.

    Returns:
        An `ipywidgets.VBox` with `controls`, `figure`, `message`, `image` and `redraw()`.

    Raises:
        TypeError: `tracker` is not a tracker or a list of stashes.

    Example:
        >>> v = widgets.umap_viewer(t)
        >>> v.controls["tokens"].value = (0, 15)
        >>> v.controls["method"].value = "umap"
    """
    w = _widgets()
    stashes = _stashes(tracker)
    if not stashes:
        return _empty_viewer(w, _EMPTY)
    outputs = select(stashes, kind="output")
    candidates: dict[str, int] = {}  # module -> rows
    for s in outputs:
        value = s.first_value
        if not s.grad and isinstance(value, Tensor) and value.dim() >= 2:
            candidates.setdefault(s.name, value.numel() // max(value.shape[-1], 1))
    if len(candidates) < 2:
        return _empty_viewer(
            w,
            "umap_viewer needs full tensors (track without stats=) of at least 2 modules "
            f"whose outputs have a feature dimension; found {len(candidates)}.",
        )
    default = plot.default_layers(outputs) or list(candidates)[:2]
    rows_of = candidates[default[0]]
    steps = sorted({s.step for s in outputs})
    c: dict[str, Any] = {
        "layers": w.SelectMultiple(
            options=_module_options(list(candidates)), value=default, description="layers", rows=8
        ),
        "tokens": w.IntRangeSlider(
            value=(0, min(rows_of, plot.MAX_TOKENS) - 1),
            min=0,
            max=max(rows_of - 1, 0),
            description="tokens",
            continuous_update=False,
        ),
        "method": w.ToggleButtons(options=["pca", "umap"], value="pca"),
        "grad": w.ToggleButtons(
            options=[("activations", False), ("gradients", True), ("both", "both")], value=False
        ),
        "step": w.Dropdown(options=steps, value=steps[-1], description="step"),
    }
    panel = _Panel(w)
    quiet = _Quiet()

    def draw() -> Figure:
        layers = list(c["layers"].value)
        if len(layers) < 2:
            raise ValueError("Select at least 2 layers (ctrl/shift-click) to draw token paths.")
        lo, hi = c["tokens"].value
        return plot.umap_plot(
            stashes,
            layers=layers,
            grad=c["grad"].value,
            method=c["method"].value,
            tokens=range(lo, hi + 1),
            token_labels=token_labels,
            step=c["step"].value,
        )

    def redraw() -> None:
        if not quiet.active:
            panel.show(draw)
            box.figure = panel.figure

    def on_layers() -> None:
        layers = list(c["layers"].value)
        if layers:
            with quiet:
                n = candidates[layers[0]]
                slider = c["tokens"]
                lo, hi = slider.value
                if slider.max != max(n - 1, 0):
                    slider.max = max(n - 1, 0)
                    slider.value = (min(lo, n - 1), min(hi, n - 1))
        redraw()

    c["layers"].observe(lambda _change: on_layers(), names="value")
    _observe([c["tokens"], c["method"], c["grad"], c["step"]], redraw)
    rows = [
        w.HBox([c["layers"], w.VBox([c["tokens"], c["method"], c["grad"], c["step"]])]),
    ]
    box = _viewer(w, c, rows, panel, redraw)
    box.redraw()
    return box


# --------------------------------------------------------------------------------------
# history_viewer


def history_viewer(tracker: Any) -> ipywidgets.VBox:
    """A statistic over training steps (`plot.history`), plus one module's histogram over
    steps (`plot.histogram_heatmap`).

    Controls (keys of `viewer.controls`):

    - `"stat"` (Dropdown): the statistic (default `"rms"`).
    - `"modules"` (SelectMultiple): the modules drawn as lines; default the numbered layers
      (names ending in a number, e.g. `blocks.0`, `blocks.1`), else the first 8 modules.
    - `"grad"` (ToggleButtons): forward values (`False`) or gradients (`True`); applies to
      both figures.
    - `"heatmap_module"` (Dropdown): the module of the heatmap. Its histograms come from
      `stats=[..., tensor_tracker.stats.histogram()]` or are binned from full tensors.

    Args:
        tracker: a `Tracker` (use `tracker.step()` between training steps) or a list of
            `Stash`.

    Returns:
        An `ipywidgets.VBox` with `controls`, `figure` (the history), `message`, `image`,
        `redraw()`, and for the heatmap `heatmap_figure`, `heatmap_message`,
        `heatmap_image`.

    Raises:
        TypeError: `tracker` is not a tracker or a list of stashes.

    Example:
        >>> v = widgets.history_viewer(t)
        >>> v.controls["modules"].value = ("blocks.0",)
        >>> v.controls["heatmap_module"].value = "blocks.0"
    """
    w = _widgets()
    stashes = _stashes(tracker)
    if not stashes:
        viewer = _empty_viewer(w, _EMPTY)
        viewer.heatmap_figure = None
        viewer.heatmap_message = viewer.message
        viewer.heatmap_image = viewer.image
        return viewer
    options = _stat_options(stashes)
    outputs = select(stashes, kind="output")
    names = module_order(outputs or stashes)
    default = [n for n in names if _NUMBERED.search(n)] or names[:8]
    c: dict[str, Any] = {
        "stat": w.Dropdown(options=options, value=_default_stat(options), description="statistic"),
        "modules": w.SelectMultiple(
            options=_module_options(names), value=default, description="modules", rows=8
        ),
        "grad": w.ToggleButtons(options=[("forward", False), ("gradient", True)], value=False),
        "heatmap_module": w.Dropdown(
            options=_module_options(names), value=default[0], description="heatmap"
        ),
    }
    panel = _Panel(w)
    heat = _Panel(w)

    def draw_history() -> Figure:
        modules = list(c["modules"].value)
        if not modules:
            raise ValueError("Select one or more modules (ctrl/shift-click).")
        if c["stat"].value is None:
            raise ValueError("No statistic is available for these stashes.")
        return plot.history(stashes, stat=c["stat"].value, names=modules, grad=c["grad"].value)

    def draw_heatmap() -> Figure:
        return plot.histogram_heatmap(stashes, c["heatmap_module"].value, grad=c["grad"].value)

    def redraw_history() -> None:
        panel.show(draw_history)
        box.figure = panel.figure

    def redraw_heatmap() -> None:
        heat.show(draw_heatmap)
        box.heatmap_figure = heat.figure

    def redraw() -> None:
        redraw_history()
        redraw_heatmap()

    _observe([c["stat"], c["modules"]], redraw_history)
    _observe([c["heatmap_module"]], redraw_heatmap)
    _observe([c["grad"]], redraw)
    rows = [w.HBox([w.VBox([c["stat"], c["grad"]]), c["modules"]])]
    box = _viewer(w, c, rows, panel, redraw)
    box.children = (*box.children, c["heatmap_module"], heat.box)
    box.heatmap_message = heat.message
    box.heatmap_image = heat.image
    box.heatmap_figure = None
    box.redraw()
    box.heatmap_figure = heat.figure
    return box
