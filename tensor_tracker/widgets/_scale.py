"""`scale_viewer`: the scale plot with its choices as controls."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import plot
from ..data.select import first_stashes, recorded_steps
from ..plot._figure import DEFAULT_FORMATS, fixed_margins

if TYPE_CHECKING:
    import ipywidgets
    from matplotlib.figure import Figure
from ._base import (
    EMPTY,
    Panel,
    Quiet,
    default_stat,
    empty_viewer,
    ipywidgets_module,
    make_viewer,
    observe,
    set_options,
    stat_options,
)

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
    # The options from one stash per module and direction; each figure reads one step:
    # a long run's viewer opens and redraws in a moment.
    stashes = first_stashes(tracker, "tracker")
    if not stashes:
        return empty_viewer(w, EMPTY)
    options = stat_options(stashes)
    if not options:
        return empty_viewer(w, "No stash holds a tensor or statistics to take the scale of.")
    kinds = list(dict.fromkeys(s.kind for s in stashes))
    kind = "output" if "output" in kinds else kinds[0]
    steps = recorded_steps(tracker, "tracker", kind)
    c: dict[str, Any] = {
        "stat": w.Dropdown(options=options, value=default_stat(options), description="statistic"),
        "kind": w.Dropdown(options=kinds, value=kind, description="kind"),
        "step": w.Dropdown(options=steps, value=steps[-1], description="step"),
        "limits": w.Checkbox(value=True, description="format limits", indent=False),
    }
    panel = Panel(w)
    quiet = Quiet()

    def draw() -> Figure:
        with fixed_margins():  # constrained layout would take most of a redraw's time
            return plot.scale_plot(
                tracker,
                stat=c["stat"].value,
                kind=c["kind"].value,
                step=c["step"].value,
                formats=DEFAULT_FORMATS if c["limits"].value else (),
            )

    def redraw() -> None:
        if not quiet.active:
            panel.show(draw)
            box.figure = panel.figure

    def on_kind() -> None:
        with quiet:
            kind_steps = recorded_steps(tracker, "tracker", c["kind"].value)
            set_options(c["step"], kind_steps, c["step"].value, kind_steps[-1])
        redraw()

    c["kind"].observe(lambda _change: on_kind(), names="value")
    observe([c["stat"], c["step"], c["limits"]], redraw)
    row = w.HBox([c["stat"], c["kind"], c["step"], c["limits"]])
    box = make_viewer(w, c, [row], panel, redraw)
    box.redraw()
    return box
