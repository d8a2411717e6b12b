"""Recording: hooks on modules, what they saw (`Event`) and what is kept (`Stash`).

This layer depends on torch alone; statistics, tables and viewers build on it. Values are
sized through an `nbytes` attribute, so it needs to know nothing about what the layers
above store in a stash.

- `tracker.Recorder`: registers hooks, keeps the stashes, steps, memory budget.
- `naming`: the one naming of modules and parameters (aliases by their first name;
  compile, DDP and FSDP wrappers left out), for `track()` and the one-pass probes.
- `calls`: `CallHooks`, a hook at the start and end of every module call, named by
  `naming`, and `eager_calls`, running a compiled model as Python: what `summary`,
  `module_graph` and `autograd_graph` run a model once with.
- `columns`: the records as arrays of integers (`Columns`), read as `Stash` objects, and
  the `ValueStore` protocol through which a stash value keeps its own values as columns.
- `stash`: `Event`, `Stash`, `Kind`, the standard stash functions and `CopyValue`.
- `structure`: walking the nested structures modules return.
- `grad_hooks`: reading gradients with tensor hooks only (views, several outputs).
- `memo`: computing once for a tensor seen again unchanged.
"""
