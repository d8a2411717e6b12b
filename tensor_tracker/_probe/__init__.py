"""Probes: run a model once with temporary hooks and describe that one pass.

The modules are hooked through `core.calls.CallHooks`, named as `track()` names them
(`core.naming`), and a compiled model runs eagerly for the pass. Every hook is removed
when the pass ends, error or not. Builds on `tensor_tracker._data`
(type names, NaN/inf flags).

- `summary`: `summary`, one forward (and backward) pass summarised per module call;
  the pass, the totals and the text are in `_summary_record`, `_summary_data`,
  `_summary_format` (and `_summary_recording` for a tracker's records).
- `timeline`: what `summary` measures a pass with: clocks, CUDA memory, NaN/inf flags.
- `graph`: `module_graph`, which module call feeds which, found through autograd; the
  pass, the edges, the one layout of a level and the SVG/DOT text are in
  `_graph_record`, `_graph_edges`, `_graph_layout`, `_graph_format` (`_graph_nodes`: the
  nodes and edges as data).
- `autograd_graph`: `autograd_graph`, the operations autograd recorded in one pass.
- `compare_models`: what `tensor_tracker.compare_models` runs: two models from the same
  random state, recorded, everything put back afterwards.
"""
