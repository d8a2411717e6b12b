"""`histogram_viewer`: browse the distributions of recorded tensors."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import plot
from ..core.records import Stash
from ..data.exponents import RECORD_HINT
from ..data.select import (
    ROOT_LABEL,
    display_name,
    first_stashes,
    match_names,
    module_order,
    select_from,
    shown_value,
    stash_label,
)
from ..errors import ArgumentValueError
from ..stats import Stats

if TYPE_CHECKING:
    import ipywidgets
    from matplotlib.figure import Figure
from ._base import (
    EMPTY,
    Panel,
    Quiet,
    empty_viewer,
    histogram_name,
    ipywidgets_module,
    make_viewer,
    module_options,
    observe,
    plottable,
    set_options,
)

__all__ = ["BIN_CHOICES", "NO_HISTOGRAM", "histogram_viewer"]

NO_HISTOGRAM = (
    "This run recorded statistics without a histogram; "
    + RECORD_HINT
    + " (or track(model) without stats= to keep tensors)."
)
"""What the viewer says, in place of its controls, for statistics without a histogram."""


def _binnable(stash: Stash) -> bool:
    value = shown_value(stash)
    return not isinstance(value, Stats) or bool(value.layout.histograms)


BIN_CHOICES = (8, 16, 32, 64, 128, 256)
"""The bin counts the histogram viewer offers."""


def histogram_viewer(tracker: Any) -> ipywidgets.VBox:
    """Browse the histogram of any stashed tensor.

    Controls (keys of `viewer.controls`):

    - `"filter"` (Text): substring or regular expression of module names; the module list
      shows the matches (`"<model>"` is the root). The chosen module is kept when the
      filter hides it and comes back when the filter is cleared.
    - `"module"` (Dropdown): the module.
    - `"what"` (Dropdown): `output`, or an input/parameter/optimizer entry when recorded.
    - `"grad"` (ToggleButtons): forward value (`False`) or gradient (`True`).
    - `"step"`, `"call"` (Dropdowns): which step and which call of the module.
    - `"log2"` (ToggleButtons): linear values (`False`) or log2|x| (`True`).
    - `"bins"` (ToggleButtons): number of bins, one of `BIN_CHOICES` (8 to 256, doubling:
      each choice a click, where a slider over 1..256 jumps dozens of bins per pixel).

    Stashes recorded with `stats=[..., "exp_hist"]` or `stats=[...,
    tensor_tracker.stats.histogram()]` show their recorded bins (`log2` and `bins`, fixed
    by the recording, are then hidden). Statistics without a histogram (`stats=True`) can
    show none: the viewer says in one line how to record one, and shows no controls.

    Args:
        tracker: a `Tracker` or a list of `Stash`.

    Returns:
        An `ipywidgets.VBox` with `controls`, `figure`, `message`, `image` and `redraw()`
        (see the module docstring).

    Raises:
        TypeError: `tracker` is not a tracker or a list of stashes.

    Example:
        >>> with tensor_tracker.track(lm) as t:
        ...     lm(tokens).sum().backward()
        >>> v = widgets.histogram_viewer(t)
        >>> v.controls["filter"].value = "blocks.0"
        >>> v.controls["log2"].value = True
        >>> v.figure.axes[0].get_xlabel()
        'log2|value|'
    """
    w = ipywidgets_module()
    # One stash per module and direction for the options; a module's stashes are read
    # when it is chosen, so a long run's viewer opens in a moment.
    stashes = first_stashes(tracker, "tracker")
    if not stashes:
        return empty_viewer(w, EMPTY)
    usable = plottable(stashes)
    if not usable:
        return empty_viewer(
            w,
            "No stash holds a tensor or statistics (e.g. values of a custom stash_value); "
            "track with the default copy or stats=[..., tensor_tracker.stats.histogram()].",
        )
    if not any(_binnable(s) for s in usable):
        return empty_viewer(w, NO_HISTOGRAM, error=False)
    names = module_order(usable)
    quiet = Quiet()
    c: dict[str, Any] = {
        "filter": w.Text(
            value="",
            description="filter",
            placeholder="substring or regex",
            continuous_update=False,
        ),
        "module": w.Dropdown(options=module_options(names), description="module"),
        "what": w.Dropdown(description="value"),
        "grad": w.ToggleButtons(options=[("forward", False), ("gradient", True)], value=False),
        "step": w.Dropdown(description="step"),
        "call": w.Dropdown(description="call"),
        "log2": w.ToggleButtons(options=[("linear", False), ("log2", True)], value=False),
        "bins": w.ToggleButtons(options=BIN_CHOICES, value=64, description="bins"),
    }
    for key in ("grad", "log2"):
        c[key].style.button_width = "80px"
    c["bins"].style.button_width = "52px"  # "256" with the buttons' padding
    panel = Panel(w)
    of_module: dict[str, list[Stash]] = {}
    # The module the user chose last: a filter that hides it (or matches nothing) does not
    # forget it, so clearing the filter brings it back.
    chosen_module: list[str] = [names[0]]

    def candidates() -> list[Stash]:
        name = c["module"].value
        if name is None:
            return []
        if name not in of_module:
            found = select_from(tracker, "tracker", names=[name], kind=None)
            of_module[name] = plottable(found)
        return of_module[name]

    def refresh_choices() -> None:
        """Update the dependent dropdowns from the module down."""
        with quiet:
            own = candidates()
            # What the module has in the chosen direction (a Hugging Face model's own
            # output is a ModelOutput, with gradients but no forward tensor): offering the
            # rest would open on an error.
            grad = c["grad"].value
            whats = list(dict.fromkeys((s.kind, s.attr) for s in own if s.grad == grad))
            whats = whats or list(dict.fromkeys((s.kind, s.attr) for s in own))
            set_options(
                c["what"],
                [(k + (f" {a}" if a else ""), (k, a)) for k, a in whats],
                c["what"].value,
                ("output", ""),
            )
            kind, attr = c["what"].value or ("output", "")
            same = [
                s for s in own if s.kind == kind and s.attr == attr and s.grad == c["grad"].value
            ]
            set_options(c["step"], sorted({s.step for s in same}), c["step"].value)
            at_step = [s for s in same if s.step == c["step"].value]
            set_options(c["call"], sorted({s.call for s in at_step}), c["call"].value)

    def on_filter() -> None:
        with quiet:
            pattern = c["filter"].value
            matching = match_names(names, pattern)
            exact = "" if pattern == ROOT_LABEL else pattern
            if pattern and exact in matching:
                chosen_module[0] = exact
            keep = chosen_module[0]
            set_options(c["module"], module_options(matching), keep)
            if not matching:
                c["module"].value = None
        refresh_choices()
        redraw()

    def draw() -> Figure:
        pattern = c["filter"].value
        if c["module"].value is None:
            raise ArgumentValueError(
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
            raise ArgumentValueError(
                f"No {what} recorded for {display_name(c['module'].value)} ({kind}"
                + (f" {attr}" if attr else "")
                + ")"
                + (" — track with grad=True to record gradients." if grad else ".")
            )
        stash = chosen[0]
        recorded = isinstance(shown_value(stash), Stats)
        # Recorded bins are fixed: controls that could not change them are not shown.
        hidden = "none" if recorded else ""
        c["log2"].layout.display = c["bins"].layout.display = hidden
        return plot.histogram(
            stash,
            bins=c["bins"].value,
            log2=None if recorded else c["log2"].value,
            labels=[stash_label(stash, step=True, call=True)],
            stat=histogram_name([stash]),
        )

    def redraw() -> None:
        if not quiet.active:
            panel.show(draw)
            box.figure = panel.figure

    def on_choice() -> None:
        if not quiet.active:
            if c["module"].value is not None:
                chosen_module[0] = c["module"].value
            refresh_choices()
            redraw()

    c["filter"].observe(lambda _change: on_filter(), names="value")
    observe([c["module"], c["what"], c["grad"], c["step"]], on_choice)
    observe([c["call"], c["log2"], c["bins"]], redraw)
    rows = [
        w.HBox([c["filter"], c["module"], c["what"]]),
        w.HBox([c["grad"], c["step"], c["call"]]),
        w.HBox([c["log2"], c["bins"]]),
    ]
    box = make_viewer(w, c, rows, panel, redraw)
    refresh_choices()
    box.redraw()
    return box
