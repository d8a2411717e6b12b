"""Recording: hooks on modules, what they saw (`Event`) and what is kept (`Stash`).

This layer depends on torch alone; statistics, tables and viewers build on it. Values are
sized through an `nbytes` attribute, so it needs to know nothing about what the layers
above store in a stash.

- `tracker.Recorder`: registers hooks, keeps the stashes, steps, memory budget.
- `columns`: the records as arrays of integers (`Columns`), read as `Stash` objects, and
  the `ValueStore` protocol through which a stash value keeps its own values as columns.
- `stash`: `Event`, `Stash`, `Kind`, the standard stash functions and `CopyValue`.
- `structure`: walking the nested structures modules return.
- `grad_hooks`: reading gradients with tensor hooks only (views, several outputs).
- `memo`: computing once for a tensor seen again unchanged.
"""
