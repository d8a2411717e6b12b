"""tensor_tracker: look inside PyTorch models while they run.

```python
import tensor_tracker

with tensor_tracker.track(model) as t:
    model(batch).sum().backward()
t.to_frame()   # one row per module output / gradient
```

Where things live:
- `tensor_tracker.track`, `tensor_tracker.Tracker`: recording (`api`, `tracker`).
- `tensor_tracker.Stash`, `tensor_tracker.Event`: what is recorded (`stash`).
- `tensor_tracker.stats`: statistics computed on the device (`track(model, stats=True)`).
- `tensor_tracker.plot`: matplotlib figures; `tensor_tracker.widgets`: notebook viewers.
"""

# Submodules, so that `tensor_tracker.plot.scale_plot(t)` works after `import tensor_tracker`;
# they import matplotlib, ipywidgets, pandas and umap only when their functions are called.
from . import formats, integrations, models, plot, stats, widgets
from ._grad_hooks import Unrecordable
from .api import track
from .stash import (
    CopyValue,
    Event,
    Stash,
    StashFn,
    StashValueFn,
    default_stash,
    default_stash_value,
    get_stash_fn,
)
from .structure import rmap_tensor
from .tracker import MemoryBudgetError, Tracker

__all__ = [
    "CopyValue",
    "Event",
    "MemoryBudgetError",
    "Stash",
    "StashFn",
    "StashValueFn",
    "Tracker",
    "Unrecordable",
    "default_stash",
    "default_stash_value",
    "formats",
    "get_stash_fn",
    "integrations",
    "models",
    "plot",
    "rmap_tensor",
    "stats",
    "track",
    "widgets",
]

__version__ = "0.1.0"
