"""Every private PyTorch API the library relies on, each with the reason it is needed.

Keeping them in one place makes a PyTorch upgrade a review of one file. Public tensor
attributes that are merely underscored (`Tensor._base`, `Tensor._version`,
`Tensor._is_view()`) are used where they are read, and documented here:

- `Tensor._base` / `Tensor._is_view()`: the tensor a view shares its storage with; a hook
  on a view modified in place never fires, so the gradient is read from the base instead
  (`core.grad_hooks`).
- `Tensor._version`: the in-place version counter, shared by a view and its base; it tells
  whether a tensor seen again is unchanged (`core.memo`) and whether a view's storage was
  modified in place (`core.grad_hooks`).
- `RemovableHandle.hooks_dict_ref`: a weak reference to a tensor hook's dictionary, dead
  once the autograd graph is freed, which lets long runs forget finished handles.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

__all__ = [
    "forget_compiled_code",
    "gradient_node",
    "graph_task_id",
    "queue_at_end_of_backward",
    "will_execute",
]


def graph_task_id() -> int:
    """The autograd graph task (backward pass) running in this thread, -1 outside one.

    The only way to tell backward passes apart from inside a hook, and to notice that
    activation checkpointing re-runs a forward pass during `backward()`; it is what
    `torch.autograd.graph.register_multi_grad_hook` uses too.
    """
    return torch._C._current_graph_task_id()


def will_execute(node: Any) -> bool:
    """Whether the running backward pass will execute autograd `node` (so a hook on it will
    fire): needed to know when every gradient of a module call has arrived."""
    return bool(torch._C._will_engine_execute_node(node))


def gradient_node(tensor: torch.Tensor) -> Any:
    """The autograd node that receives `tensor`'s gradient (a leaf's gradient accumulator)."""
    get_edge = getattr(torch.autograd.graph, "get_gradient_edge", None)  # torch >= 2.2
    return tensor.grad_fn if get_edge is None else get_edge(tensor).node


def queue_at_end_of_backward(callback: Callable[[], None]) -> None:
    """Run `callback` when the running backward pass finishes (DDP and FSDP use the same
    engine entry point for their end-of-backward work)."""
    torch.autograd.Variable._execution_engine.queue_callback(callback)


def _functions(fn: Any, depth: int = 0) -> Iterator[Any]:
    """`fn` and the functions it wraps (`__wrapped__`, closures): where dynamo keeps the
    compiled code of a `torch.compile`d module."""
    if depth > 8 or getattr(fn, "__code__", None) is None:
        return
    yield fn
    yield from _functions(getattr(fn, "__wrapped__", None), depth + 1)
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        yield from _functions(value, depth + 1)


def forget_compiled_code(module: nn.Module) -> None:
    """Make dynamo recompile a `torch.compile`d module that already ran, so that it sees
    hooks added since.

    Dynamo does not guard compiled code on module hooks (`skip_nnmodule_hook_guards`), so
    code compiled before `track` would run without ever calling its hooks. Dropping the
    compiled code of the wrapper functions forces a recompilation with the hooks on the
    next call (other compiled modules sharing those wrappers recompile once too).
    """
    entry = getattr(module, "_compiled_call_impl", None)  # module.compile() in place
    if type(module).__name__ == "OptimizedModule":
        entry = getattr(module, "forward", None)
    if entry is None:
        return
    eval_frame = getattr(torch._C, "_dynamo", None)
    eval_frame = getattr(eval_frame, "eval_frame", None)
    reset_code = getattr(eval_frame, "reset_code", None)
    cache_entries = getattr(eval_frame, "_debug_get_cache_entry_list", None)
    if reset_code is None or cache_entries is None:
        warnings.warn(
            "tensor_tracker: this model was compiled with torch.compile, and this PyTorch "
            "version offers no way to recompile it with the tracker's hooks: if it already "
            "ran, nothing will be recorded. Call torch._dynamo.reset() before tracking, or "
            "track the uncompiled model.",
            RuntimeWarning,
            stacklevel=4,
        )
        return
    for fn in _functions(entry):
        if cache_entries(fn.__code__):
            reset_code(fn.__code__)
