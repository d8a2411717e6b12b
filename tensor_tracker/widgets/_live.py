"""`live_view`: a figure that redraws itself as a streamed run writes new steps."""

from __future__ import annotations

import threading
import time
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from .._data._live_view import (
    LiveState,
    latest_values,
    live_choices,
    live_drawing,
    live_frame,
    live_path,
    readout_html,
    shown_modules,
)
from .._persist.recording import read_recording, spec_of
from .._persist.recording_codec import JOURNAL
from ._base import Panel, ipywidgets_module, make_viewer, observe, render, set_options

if TYPE_CHECKING:
    import ipywidgets

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
    w = ipywidgets_module()
    path = live_path(source, figure, stat, grad, interval, start)
    panel = Panel(w)
    status = w.HTML(value="")
    readout = w.HTML(value="")
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

    def values() -> LiveState:
        return LiveState(**{f.name: c[f.name].value for f in fields(LiveState)})

    def draw() -> Any:
        frame, now = state["frame"], values()
        if figure == "history":
            view.shown = shown_modules(frame, now, names)
            latest = latest_values(frame, now.stat, now.grad, view.shown)
            step = frame["step"].max()
            readout.value = readout_html(latest, view.shown, now.stat, now.grad, step)
        return render(live_drawing(frame, state["records"], now, figure, view.shown, names))

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
            for key, choice in live_choices(frame, spec, values(), names, figure, stat).items():
                set_options(c[key], choice)
            c["limits"].layout.display = "" if figure == "history" else "none"
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
            frame = live_frame(records)
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

    observe(list(c.values()), redraw)
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
