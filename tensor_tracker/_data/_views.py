"""What the notebook viewers' logic shares: a figure to draw, a control's options, and the
choices every viewer offers (modules, statistics, histograms).

A viewer is a pure function from its controls' values and the recorded data to a
`Drawing` (which figure of `tensor_tracker.plot`, with which arguments) and the `Choice`
each control offers; `tensor_tracker.widgets` only builds the controls, observes them and
draws. So this logic imports neither ipywidgets nor matplotlib, and is tested on plain
data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from .._core.records import Stash
from ..stats import NAMES, Stats
from .select import display_name, shown_value

__all__ = [
    "EMPTY",
    "Choice",
    "Drawing",
    "Note",
    "choose",
    "default_stat",
    "histogram_name",
    "module_options",
    "plottable",
    "stat_options",
]


@dataclass(frozen=True)
class Drawing:
    """What a viewer draws: `tensor_tracker.plot.<figure>(source, **options)`.

    Attributes:
        figure: the name of a figure function of `tensor_tracker.plot`.
        source: its first argument (a tracker, frame, stash...).
        options: its keyword arguments.
        margins: `None` for the figure's own layout, else the keyword arguments of fixed
            margins (a viewer redrawn on every click skips the slow constrained layout).
        hidden: the controls that cannot change this figure (not shown while it is).

    Example:
        >>> Drawing("scale_plot", tracker, {"stat": "rms"}, margins={})  # doctest: +SKIP
    """

    figure: str
    source: Any
    options: Mapping[str, Any] = field(default_factory=dict)
    margins: Mapping[str, float] | None = None
    hidden: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Choice:
    """What a control offers: its `options` (values, or `(label, value)` pairs), the
    `value` it shows (`None` when there is no option), and whether it is `shown` (a control
    with nothing to choose is hidden)."""

    options: tuple[Any, ...]
    value: Any
    shown: bool = True


@dataclass(frozen=True)
class Note:
    """Why a viewer has nothing to show, said in place of its figure: `text`, as an error
    unless `error` is false (what to record, said up front); HTML when `html` is true."""

    text: str
    error: bool = True
    html: bool = False


EMPTY = Note(
    "The tracker holds no stashes yet. Record something first, e.g. "
    "<code>with tensor_tracker.track(model) as t: model(x).sum().backward()</code>, "
    "then build the viewer again.",
    error=False,
    html=True,
)
"""What a viewer of an empty tracker says."""


def choose(options: Iterable[Any], keep: Any, default: Any = None, shown: bool = True) -> Choice:
    """The `Choice` of `options` that keeps the value `keep` when still offered, else takes
    `default` when offered, else the first option.

    Example:
        >>> choose([1, 2, 3], keep=5, default=3).value
        3
    """
    options = tuple(options)
    values = [o[1] if isinstance(o, tuple) else o for o in options]
    for value in (keep, default):
        if value is not None and value in values:
            return Choice(options, value, shown)
    return Choice(options, values[0] if values else None, shown)


def module_options(names: Sequence[str]) -> list[tuple[str, str]]:
    """Options for module names: (label shown, name)."""
    return [(display_name(n), n) for n in names]


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
