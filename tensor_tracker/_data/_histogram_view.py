"""The histogram viewer's logic: from its controls' values and the recording to the
modules, values, steps and calls it offers and the histogram it draws (see `_views`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._core.records import Stash
from ..errors import ArgumentValueError
from ..stats import Stats
from ._views import (
    EMPTY,
    Choice,
    Drawing,
    Note,
    choose,
    histogram_name,
    module_options,
    plottable,
)
from .exponents import RECORD_HINT
from .select import (
    ROOT_LABEL,
    display_name,
    first_stashes,
    match_names,
    module_order,
    select_from,
    shown_value,
    stash_label,
)

__all__ = [
    "BIN_CHOICES",
    "NO_HISTOGRAM",
    "HistogramSource",
    "HistogramState",
    "filter_modules",
    "histogram_choices",
    "histogram_drawing",
    "histogram_source",
]

NO_HISTOGRAM = (
    "This run recorded statistics without a histogram; "
    + RECORD_HINT
    + " (or track(model) without stats= to keep tensors)."
)
"""What the viewer says, in place of its controls, for statistics without a histogram."""

NO_VALUES = (
    "No stash holds a tensor or statistics (e.g. values of a custom stash_value); "
    "track with the default copy or stats=[..., tensor_tracker.stats.histogram()]."
)

BIN_CHOICES = (8, 16, 32, 64, 128, 256)
"""The bin counts the histogram viewer offers."""


@dataclass(frozen=True)
class HistogramState:
    """The histogram viewer's controls' values (see `widgets.histogram_viewer`)."""

    filter: str = ""
    module: str | None = None
    what: tuple[str, str] | None = None  # (kind, attribute)
    grad: bool = False
    step: int | None = None
    call: int | None = None
    log2: bool = False
    bins: int = 64


class HistogramSource:
    """What the viewer reads: the modules it offers, from one stash per module and
    direction, and each module's stashes, read when it is first chosen (so a long run's
    viewer opens in a moment)."""

    def __init__(self, tracker: Any, names: list[str]) -> None:
        self.tracker = tracker
        self.names = names
        self._of_module: dict[str, list[Stash]] = {}

    def stashes(self, name: str | None) -> list[Stash]:
        """The stashes of module `name` that a histogram can show (none for `None`)."""
        if name is None:
            return []
        if name not in self._of_module:
            found = select_from(self.tracker, "tracker", names=[name], kind=None)
            self._of_module[name] = plottable(found)
        return self._of_module[name]


def _binnable(stash: Stash) -> bool:
    value = shown_value(stash)
    return not isinstance(value, Stats) or bool(value.layout.histograms)


def histogram_source(tracker: Any) -> HistogramSource | Note:
    """The viewer's data, or why it has nothing to show."""
    stashes = first_stashes(tracker, "tracker")
    if not stashes:
        return EMPTY
    usable = plottable(stashes)
    if not usable:
        return Note(NO_VALUES)
    if not any(_binnable(s) for s in usable):
        return Note(NO_HISTOGRAM, error=False)
    return HistogramSource(tracker, module_order(usable))


def filter_modules(names: Sequence[str], pattern: str, chosen: str) -> tuple[Choice, str]:
    """The module choice under the filter `pattern`, and the module the user chose last
    (`chosen`, or the module named exactly by `pattern`): a filter that hides it does not
    forget it, so clearing the filter brings it back."""
    matching = match_names(names, pattern)
    exact = "" if pattern == ROOT_LABEL else pattern
    if pattern and exact in matching:
        chosen = exact
    return choose(module_options(matching), chosen), chosen


def histogram_choices(stashes: Sequence[Stash], state: HistogramState) -> dict[str, Choice]:
    """What the `what`, `step` and `call` controls offer for a module's `stashes`, each
    depending on the one before, keeping the values of `state` still offered."""
    # What the module has in the chosen direction (a Hugging Face model's own output is a
    # ModelOutput, with gradients but no forward tensor): offering the rest would open on
    # an error.
    whats = list(dict.fromkeys((s.kind, s.attr) for s in stashes if s.grad == state.grad))
    whats = whats or list(dict.fromkeys((s.kind, s.attr) for s in stashes))
    what = choose(
        [(k + (f" {a}" if a else ""), (k, a)) for k, a in whats], state.what, ("output", "")
    )
    kind, attr = what.value or ("output", "")
    same = [s for s in stashes if s.kind == kind and s.attr == attr and s.grad == state.grad]
    step = choose(sorted({s.step for s in same}), state.step)
    call = choose(sorted({s.call for s in same if s.step == step.value}), state.call)
    return {"what": what, "step": step, "call": call}


def histogram_drawing(source: HistogramSource, state: HistogramState) -> Drawing:
    """The histogram of the stash chosen by `state`.

    Raises:
        ArgumentValueError: no module matches the filter, or the module has no such stash
            (the message says what to do).
    """
    if state.module is None:
        raise ArgumentValueError(
            f"No module matches the filter {state.filter!r}. Clear it, or try part of one "
            "of: " + ", ".join(display_name(n) for n in source.names[:10])
        )
    kind, attr = state.what or ("output", "")
    chosen = [
        s
        for s in source.stashes(state.module)
        if (s.kind, s.attr, s.grad, s.step, s.call)
        == (kind, attr, state.grad, state.step, state.call)
    ]
    if not chosen:
        what = "gradient" if state.grad else "forward value"
        raise ArgumentValueError(
            f"No {what} recorded for {display_name(state.module)} ({kind}"
            + (f" {attr}" if attr else "")
            + ")"
            + (" — track with grad=True to record gradients." if state.grad else ".")
        )
    stash = chosen[0]
    # Recorded bins are fixed: controls that could not change them are not shown.
    recorded = isinstance(shown_value(stash), Stats)
    return Drawing(
        "histogram",
        stash,
        {
            "bins": state.bins,
            "log2": None if recorded else state.log2,
            "labels": [stash_label(stash, step=True, call=True)],
            "stat": histogram_name([stash]),
        },
        hidden=frozenset({"log2", "bins"}) if recorded else frozenset(),
    )
