"""tensor_tracker: look inside PyTorch models while they run.

```python
import tensor_tracker

with tensor_tracker.track(model) as t:
    model(batch).sum().backward()
t.to_frame()   # one row per module output / gradient
```

What a notebook imports (every other module is private, `_`-prefixed):
- `tensor_tracker.track`, `tensor_tracker.Tracker`: the entry points; `load` reads a saved
  or streamed recording; `stash` records a tensor by name (e.g. inside a `forward`),
  `tap` too, numbered within each module call.
- `compare`, `compare_models`: where two runs differ; `diagnose`: what looks wrong;
  `first_nonfinite`: where a NaN or infinity appeared; `explain_spike`: what moved first
  before a loss spike; `sample_values`, `sample_stats`: one
  batch item's values, the outlier sample; `channel_table`, `outlier_channels`: a
  statistic per channel by module and step, the channels far above their module's median;
  `to_frame`: a table of stashes.
- `summary`, `module_graph`, `autograd_graph`, `graph_view`, `report`: the model's layers,
  its graphs, an HTML page of a recording.
- `tensor_tracker.stats`: statistics computed on the device (`track(model, stats=True)`);
  `plot`: matplotlib figures; `widgets`: notebook viewers; `export`: the HTML report,
  TensorBoard and wandb; `integrations`: training loops; `errors`: the exceptions;
  `formats` (`tensor_tracker.stats.formats`): the limits of fp16, bf16, fp8 and MX formats.

Constants and types (no docstring of their own):
- `Kind`: what a stash holds, `Stash.kind`: `"output"`, `"input"`, `"param"`,
  `"optimizer"`, or for `stash(...)`: `"named"`, `"target"`, `"loss"`, `"helper"`;
  `"op"` for `track(..., ops=...)`, `"tap"` for `tap(...)`.
- `StashFn`: a function from an `Event` to a `Stash`, for `track(model, stash=...)`.
- `StashValueFn`: a function from each recorded tensor to what to keep of it, for
  `track(model, stash_value=...)` (it gets the live tensor: detach it).
- `diagnosis_stats`: the statistics `diagnose` reads, `track(model, stats=diagnosis_stats)`.
"""

# Submodules, so that `tensor_tracker.plot.scale_plot(t)` works after `import tensor_tracker`;
# they import matplotlib, ipywidgets, pandas and umap only when their functions are called.
from . import errors, export, integrations, plot, stats, widgets
from ._api import Tracker, compare, compare_models, load, track
from ._core.records import Event, Kind, LogEntry, Stash, StashFn, StashValueFn, Unrecorded
from ._core.stash_fns import (
    CopyValue,
    default_stash,
    default_stash_value,
    get_stash_fn,
)
from ._core.structure import rmap_tensor
from ._core.tracker import stash, tap
from ._data.channels import channel_table, outlier_channels
from ._data.compare import Comparison, Divergence
from ._data.diagnose import Diagnosis, Finding, diagnose, diagnosis_stats
from ._data.frame import to_frame
from ._data.nonfinite import NonFinite, first_nonfinite
from ._data.samples import SampleStats, SampleValues, sample_stats, sample_values
from ._data.spike import Cause, Explanation, explain_spike
from ._probe.autograd_graph import AutogradGraph, autograd_graph
from ._probe.graph import ModuleGraph, module_graph
from ._probe.summary import ModuleCall, Summary, summary
from .errors import MemoryBudgetError
from .export import GraphView, graph_view, report
from .stats import Stats, formats

__all__ = [
    "AutogradGraph",
    "Cause",
    "Comparison",
    "CopyValue",
    "Diagnosis",
    "Divergence",
    "Event",
    "Explanation",
    "Finding",
    "GraphView",
    "Kind",
    "LogEntry",
    "MemoryBudgetError",
    "ModuleCall",
    "ModuleGraph",
    "NonFinite",
    "SampleStats",
    "SampleValues",
    "Stash",
    "StashFn",
    "StashValueFn",
    "Stats",
    "Summary",
    "Tracker",
    "Unrecorded",
    "autograd_graph",
    "channel_table",
    "compare",
    "compare_models",
    "default_stash",
    "default_stash_value",
    "diagnose",
    "diagnosis_stats",
    "errors",
    "explain_spike",
    "export",
    "first_nonfinite",
    "formats",
    "get_stash_fn",
    "graph_view",
    "integrations",
    "load",
    "module_graph",
    "outlier_channels",
    "plot",
    "report",
    "rmap_tensor",
    "sample_stats",
    "sample_values",
    "stash",
    "stats",
    "summary",
    "tap",
    "to_frame",
    "track",
    "widgets",
]

__version__ = "0.1.0"
