"""`graph_view`: the module graph, interactive, inside a notebook output."""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

from .._files import write_file
from .._probe.graph import ModuleGraph
from .._validate import check_int, check_path, check_type
from ..errors import ArgumentValueError
from ._report import page

__all__ = ["GraphView", "graph_view"]

# The fitted frame's height: at most this (a taller graph scrolls inside), and the page
# around the graph's drawing, added to its layers' height.
_FIT_MAX = 900
_CHROME = 170


def fitted_height(graph: ModuleGraph) -> int:
    """The frame's height for the model's level of `graph` as the page draws it: its
    layout's height, the page around it, within 300 and `_FIT_MAX`."""
    drawn = graph.level()["layout"].height
    return min(max(int(drawn) + _CHROME, 300), _FIT_MAX)


class GraphView:
    """The module graph with its interactions, shown in a notebook cell (see `graph_view`).

    Attributes:
        html: the page itself: one self-contained HTML document (scripts, styles and data
            inside; it loads nothing).
        height: the height of the frame in the notebook, in pixels.
        fit: whether the frame follows the height of the graph drawn in it (`graph_view`'s
            default) rather than keeping `height`.

    Example:
        >>> view = tensor_tracker.graph_view(tensor_tracker.module_graph(model, x))
        >>> view.height, view.html.startswith("<!doctype html>")   # fitted: 5 layers and the page
        (444, True)
        >>> import tempfile
        >>> view.save(Path(tempfile.mkdtemp()) / "graph.html").name   # opens in a browser
        'graph.html'
    """

    def __init__(self, page_html: str, height: int, fit: bool = False) -> None:
        self.html = page_html
        self.height = height
        self.fit = fit

    def _repr_html_(self) -> str:
        # A frame holds the page: its script runs in any front end that shows HTML outputs
        # (JupyterLab, Notebook 7, VS Code, a notebook converted to HTML), with no kernel,
        # no widget extension, and nothing shared with the notebook's own page. Sandboxed:
        # scripts only, no access to the notebook.
        frame = (
            f'<iframe class="tensor-tracker-graph" sandbox="allow-scripts" '
            f'style="width: 100%; height: {self.height}px; border: 1px solid #ddd" '
            f'srcdoc="{html.escape(self.html, quote=True)}"></iframe>'
        )
        if not self.fit:
            return frame
        # Fitted: the page says how tall its drawing is (it knows once laid out, and again
        # at each level opened); where the front end runs an output's scripts, the frame
        # takes that height, up to _FIT_MAX. The page reads nothing from the notebook.
        return frame + (
            "<script>(() => { const f = document.currentScript.previousElementSibling;"
            ' addEventListener("message", (e) => { const h = e.data && e.data.tensorTrackerHeight;'
            " if (e.source === f.contentWindow && Number.isFinite(h))"
            f' f.style.height = Math.round(Math.min(Math.max(h, 200), {_FIT_MAX})) + "px"; }});'
            " })();</script>"
        )

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the view as a standalone HTML file (opens from disk, no server, no network);
        returns the path."""
        path = Path(check_path(path, "GraphView.save(path)", "an HTML file path"))
        write_file(path, self.html.encode("utf-8", "backslashreplace"), "GraphView.save(path)")
        return path


def graph_view(
    graph: ModuleGraph,
    recording: Any | None = None,
    *,
    height: int | None = None,
    title: str = "module graph",
) -> GraphView:
    """The module graph as an interactive view in the notebook: click "+" on a node to open
    the module (a breadcrumb leads back up), hover a node for its shapes, parameters and
    `extra_repr` fields, click a node to highlight what it depends on (blue) and what
    depends on it (orange, outlined dashed) and to show its facts beside the graph. With a `recording`, the
    picked module's statistics over the recorded steps (and its histograms over the steps,
    when recorded) are shown there too, with a step slider and a statistic picker; a node's
    tip (hover or tap) reads out its output's statistic at the step, and "pin" in the
    node's details keeps modules side by side under it, each with its charts and
    histogram strips. The page fits any width: on a phone the details go under the graph.
    Keys: Tab reaches the graph, the arrow keys move between nodes, Enter picks one, +
    opens a module, Backspace goes back up, P pins.

    The view is one self-contained page in a sandboxed frame: it needs no ipywidgets and no
    running kernel, and stays interactive in a saved notebook opened again or converted to
    HTML. `view.save("graph.html")` writes it as a file to share. For a static picture (a
    paper, a notebook viewer that shows no HTML), use `graph.to_svg()` or `graph.to_dot()`.

    Args:
        graph: `tensor_tracker.module_graph(model, inputs)`.
        recording: a `Tracker` (live or `load`ed) whose statistics to show per module; its
            module names must be those of the graph's model. Optional.
        height: the frame's height in the notebook, in pixels (the graph scrolls inside);
            `None` (default): as tall as the graph's drawing, up to 900 (then it scrolls
            inside), following the level opened where the front end runs the output's
            scripts (JupyterLab and Notebook 7 do for a notebook they trust).
        title: the page's title (shown at the top and by `save`).

    Returns:
        A `GraphView`: shown by leaving it as a cell's last expression.

    Raises:
        TypeError: `graph` is not a module graph, `recording` not a tracker, or `height` not
            an int.
        ValueError: `height` below 200.

    Example:
        >>> graph = tensor_tracker.module_graph(model, x)
        >>> with tensor_tracker.track(model, stats=True) as t:
        ...     for batch in loader:
        ...         model(batch).sum().backward(); t.step()
        >>> view = tensor_tracker.graph_view(graph, t)  # a cell's last expression shows it
        >>> 300 <= view.height <= 900, "<iframe" in view._repr_html_()   # fitted to the graph
        (True, True)
    """
    check_type(graph, ModuleGraph, "graph", "a tensor_tracker.module_graph(model, inputs)")
    if height is not None and check_int(height, "height=", "an int (pixels) or None") < 200:
        raise ArgumentValueError(f"height= must be at least 200 (pixels), got {height}")
    check_type(title, str, "title=", "a str")
    text = page(recording, graph, title, view="graph")
    if height is None:
        return GraphView(text, fitted_height(graph), fit=True)
    return GraphView(text, height)
