"""`live_view`: a figure that redraws itself as a streamed run writes new steps."""

from __future__ import annotations

import threading
import time
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._data._live_view import (
    LiveRead,
    LiveState,
    Mark,
    live_choices,
    live_path,
    live_shown,
    read_failure,
    read_result,
)
from .._persist.integrity import writer_alive
from .._persist.recording import read_recording, spec_of
from .._persist.recording_codec import JOURNAL
from ._base import Panel, Quiet, ipywidgets_module, make_viewer, observe, render, set_options

if TYPE_CHECKING:
    import ipywidgets
    from matplotlib.figure import Figure

__all__ = ["live_view"]


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
        An `ipywidgets.VBox` with `controls`, `figure`, `message`, `image`, `status` (the
        line above: the steps read, what it waits for, or that the run's writer stopped
        without closing it), `readout` (the table under the figure), `shown` (the modules
        drawn), `refresh()` (read and redraw now if the recording changed; returns whether
        anything new was drawn), `start()`, `stop()`, and `steps` (the recorded steps on
        display).

    Raises:
        TypeError: `source` is neither a path nor a streaming tracker.
        ValueError: an unknown `figure`; `source` is a file, or (with `start=False`) a
            directory that does not exist. With `start=True` the view waits for a run to
            create it.

    Example:
        >>> import tempfile, pathlib
        >>> folder = pathlib.Path(tempfile.mkdtemp()) / "run"
        >>> with tensor_tracker.track(model, stats=True, stream_to=folder) as t:
        ...     for batch in loader:
        ...         model(batch).sum().backward(); t.step()
        >>> view = widgets.live_view(folder, start=False)  # start=True: redraw as it grows
        >>> view.shown, view.steps
        (['0', '1', '2'], [0, 1, 2])
        >>> view.controls["show"].value = "extremes"  # doctest: +SKIP
    """
    path = live_path(source, figure, stat, grad, interval, start)
    view = _LiveView(ipywidgets_module(), path, figure, stat, grad, names, interval).box
    view.refresh()
    if start:
        view.start()
    return view


class _LiveView:
    """The widgets of one `live_view`, the recording as last read (`read`), and the refresh
    thread. What to read, show and offer is decided in `_data._live_view`; this class reads
    the disk, sets the controls and draws. The refresh thread and the controls' callbacks
    draw one at a time (`lock`)."""

    def __init__(
        self,
        w: Any,
        path: Path,
        figure: str,
        stat: str,
        grad: bool,
        names: Any,
        interval: float,
    ) -> None:
        self.path, self.figure, self.stat, self.names = path, figure, stat, names
        self.interval = interval
        self.read = LiveRead()
        self.lock = threading.RLock()
        self.quiet = Quiet()  # one redraw after the controls are offered, not one per control
        self.halt = threading.Event()
        self.thread: threading.Thread | None = None
        self.panel = Panel(w)
        self.status = w.HTML(value="")
        self.readout = w.HTML(value="")
        self.controls: dict[str, Any] = {
            "stat": w.Dropdown(options=[stat], value=stat, description="statistic"),
            "show": w.Dropdown(options=[("(reading)", "")], value="", description="show"),
            "grad": w.ToggleButtons(options=[("forward", False), ("gradient", True)], value=grad),
            "limits": w.Checkbox(value=False, description="format limits", indent=False),
        }
        c = self.controls
        for control in c.values():
            control.layout.display = "none"  # shown once the recording says they can work
        observe(list(c.values()), self.redraw)
        rows = [w.HBox([c["stat"], c["show"]]), w.HBox([c["grad"], c["limits"]])]
        box = make_viewer(w, c, [self.status, *rows], self.panel, self.redraw)
        box.children = (*box.children, self.readout)
        box.steps, box.shown = [], []
        box.refresh, box.start, box.stop = self.refresh, self.start, self.stop
        box.status, box.readout = self.status, self.readout
        self.box = box

    def state(self) -> LiveState:
        return LiveState(**{f.name: self.controls[f.name].value for f in fields(LiveState)})

    def draw(self) -> Figure:
        shown = live_shown(self.read, self.state(), self.figure, self.names)
        if self.figure == "history":
            self.box.shown = shown.shown
            self.readout.value = shown.readout
        limits = self.controls["limits"].layout
        limits.display = "none" if "limits" in shown.drawing.hidden else ""
        return render(shown.drawing)

    def redraw(self) -> None:
        with self.lock:
            if self.quiet.active or self.read.frame is None:
                return
            self.panel.show(self.draw)
            self.box.figure = self.panel.figure

    def refresh(self) -> bool:
        """Read the recording again if it changed on disk, and redraw; whether it drew."""
        journal = self.path / JOURNAL
        size = journal.stat().st_size if journal.exists() else -1
        writing = writer_alive(self.path) if self.read.watching else None
        if not self.read.stale(size, writing):
            return False
        mark = Mark(size, writer_alive(self.path) if writing is None else writing)
        try:
            recording = read_recording(self.path)
        except Exception as error:  # e.g. not written yet: say so, try again when it changes
            read = read_failure(self.read, self.path, mark, error)
        else:
            columns = recording.columns
            at = time.strftime("%H:%M:%S")
            read = read_result(
                self.read, self.path, mark, columns, spec_of(columns), recording.complete, at
            )
        with self.lock:
            self.read = read
            self.box.steps = list(read.steps)
            if read.new:
                self.offer()
                self.redraw()
        self.status.value = read.status
        return read.new

    def offer(self) -> None:
        """Set the controls' options from what the recording read holds."""
        with self.quiet:
            choices = live_choices(
                self.read.frame, self.read.spec, self.state(), self.names, self.figure, self.stat
            )
            for key, choice in choices.items():
                set_options(self.controls[key], choice)

    def follow(self) -> None:
        while not self.halt.wait(self.interval):
            self.refresh()

    def start(self) -> None:
        """Refresh every `interval` seconds in a background thread (one at a time)."""
        if self.thread is None or not self.thread.is_alive():
            self.halt.clear()
            self.thread = threading.Thread(
                target=self.follow, name="tensor_tracker live_view", daemon=True
            )
            self.thread.start()

    def stop(self) -> None:
        """Stop the background thread (waits for a refresh under way to end)."""
        self.halt.set()
        if self.thread is not None:
            self.thread.join(timeout=max(self.interval, 1.0) * 2 + 5)
