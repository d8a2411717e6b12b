"""Matplotlib figures of what a tracker recorded.

- `histogram`: the distribution of one or several stashed tensors (or recorded histograms).
- `scale_plot`: forward and gradient scale of every module, against number-format limits.
- `umap_plot`: each token's path through the layers, embedded in 2-D (UMAP or PCA).
- `history`: a statistic over training steps, per module.
- `compare`: where two runs differ (`tensor_tracker.compare`): the error of every module,
  forward and backward, with both runs' scales.
- `sample_plot`: one batch item's values per channel at every module (modules x channels),
  and which sample of the batch stands out.
- `histogram_heatmap`: one module's histogram over training steps.
- `channel_map`: a statistic per channel (`stats.per_channel`) of every module, channels x
  modules on a log colour scale: outlier channels stand out.
- `module_graph`, `autograd_graph`: a level of `tensor_tracker.module_graph`, or the
  operations of `tensor_tracker.autograd_graph`, as a figure (PNG/PDF with `fig.savefig`).
- `spike_plot`: the loss around a spike and the quantities that moved first
  (`tensor_tracker.explain_spike`), aligned on its steps.
- `default_layers`: the modules `umap_plot` embeds when `layers=` is not given.

Constants: `DEFAULT_FORMATS`, the formats whose limits `scale_plot` and `history` draw
(`("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")`); `MAX_TOKENS`, how many tokens `umap_plot`
embeds when `tokens=` is not given (64); `MAX_HEIGHT`, the tallest graph figure in inches
(40.0; a longer level is shrunk to it).

Every function returns a `matplotlib.figure.Figure` built without pyplot, so it works
headless and leaves no global state behind; in a notebook the returned figure displays
itself (as a PNG, unless a matplotlib backend such as `%matplotlib inline` shows it). Pass `ax=` to draw into an axes of your own figure instead. matplotlib is imported
only when a function is called (`pip install 'tensor-tracker[plot]'`).

Example:
    >>> import tensor_tracker
    >>> from tensor_tracker import plot
    >>> with tensor_tracker.track(model) as t:
    ...     model(x).sum().backward()
    >>> fig = plot.scale_plot(t)           # rms per module, forward and gradient
    >>> fig = plot.histogram(t[0], log2=True)  # log2|x| of the first stash
    >>> graph = tensor_tracker.module_graph(model, x)
    >>> plot.module_graph(graph).savefig("graph.png")  # doctest: +SKIP
"""

from .._data.embedding import MAX_TOKENS, default_layers
from ._channels import channel_map
from ._compare import compare
from ._embedding import umap_plot
from ._figure import DEFAULT_FORMATS
from ._graph import MAX_HEIGHT, autograd_graph, module_graph
from ._histogram import histogram
from ._history import histogram_heatmap, history
from ._samples import sample_plot
from ._scale import scale_plot
from ._spike import spike_plot

__all__ = [
    "DEFAULT_FORMATS",
    "MAX_HEIGHT",
    "MAX_TOKENS",
    "autograd_graph",
    "channel_map",
    "compare",
    "default_layers",
    "histogram",
    "histogram_heatmap",
    "history",
    "module_graph",
    "sample_plot",
    "scale_plot",
    "spike_plot",
    "umap_plot",
]
