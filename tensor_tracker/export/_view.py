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


class GraphView:
    """The module graph with its interactions, shown in a notebook cell (see `graph_view`).

    Attributes:
        html: the page itself: one self-contained HTML document (scripts, styles and data
            inside; it loads nothing).
        height: the height of the frame in the notebook, in pixels.

    Example:
        >>> view = tensor_tracker.graph_view(tensor_tracker.module_graph(model, x))
        >>> view.height, view.html.startswith("<!doctype html>")   # a page for a frame
        (560, True)
        >>> import tempfile
        >>> view.save(Path(tempfile.mkdtemp()) / "graph.html").name   # opens in a browser
        'graph.html'
    """

    def __init__(self, page_html: str, height: int) -> None:
        self.html = page_html
        self.height = height

    def _repr_html_(self) -> str:
        # A frame holds the page: its script runs in any front end that shows HTML outputs
        # (JupyterLab, Notebook 7, VS Code, a notebook converted to HTML), with no kernel,
        # no widget extension, and nothing shared with the notebook's own page. Sandboxed:
        # scripts only, no access to the notebook.
        return (
            f'<iframe class="tensor-tracker-graph" sandbox="allow-scripts" '
            f'style="width: 100%; height: {self.height}px; border: 1px solid #ddd" '
            f'srcdoc="{html.escape(self.html, quote=True)}"></iframe>'
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
    height: int = 560,
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
        height: the frame's height in the notebook, in pixels (the graph scrolls inside).
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
        >>> view.height, "<iframe" in view._repr_html_()
        (560, True)
    """
    check_type(graph, ModuleGraph, "graph", "a tensor_tracker.module_graph(model, inputs)")
    if check_int(height, "height=", "an int (pixels)") < 200:
        raise ArgumentValueError(f"height= must be at least 200 (pixels), got {height}")
    check_type(title, str, "title=", "a str")
    return GraphView(page(recording, graph, title, view="graph"), height)
