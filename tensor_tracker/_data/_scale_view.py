"""The scale viewer's logic: the statistics, kinds and steps it offers and the scale plot
it draws (see `_views`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._views import EMPTY, Choice, Drawing, Note, choose, default_stat, stat_options
from .select import first_stashes, recorded_steps

__all__ = ["ScaleState", "scale_choices", "scale_drawing", "scale_steps"]


@dataclass(frozen=True)
class ScaleState:
    """The scale viewer's controls' values (see `widgets.scale_viewer`)."""

    stat: str | None = None
    kind: str = "output"
    step: int | None = None
    limits: bool = True


def scale_choices(tracker: Any) -> dict[str, Choice] | Note:
    """What the `stat`, `kind` and `step` controls offer first, or why there is nothing to
    show. Read from one stash per module and direction: a long run's viewer opens in a
    moment."""
    stashes = first_stashes(tracker, "tracker")
    if not stashes:
        return EMPTY
    options = stat_options(stashes)
    if not options:
        return Note("No stash holds a tensor or statistics to take the scale of.")
    kind = choose(dict.fromkeys(s.kind for s in stashes), None, "output")
    return {
        "stat": choose(options, None, default_stat(options)),
        "kind": kind,
        "step": scale_steps(tracker, kind.value, None),
    }


def scale_steps(tracker: Any, kind: str, keep: int | None) -> Choice:
    """The steps recorded for `kind`, keeping the step `keep`, else the last one."""
    steps = recorded_steps(tracker, "tracker", kind)
    return choose(steps, keep, steps[-1] if steps else None)


def scale_drawing(tracker: Any, state: ScaleState) -> Drawing:
    """The scale plot of `state`'s statistic, kind and step; the limit lines of the
    figure's default formats when `state.limits`."""
    options: dict[str, Any] = {"stat": state.stat, "kind": state.kind, "step": state.step}
    if not state.limits:
        options["formats"] = ()
    # Fixed margins: constrained layout would take most of a redraw's time.
    return Drawing("scale_plot", tracker, options, margins={})
