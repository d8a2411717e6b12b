"""`scale_viewer`: the scale plot with its choices as controls."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any

from .._data._scale_view import ScaleState, scale_choices, scale_drawing, scale_steps
from .._data._views import Choice, Note
from ._base import (
    Panel,
    Quiet,
    empty_viewer,
    ipywidgets_module,
    make_viewer,
    observe,
    render,
    set_options,
)

if TYPE_CHECKING:
    import ipywidgets

__all__ = ["scale_viewer"]


def scale_viewer(tracker: Any) -> ipywidgets.VBox:
    """The forward and gradient scale of every module (`plot.scale_plot`), by statistic.

    Controls (keys of `viewer.controls`):

    - `"stat"` (Dropdown): the statistic: those recorded with `stats=`, or any built-in
      statistic for full-tensor stashes (default `"rms"`).
    - `"kind"` (Dropdown): `output`, `input`, `param` or `optimizer` (those recorded).
    - `"step"` (Dropdown): the step (default: the last one).
    - `"limits"` (Checkbox, on): draw the fp16/bf16/fp8 limit lines; off, the y axis fits
      the data alone.

    Args:
        tracker: a `Tracker` or a list of `Stash`.

    Returns:
        An `ipywidgets.VBox` with `controls`, `figure`, `message`, `image` and `redraw()`.

    Raises:
        TypeError: `tracker` is not a tracker or a list of stashes.

    Example:
        >>> with tensor_tracker.track(model, stats=["rms", "abs_max"]) as t:
        ...     model(x).sum().backward()
        >>> v = widgets.scale_viewer(t)
        >>> v.controls["stat"].value = "abs_max"
        >>> v.figure.axes[0].get_ylabel()
        'log2(abs_max)'
    """
    w = ipywidgets_module()
    choices = scale_choices(tracker)
    if isinstance(choices, Note):
        return empty_viewer(w, choices)
    return _ScaleViewer(w, tracker, choices).box


class _ScaleViewer:
    """The widgets of one `scale_viewer`: what each control offers and what is drawn is
    decided in `_data._scale_view`; this class sets the controls and draws."""

    def __init__(self, w: Any, tracker: Any, choices: dict[str, Choice]) -> None:
        self.tracker = tracker
        labels = ("statistic", "kind", "step")
        self.controls: dict[str, Any] = {
            key: w.Dropdown(options=choice.options, value=choice.value, description=label)
            for (key, choice), label in zip(choices.items(), labels, strict=True)
        }
        c = self.controls
        c["limits"] = w.Checkbox(value=True, description="format limits", indent=False)
        self.panel, self.quiet = Panel(w), Quiet()
        observe([c["kind"]], self.on_kind)
        observe([c["stat"], c["step"], c["limits"]], self.redraw)
        row = w.HBox([c["stat"], c["kind"], c["step"], c["limits"]])
        self.box = make_viewer(w, c, [row], self.panel, self.redraw, tracker)
        self.box.redraw()

    def redraw(self) -> None:
        if not self.quiet.active:
            values = {f.name: self.controls[f.name].value for f in fields(ScaleState)}
            state = ScaleState(**values)
            self.panel.show(lambda: render(scale_drawing(self.tracker, state)))
            self.box.figure = self.panel.figure

    def on_kind(self) -> None:
        c = self.controls
        with self.quiet:
            set_options(c["step"], scale_steps(self.tracker, c["kind"].value, c["step"].value))
        self.redraw()
