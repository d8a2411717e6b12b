"""The live view's logic: when a refresh reads the recording again (`Mark`,
`LiveRead.stale`), what a read shows (`read_result`, `read_failure`: the frame, the steps,
the status line, "incomplete" after a killed run), the statistics and module selections
the controls offer, and what is drawn with the readout under it (`live_shown`); see
`_views`. Reading the disk and the refresh thread are the shell's job
(`widgets._live`)."""

from __future__ import annotations

import html
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .._optional import require
from .._validate import check_bool, check_number, check_type
from ..errors import ArgumentTypeError, ArgumentValueError
from ..stats import Histogram
from ._views import Choice, Drawing, choose
from .depth import depth_layout, informative_role, leaf_names
from .frame import KEYS, to_frame
from .history import as_children
from .select import display_name, match_names

__all__ = [
    "ALL",
    "EXTREMES",
    "NAMES",
    "LiveRead",
    "LiveShown",
    "LiveState",
    "Mark",
    "extremes",
    "latest_values",
    "live_choices",
    "live_drawing",
    "live_frame",
    "live_path",
    "live_shown",
    "live_statistics",
    "read_failure",
    "read_result",
    "readout_html",
    "shown_modules",
]

# What the history opens on and may show: a role across the blocks, the extremes, all.
EXTREMES = "extremes"
ALL = "all"
NAMES = "names"
_ROLE = "role:"
# Lines drawn under "extremes": this many largest and as many smallest.
_EACH_END = 3
# Up to this many modules, "all" is the default (each is named in the legend).
_NAMED = 12
_DIRECTIONS = (("forward", False), ("gradient", True))


@dataclass(frozen=True)
class LiveState:
    """The live view's controls' values (see `widgets.live_view`)."""

    stat: str = "rms"
    show: str = ""
    grad: bool = True
    limits: bool = False


@dataclass(frozen=True)
class Mark:
    """The recording on disk as a read found it: the size of its journal (one line per
    committed step; -1 before the run creates it) and whether a writer held it."""

    size: int
    writing: bool


@dataclass(frozen=True)
class LiveRead:
    """What the view shows of the recording as last read.

    Attributes:
        mark: the recording's `Mark` when read (`None`: not read yet).
        status: the line above the figure (HTML): the steps read, or why there is nothing.
        steps: the recorded steps, ascending.
        frame: the frame drawn (`live_frame`; `None` until a read finds a step). A read
            that fails keeps the last one: a growing recording read mid-write is not lost.
        records: the records `frame` was made from (what the scale figure draws).
        spec: their statistics spec (`None` without statistics).
        complete: the writer had closed the recording (or paused it between `with` blocks).
        new: this read found steps to draw.
    """

    mark: Mark | None = None
    status: str = ""
    steps: tuple[int, ...] = ()
    frame: Any = None
    records: Any = None
    spec: Any = None
    complete: bool = False
    new: bool = False

    @property
    def watching(self) -> bool:
        """Whether a refresh asks if the writer still holds the recording: only while the
        last read saw it writing. A killed writer changes no file, only its lock; a lock
        that is free is not probed, since a probe could race a writer claiming it."""
        return self.mark is not None and self.mark.writing and not self.complete

    def stale(self, size: int, writing: bool | None) -> bool:
        """Whether to read the recording again, now that its journal has `size` bytes and
        its writer holds it (`writing`; `None`: not asked, see `watching`)."""
        if self.mark is None or size != self.mark.size:
            return True
        return writing is not None and writing != self.mark.writing


def read_failure(last: LiveRead, path: Path, mark: Mark, error: BaseException) -> LiveRead:
    """`last` after reading the recording at `path` raised `error` (not written yet, or
    read mid-write): what was drawn stays, the status says what the view waits for (as
    HTML: the message may quote a hostile recording's text, escaped)."""
    status = html.escape(f"waiting for {path} ({type(error).__name__}: {error})")
    return replace(last, mark=mark, new=False, status=status)


def read_result(
    last: LiveRead, path: Path, mark: Mark, records: Any, spec: Any, complete: bool, at: str
) -> LiveRead:
    """`last` after reading `records` (with statistics `spec`) from `path` at clock time
    `at`; `complete`: whether the writer closed the recording. One whose writer stopped
    without closing it (killed or crashed) shows its whole steps and says so. The status
    is HTML (the path escaped)."""
    steps = tuple(sorted(set(records.step_values)))
    if not steps:
        status = html.escape(f"{path}: no step recorded yet")
        return replace(last, mark=mark, steps=(), complete=complete, new=False, status=status)
    status = html.escape(
        f"{path.name}: steps {steps[0]}-{steps[-1]} ({len(steps)} recorded), read at {at}"
    )
    if not complete and not mark.writing:
        status += (
            "; incomplete recording: its writer stopped without closing it (killed or crashed)"
        )
    return LiveRead(mark, status, steps, live_frame(records), records, spec, complete, new=True)


def live_path(
    source: Any, figure: str, stat: str, grad: bool, interval: float, start: bool
) -> Path:
    """The directory `live_view`'s arguments name, after checking them all."""
    path = (
        getattr(source, "stream_path", None)
        if not isinstance(source, (str, os.PathLike))
        else source
    )
    if path is None:
        raise ArgumentTypeError(
            "live_view(source): pass the directory a run streams to, or a tracker made with "
            f"track(..., stream_to=...), got {type(source).__name__}"
        )
    if figure not in ("history", "scale"):
        raise ArgumentValueError(f'live_view(figure=...): "history" or "scale", got {figure!r}')
    check_type(stat, str, "live_view(stat=...)", "a statistic name (str)")
    check_bool(grad, "live_view(grad=...)")
    check_number(interval, "live_view(interval=...)", "seconds between reads", low=0, open_low=True)
    check_bool(start, "live_view(start=...)")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ArgumentValueError(
            f"live_view(source={str(path)!r}): a file, not a directory: pass the directory "
            "given to track(..., stream_to=...)"
        )
    if not start and not path.exists():
        # Without the refresh thread nothing would read it again: most likely a typo.
        raise ArgumentValueError(
            f"live_view(source={str(path)!r}): no such directory. Pass the directory given "
            "to track(..., stream_to=...), or start=True to wait for a run to create it"
        )
    return path


def live_frame(records: Any) -> Any:
    """The frame the live view reads: `to_frame(records)`, its op and tap records named as
    children of their module (`"0.attn.softmax#0"`, see `history.as_children`) so that
    each is a line of its own beside the module outputs."""
    return as_children(to_frame(records))


def live_statistics(frame: Any, spec: Any) -> list[str]:
    """The scalar statistics recorded: numeric columns that are neither keys nor a
    histogram's counts."""
    counts = {n for h in spec or () if isinstance(h, Histogram) for n in h.names}
    return [
        c
        for c in frame.columns
        if c not in KEYS and c not in counts and frame[c].dtype.kind in "fiub"
    ]


def _output_names(frame: Any) -> list[str]:
    return list(dict.fromkeys(frame.loc[frame["kind"] == "output", "name"].astype(str)))


def live_choices(
    frame: Any, spec: Any, state: LiveState, names: Any, figure: str, stat: str
) -> dict[str, Choice]:
    """What the controls offer for the recording read (`frame`, `spec`), keeping the
    values of `state` still offered; `stat` and `names` are `live_view`'s arguments.
    A control with nothing to choose is hidden; the scale figure has only `stat`."""
    stats = live_statistics(frame, spec)
    choices = {"stat": choose(stats, state.stat, stat, shown=len(stats) > 1)}
    if figure != "history":
        return choices
    directions = set(frame.loc[frame["kind"] == "output", "grad"].astype(bool))
    grad = next(iter(directions)) if len(directions) == 1 else state.grad
    choices["grad"] = Choice(_DIRECTIONS, grad, len(directions) > 1)
    outputs = frame[frame["kind"] == "output"]
    order = _output_names(frame)
    depth = depth_layout(leaf_names(order))
    types = dict(zip(outputs["name"].astype(str), outputs["type"].astype(str), strict=False))
    role = informative_role(depth, {n: t.rsplit(".", 1)[-1] for n, t in types.items()})
    options = [(f"{r} in every block", _ROLE + r) for r in depth.roles]
    options += [("largest and smallest", EXTREMES), ("every module", ALL)]
    default = (
        _ROLE + role
        if role is not None
        else (ALL if len(leaf_names(order)) <= _NAMED else EXTREMES)
    )
    if names is not None:
        options.insert(0, ("names=", NAMES))
        default = NAMES
    choices["show"] = choose(options, state.show, default, shown=len(options) > 1)
    return choices


def latest_values(frame: Any, stat: str, grad: bool, names: list[str]) -> dict[str, float]:
    """Each of `names`' output `stat` at the latest step that has it (mean over calls),
    finite values only."""
    np = require("numpy", "widgets")
    rows = frame[(frame["kind"] == "output") & (frame["grad"] == grad)]
    rows = rows[rows["name"].isin(names) & np.isfinite(rows[stat].to_numpy(dtype=float))]
    if rows.empty:
        return {}
    rows = rows[rows["step"] == rows["step"].max()]
    means = rows.groupby("name", sort=False)[stat].mean()
    return {str(n): float(v) for n, v in means.items()}


def extremes(values: dict[str, float], log: bool) -> list[str]:
    """The `_EACH_END` largest and smallest of `values` (by |value| on a log axis), the
    largest first."""
    ranked = sorted(values, key=lambda n: abs(values[n]) if log else values[n], reverse=True)
    if log:  # a zero has no log2: it is not the smallest magnitude drawn
        ranked = [n for n in ranked if values[n] != 0]
    if len(ranked) <= 2 * _EACH_END:
        return ranked
    return ranked[:_EACH_END] + ranked[-_EACH_END:]


def shown_modules(frame: Any, state: LiveState, names: Any) -> list[str]:
    """The modules the history draws for the `show` control's value (`names` is
    `live_view`'s argument)."""
    order = _output_names(frame)
    if state.show == NAMES:  # plot.history selects names= itself; these are for the readout
        return list(names) if not isinstance(names, str) else match_names(order, names)
    if state.show.startswith(_ROLE):
        return depth_layout(leaf_names(order)).members(state.show[len(_ROLE) :])
    if state.show == ALL:
        return order
    values = latest_values(frame, state.stat, state.grad, leaf_names(order))
    return extremes(values, log=True) or order[:_NAMED]


def readout_html(
    values: dict[str, float], shown: list[str], stat: str, grad: bool, step: Any
) -> str:
    """An HTML line per module drawn: which line it is and its latest value."""
    if not shown:
        return ""
    items = sorted(shown, key=lambda n: abs(values[n]) if n in values else -1.0, reverse=True)
    # One number format for the table: scientific for all when any value needs it.
    sizes = [abs(v) for v in values.values() if v]
    spec = ".3e" if any(v < 1e-3 or v >= 1e5 for v in sizes) else ".4g"
    cells = "".join(
        f"<tr><td>{html.escape(display_name(n))}</td><td style='text-align:right'>"
        f"{values[n]:{spec}}</td></tr>"
        if n in values
        else f"<tr><td>{html.escape(display_name(n))}</td><td>-</td></tr>"
        for n in items
    )
    what = "gradient" if grad else "output"
    return (
        "<style>.tt-live-readout td { padding: 1px 16px 1px 0; line-height: 1.3 }</style>"
        f"<div class='tt-live-readout'><b>{html.escape(stat)} of each {what} at step {step}"
        f"</b> (largest first)<table>{cells}</table></div>"
    )


def live_drawing(
    frame: Any, records: Any, state: LiveState, figure: str, shown: list[str], names: Any
) -> Drawing:
    """The figure of the recording read: the scale plot at the latest step (the `limits`
    control hidden: it draws them always), or the history of the `shown` modules (of
    `names` under the `names` choice)."""
    if figure != "history":
        return Drawing("scale_plot", records, {"stat": state.stat}, hidden=frozenset({"limits"}))
    options: dict[str, Any] = {
        "stat": state.stat,
        "grad": state.grad,
        "names": names if state.show == NAMES else shown,
    }
    if not state.limits:
        options["formats"] = ()
    # Room on the right for the legend's names (36 characters at most, see short_label).
    return Drawing("history", frame, options, margins={"right": 3.1})


@dataclass(frozen=True)
class LiveShown:
    """What the view shows for a read and the controls' values: the `drawing`, the
    modules it draws (`shown`; empty for the scale figure) and the readout table under it
    (HTML; empty for the scale figure)."""

    drawing: Drawing
    shown: list[str]
    readout: str


def live_shown(read: LiveRead, state: LiveState, figure: str, names: Any) -> LiveShown:
    """What `live_view` draws of `read` (which has a frame) under the controls' `state`;
    `figure` and `names` are `live_view`'s arguments."""
    frame = read.frame
    if figure != "history":
        return LiveShown(live_drawing(frame, read.records, state, figure, [], names), [], "")
    shown = shown_modules(frame, state, names)
    latest = latest_values(frame, state.stat, state.grad, shown)
    readout = readout_html(latest, shown, state.stat, state.grad, frame["step"].max())
    return LiveShown(live_drawing(frame, read.records, state, figure, shown, names), shown, readout)
