"""tensor_tracker: look inside PyTorch models while they run.

```python
import tensor_tracker

with tensor_tracker.track(model) as t:
    model(batch).sum().backward()
t.to_frame()   # one row per module output / gradient
```

Where things live, in layers that import only downwards:
- `tensor_tracker.track`, `tensor_tracker.Tracker`: the entry points (`api`);
  `tensor_tracker.compare`, `tensor_tracker.compare_models`: where two runs differ;
  `tensor_tracker.sample_values`, `sample_stats`: one batch item's values, the outlier sample.
- `core`: recording (hooks, `Stash`, `Event`); torch only.
- `stats`: statistics computed on the device (`track(model, stats=True)`).
- `data`: tables and selections of what was recorded (`to_frame`); no plotting library.
- `plot`: matplotlib figures; `widgets`: notebook viewers; `export`: the HTML report,
  TensorBoard and wandb; `integrations`: training loops.
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
from ._core.tracker import stash
from ._data.compare import Comparison, Divergence
from ._data.diagnose import Diagnosis, Finding, diagnose, diagnosis_stats
from ._data.frame import to_frame
from ._data.nonfinite import NonFinite, first_nonfinite
from ._data.samples import SampleStats, SampleValues, sample_stats, sample_values
from ._probe.autograd_graph import AutogradGraph, autograd_graph
from ._probe.graph import ModuleGraph, module_graph
from ._probe.summary import ModuleCall, Summary, summary
from .errors import MemoryBudgetError
from .export import GraphView, graph_view, report
from .stats import Stats, formats

__all__ = [
    "AutogradGraph",
    "Comparison",
    "CopyValue",
    "Diagnosis",
    "Divergence",
    "Event",
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
    "compare",
    "compare_models",
    "default_stash",
    "default_stash_value",
    "diagnose",
    "diagnosis_stats",
    "errors",
    "export",
    "first_nonfinite",
    "formats",
    "get_stash_fn",
    "graph_view",
    "integrations",
    "load",
    "module_graph",
    "plot",
    "report",
    "rmap_tensor",
    "sample_stats",
    "sample_values",
    "stash",
    "stats",
    "summary",
    "to_frame",
    "track",
    "widgets",
]

__version__ = "0.1.0"
