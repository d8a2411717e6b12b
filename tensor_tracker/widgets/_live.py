"""`live_view`: a figure that redraws itself as a streamed run writes new steps."""

from __future__ import annotations

import html
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import plot
from .._optional import require
from .._validate import check_bool, check_number, check_type
from ..data.depth import depth_layout, informative_role, leaf_names
from ..data.frame import KEYS, to_frame
from ..data.select import display_name, match_names
from ..errors import ArgumentTypeError, ArgumentValueError
from ..persist.recording import read_recording, spec_of
from ..persist.recording_codec import JOURNAL
from ..plot._figure import DEFAULT_FORMATS, fixed_margins
from ..stats import Histogram
from ._base import Panel, ipywidgets_module, make_viewer, set_options

if TYPE_CHECKING:
    import ipywidgets

__all__ = ["live_view"]


# What the history opens on and may show: a role across the blocks, the extremes, all.
EXTREMES = "extremes"
ALL = "all"
NAMES = "names"
_ROLE = "role:"
# Lines drawn under "extremes": this many largest and as many smallest.
_EACH_END = 3
# Up to this many modules, "all" is the default (each is named in the legend).
_NAMED = 12


def _statistics(frame: Any, spec: Any) -> list[str]:
    """The scalar statistics recorded: numeric columns that are neither keys nor a
    histogram's counts."""
    counts = {n for h in spec or () if isinstance(h, Histogram) for n in h.names}
    return [
        c
        for c in frame.columns
        if c not in KEYS and c not in counts and frame[c].dtype.kind in "fiub"
    ]


def _latest(frame: Any, stat: str, grad: bool, names: list[str]) -> dict[str, float]:
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


def _extremes(values: dict[str, float], log: bool) -> list[str]:
    """The `_EACH_END` largest and smallest of `values` (by |value| on a log axis), the
    largest first."""
    ranked = sorted(values, key=lambda n: abs(values[n]) if log else values[n], reverse=True)
    if log:  # a zero has no log2: it is not the smallest magnitude drawn
        ranked = [n for n in ranked if values[n] != 0]
    if len(ranked) <= 2 * _EACH_END:
        return ranked
    return ranked[:_EACH_END] + ranked[-_EACH_END:]


def _readout(values: dict[str, float], shown: list[str], stat: str, grad: bool, step: Any) -> str:
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


def live_view(
    source: Any,
    *,
    figure: str = "history",
    stat: str = "rms",
    grad: bool = True,
    names: Any = None,
    interval: float = 2.0,
    start: bool = True,
) -> ipywidgets.VBox:
    """A figure of a run that is still going, redrawn as new steps arrive on disk: leave it
    as the last line of a cell while the training loop runs in another cell, a thread or
    another process.

    It reads the recording that `track(..., stream_to=path)` writes (memory-safe: the
    training loop's tracker is never touched from this thread) every `interval` seconds and
    redraws when the recording has grown.

    The history draws a few modules, each named in the legend, so that each line can be
    told apart: for a model of repeated blocks one role across the blocks (the first
    learned projection, e.g. `attention.self.query` in every layer of a BERT), else every
    module up to 12, else the extremes: the 3 leaf modules with the largest and the 3 with
    the smallest value at the latest step. A table under the figure reads out each line's
    module and latest value. The y axis fits the data; the number-format limits are a
    toggle.

    Controls (keys of `view.controls`; a control with nothing to choose is hidden):

    - `"stat"` (Dropdown): the statistics recorded.
    - `"show"` (Dropdown, history): `"extremes"`, `"all"`, `"role:<role>"` for each role
      inside the blocks, and `"names"` when `names=` is given.
    - `"grad"` (ToggleButtons, history): gradients or forward values, when both were
      recorded.
    - `"limits"` (Checkbox, history, off): draw the fp16/bf16/fp8 limit lines.

    Args:
        source: the recording's directory, or the streaming tracker itself.
        figure: `"history"` (the statistic over steps, one line per module: `plot.history`)
            or `"scale"` (every module at the latest step: `plot.scale_plot`).
        stat: the statistic drawn first.
        grad: `history` of gradients (`True`, when recorded) or forward values.
        names: `history`'s module selection (a regex or a list of names); default: chosen
            as said above.
        interval: seconds between reads.
        start: start refreshing in a background thread now (else call `refresh()` or
            `start()` yourself).

    Returns:
        An `ipywidgets.VBox` with `controls`, `figure`, `message`, `image`, `readout` (the
        table under the figure), `shown` (the modules drawn), `refresh()` (read and redraw
        now; returns whether anything new was drawn), `start()`, `stop()`, and `steps` (the
        recorded steps on display).

    Raises:
        TypeError: `source` is neither a path nor a streaming tracker.
        ValueError: an unknown `figure`; `source` is a file, or (with `start=False`) a
            directory that does not exist. With `start=True` the view waits for a run to
            create it.

    Example:
        >>> view = widgets.live_view("runs/today")  # doctest: +SKIP
        >>> view.controls["show"].value = "extremes"  # doctest: +SKIP
    """
    w = ipywidgets_module()
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
    panel = Panel(w)
    status = w.HTML(value="")
    readout = w.HTML(value="")
    history = figure == "history"
    c: dict[str, Any] = {
        "stat": w.Dropdown(options=[stat], value=stat, description="statistic"),
        "show": w.Dropdown(options=[("(reading)", "")], value="", description="show"),
        "grad": w.ToggleButtons(options=[("forward", False), ("gradient", True)], value=grad),
        "limits": w.Checkbox(value=False, description="format limits", indent=False),
    }
    for control in c.values():
        control.layout.display = "none"  # shown once the recording says they can work
    state: dict[str, Any] = {
        "size": None,  # the first refresh reads (or says what it waits for)
        "thread": None,
        "stop": threading.Event(),
        "frame": None,
        "records": None,
        "busy": False,
    }
    lock = threading.RLock()  # the refresh thread and the controls draw one at a time

    def choose(frame: Any) -> list[str]:
        """The modules the history draws, for the "show" control's value."""
        shown = c["show"].value
        outputs = frame[frame["kind"] == "output"]
        order = list(dict.fromkeys(outputs["name"].astype(str)))
        if shown == NAMES:  # plot.history selects names= itself; these are for the readout
            return list(names) if not isinstance(names, str) else match_names(order, names)
        if shown.startswith(_ROLE):
            role = shown[len(_ROLE) :]
            depth = depth_layout(leaf_names(order))
            return [n for n, (_, r) in depth.place.items() if r == role]
        if shown == ALL:
            return order
        values = _latest(frame, c["stat"].value, c["grad"].value, leaf_names(order))
        return _extremes(values, log=True) or order[:_NAMED]

    def draw() -> Any:
        frame, records = state["frame"], state["records"]
        if not history:
            return plot.scale_plot(records, stat=c["stat"].value)
        shown = choose(frame)
        selection = names if c["show"].value == NAMES else shown
        view.shown = shown
        values = _latest(frame, c["stat"].value, c["grad"].value, shown)
        readout.value = _readout(
            values, shown, c["stat"].value, c["grad"].value, frame["step"].max()
        )
        formats = DEFAULT_FORMATS if c["limits"].value else ()
        # Room on the right for the legend's names (36 characters at most, see short_label).
        with fixed_margins(right=3.1):
            return plot.history(
                frame, stat=c["stat"].value, grad=c["grad"].value, names=selection, formats=formats
            )

    def redraw() -> None:
        with lock:
            if state["busy"] or state["frame"] is None:
                return
            panel.show(draw)
            view.figure = panel.figure

    def offer(frame: Any, spec: Any) -> None:
        """Set the controls' options from what the recording holds."""
        state["busy"] = True  # one redraw after, not one per control changed
        try:
            stats = _statistics(frame, spec)
            set_options(c["stat"], stats, c["stat"].value, default=stat)
            c["stat"].layout.display = "" if len(stats) > 1 else "none"
            if not history:
                return
            directions = set(frame.loc[frame["kind"] == "output", "grad"].astype(bool))
            if len(directions) == 1:
                c["grad"].value = directions.pop()
            c["grad"].layout.display = "" if len(directions) > 1 else "none"
            c["limits"].layout.display = ""
            outputs = frame[frame["kind"] == "output"]
            order = list(dict.fromkeys(outputs["name"].astype(str)))
            depth = depth_layout(leaf_names(order))
            types = dict(
                zip(outputs["name"].astype(str), outputs["type"].astype(str), strict=False)
            )
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
            first = c["show"].value == ""
            set_options(c["show"], options, c["show"].value, default=default)
            if first:
                c["show"].value = default
            c["show"].layout.display = "" if len(options) > 1 else "none"
        finally:
            state["busy"] = False

    def refresh() -> bool:
        journal = path / JOURNAL  # grows by one line per committed step
        size = journal.stat().st_size if journal.exists() else -1
        if size == state["size"]:
            return False
        state["size"] = size
        try:
            records = read_recording(path).columns
        except Exception as error:  # e.g. not written yet: say so, try again later
            status.value = f"waiting for {path} ({type(error).__name__}: {error})"
            return False
        steps = sorted(set(records.step_values))
        view.steps = steps
        if not steps:
            status.value = f"{path}: no step recorded yet"
            return False
        with lock:
            frame = to_frame(records)
            state["frame"], state["records"] = frame, records
            offer(frame, spec_of(records))
            redraw()
        status.value = (
            f"{path.name}: steps {steps[0]}-{steps[-1]} ({len(steps)} recorded), "
            f"read at {time.strftime('%H:%M:%S')}"
        )
        return True

    def loop() -> None:
        while not state["stop"].wait(interval):
            refresh()

    def start_refreshing() -> None:
        if state["thread"] is None or not state["thread"].is_alive():
            state["stop"].clear()
            state["thread"] = threading.Thread(
                target=loop, name="tensor_tracker live_view", daemon=True
            )
            state["thread"].start()

    def stop() -> None:
        state["stop"].set()
        thread = state["thread"]
        if thread is not None:
            thread.join(timeout=max(interval, 1.0) * 2 + 5)

    for control in c.values():
        control.observe(lambda _change: redraw(), names="value")
    rows = [w.HBox([c["stat"], c["show"]]), w.HBox([c["grad"], c["limits"]])]
    view = make_viewer(w, c, [status, *rows], panel, redraw)
    view.children = (*view.children, readout)
    view.steps = []
    view.shown = []
    view.refresh = refresh
    view.start = start_refreshing
    view.stop = stop
    view.status = status
    view.readout = readout
    refresh()
    if start:
        start_refreshing()
    return view
