"""Notebook viewers (ipywidgets) around the figures of `tensor_tracker.plot`.

Each viewer is an `ipywidgets.VBox`: controls on top, the figure below (rendered to an SVG
image, so it works in any notebook front end without a matplotlib backend). Display it by
leaving it as the last expression of a cell. Only what a control changes is redrawn.

For scripting and tests each viewer also carries:

- `viewer.controls`: `{name: control widget}`; set `viewer.controls["module"].value = ...`
  to drive it from Python;
- `viewer.figure`: the matplotlib `Figure` on display (`None` while a message is shown);
- `viewer.message`: an `ipywidgets.HTML` with the reason when there is nothing to show
  (empty tracker, a filter matching nothing, NaN-only values, ...), empty otherwise;
- `viewer.image`: the `ipywidgets.Image` showing the figure;
- `viewer.redraw()`: draw again.

ipywidgets and matplotlib are imported when a viewer is built
(`pip install 'tensor-tracker[widgets]'`).

`tensor_tracker.graph_view` is the module graph as an interactive page inside the notebook
(no ipywidgets, no kernel needed once drawn).

Example:
    >>> from tensor_tracker import widgets
    >>> with tensor_tracker.track(model) as t:
    ...     model(x).sum().backward()
    >>> viewer = widgets.histogram_viewer(t)  # or as the last line of a cell, to show it
"""

from ._embedding import umap_viewer
from ._histogram import histogram_viewer
from ._history import history_viewer
from ._live import live_view
from ._scale import scale_viewer

__all__ = ["histogram_viewer", "history_viewer", "live_view", "scale_viewer", "umap_viewer"]
