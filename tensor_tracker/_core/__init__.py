"""Recording: hooks on modules, what they saw (`Event`) and what is kept (`Stash`).

This layer depends on torch alone; statistics, tables and viewers build on it. Values are
sized through an `nbytes` attribute, so it needs to know nothing about what the layers
above store in a stash.

- `tracker`: `Recorder`: registering modules, steps, `with` blocks; `stash()`.
- `options`: `Options`, every option of `track` and `Tracker`, each declared (type,
  default, documentation, check) once.
- `hooks`: the eager hooks and the record path, from a module's output to the stored row.
- `compiled`: the compiled-graph path: statistics computed inside a compiled model's
  graphs, delivered through `graph_sink`.
- `budget`: `max_bytes=`, the bytes the records hold against a limit.
- `naming`: the one naming of modules and parameters (aliases by their first name;
  compile, DDP and FSDP wrappers left out), for `track()` and the one-pass probes.
- `calls`: `CallHooks`, a hook at the start and end of every module call, named by
  `naming`: what `summary`, `module_graph` and `autograd_graph` run a model once with.
- `columns`: the records as arrays of integers (`Columns`), read as `Stash` objects, and
  the `ValueStore` protocol through which a stash value keeps its own values as columns.
- `records`: `Event`, `Stash`, `Kind`, `Origin`, `LogEntry`, `Unrecorded`.
- `stash_fns`: the standard stash functions (`default_stash`, `get_stash_fn`) and
  `CopyValue`.
- `structure`: walking the nested structures modules return.
- `grad_hooks`: reading gradients with tensor hooks only (views, several outputs).
- `graph_sink`: the custom op through which compiled graphs hand statistics out.
- `memo`: computing once for a tensor seen again unchanged.
- `dist`: the rank, local shards, and the one collective of `gather`.
"""
