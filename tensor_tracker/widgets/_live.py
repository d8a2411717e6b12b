"""`live_view`: a figure that redraws itself as a streamed run writes new steps."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import plot
from .._validate import check_bool, check_number, check_type
from ..data.frame import to_frame
from ..errors import ArgumentTypeError, ArgumentValueError
from ..persist.recording import read_recording
from ..persist.recording_codec import JOURNAL
from ._base import Panel, ipywidgets_module, make_viewer

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

    Args:
        source: the recording's directory, or the streaming tracker itself.
        figure: `"history"` (the statistic over steps, one line per module: `plot.history`)
            or `"scale"` (every module at the latest step: `plot.scale_plot`).
        stat: the statistic drawn.
        grad: `history` of gradients (`True`) or forward values.
        names: `history`'s module selection (a regex or a list of names).
        interval: seconds between reads.
        start: start refreshing in a background thread now (else call `refresh()` or
            `start()` yourself).

    Returns:
        An `ipywidgets.VBox` with `figure`, `message`, `image`, `refresh()` (read and
        redraw now; returns whether anything new was drawn), `start()`, `stop()`, and
        `steps` (the recorded steps on display).

    Raises:
        TypeError: `source` is neither a path nor a streaming tracker.
        ValueError: an unknown `figure`.

    Example:
        >>> view = widgets.live_view("runs/today")  # doctest: +SKIP
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
    panel = Panel(w)
    status = w.HTML(value="")
    state: dict[str, Any] = {"size": -1, "thread": None, "stop": threading.Event()}

    def draw(records: Any) -> Any:
        if figure == "history":
            return plot.history(to_frame(records), stat=stat, grad=grad, names=names)
        return plot.scale_plot(records, stat=stat)

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
        panel.show(lambda: draw(records))
        view.figure = panel.figure
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

    view = make_viewer(w, {}, [status], panel, lambda: None)
    view.steps = []
    view.refresh = refresh
    view.start = start_refreshing
    view.stop = stop
    view.status = status
    refresh()
    if start:
        start_refreshing()
    return view
