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

import contextlib
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import nn

__all__ = [
    "compile_attempt",
    "compiled_callable",
    "dynamo_has_compiled_code",
    "eager_calls",
    "forget_compiled_code",
    "gradient_node",
    "graph_task_id",
    "hooks_in_frame",
    "keep_in_graph",
    "never_a_frame",
    "next_sequence_nr",
    "queue_at_end_of_backward",
    "traces_intermediate_hooks",
    "untraced",
    "will_execute",
]


graph_task_id: Callable[[], int] = torch._C._current_graph_task_id
"""The autograd graph task (backward pass) running in this thread, -1 outside one.

The only way to tell backward passes apart from inside a hook, and to notice that
activation checkpointing re-runs a forward pass during `backward()`; it is what
`torch.autograd.graph.register_multi_grad_hook` uses too. (The builtin itself: hooks call
it on every module call.)"""


def will_execute(node: Any) -> bool:
    """Whether the running backward pass will execute autograd `node` (so a hook on it will
    fire): needed to know when every gradient of a module call has arrived."""
    return bool(torch._C._will_engine_execute_node(node))


def gradient_node(tensor: torch.Tensor) -> Any:
    """The autograd node that receives `tensor`'s gradient (a leaf's gradient accumulator)."""
    get_edge = getattr(torch.autograd.graph, "get_gradient_edge", None)  # torch >= 2.2
    return tensor.grad_fn if get_edge is None else get_edge(tensor).node


_SEQUENCE_NR: Callable[[], int] | None = getattr(torch._C._autograd, "_get_sequence_nr", None)


def next_sequence_nr() -> int | None:
    """The sequence number the next autograd node made in this thread will get (`None`
    where torch does not say): the nodes a module call made are those numbered from its
    value at the call's start to its value at the end. The engine runs nodes with higher
    numbers first, and `node._sequence_nr()` reads a node's."""
    return None if _SEQUENCE_NR is None else _SEQUENCE_NR()


def queue_at_end_of_backward(callback: Callable[[], None]) -> None:
    """Run `callback` when the running backward pass finishes (DDP and FSDP use the same
    engine entry point for their end-of-backward work)."""
    torch.autograd.Variable._execution_engine.queue_callback(callback)


# -- torch.compile -----------------------------------------------------------------------


def compile_attempt() -> str:
    """Which trace Dynamo is running (frame, compile of the frame, attempt: a restart after
    a graph break is another), while it traces; "" outside one. What numbers an op or a
    tap within a module call whose hooks ran outside the trace (`CompiledHooks.inner`):
    numbering starts again in each trace. (`torch._guards` is private; without it, one
    numbering for all traces.)"""
    try:
        from torch._guards import CompileContext
    except ImportError:
        return ""
    return str(CompileContext.current_compile_id() or "")


#
# Making `torch.compile` see the tracker's hooks.
#
# TorchDynamo caches the code it compiles per Python code object, with guards that decide
# when the cached code may run again. By default (`torch._dynamo.config.
# skip_nnmodule_hook_guards`) it does not guard on a module having no hooks: code compiled
# before the hooks were added keeps running after they are, and never calls them. The cure
# is to drop that cached code, so that the next call compiles again and sees the hooks.
# Dynamo's cache is keyed by code object, not by model, so the code objects dropped are those
# a call of the tracked model runs: its compiled entry point, the `forward` (and overridden
# `__call__`) of the registered modules' classes, and the resume functions Dynamo made from
# them at graph breaks. Other models running the same code recompile on their next call too.


def untraced(fn: Callable[..., None]) -> Callable[..., None]:
    """`fn` for Dynamo to call, never to trace (a graph break), like
    `torch.compiler.disable(fn)`, but at the cost of one check outside `torch.compile`.

    `disable`'s wrapper switches Dynamo's frame callback off and on around every call,
    compiling or not: a few microseconds per module call, on every hook. This wrapper
    calls `fn` directly when no callback is set (eager mode) and goes through `disable`
    only inside a compiled region. Dynamo sees `_torchdynamo_disable` on it and does not
    inline it; its code is marked to be skipped, so Dynamo does not compile it either
    when a compiled region calls it (`get_eval_frame_callback` and `skip_code` are
    Dynamo's own; without them, `disable` as it is).
    """
    disabled: Callable[..., None] = torch.compiler.disable(fn)  # type: ignore[no-untyped-call]
    try:
        from torch._C._dynamo.eval_frame import get_eval_frame_callback
        from torch._dynamo.eval_frame import skip_code
    except ImportError:
        return disabled

    def call(*args: Any, **kwargs: Any) -> None:
        if get_eval_frame_callback() is None:
            fn(*args, **kwargs)
        else:
            disabled(*args, **kwargs)

    skip_code(call.__code__)
    call._torchdynamo_disable = True  # type: ignore[attr-defined]
    return call


def never_a_frame(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, which Dynamo still inlines into the graph it traces, but never compiles as a
    frame of its own when it runs outside a trace (a hook of a module whose call runs
    eagerly, after a graph break). Such a frame is compiled once for its code and reused
    for every closure that shares the code: the constants it computed at trace time for
    one module (the owner token of `core.compiled`) would then stand for all of them.
    `skip_code` is Dynamo's own; without it, `fn` as it is."""
    try:
        from torch._dynamo.eval_frame import skip_code
    except ImportError:
        return fn
    skip_code(fn.__code__)
    return fn


def compiled_callable(module: nn.Module) -> Callable[..., Any] | None:
    """What `torch.compile` made for `module`: the forward of an `OptimizedModule` (from
    `torch.compile(module)`) or the call installed by `module.compile()`; `None` when
    `module` is not compiled."""
    if type(module).__name__ == "OptimizedModule":
        found = vars(module).get("_forward") or vars(module).get("forward")
        return found if callable(found) else None
    found = getattr(module, "_compiled_call_impl", None)
    return found if callable(found) else None


class _Restore:
    """A hook handle's `remove()` that puts an `OptimizedModule`'s `forward` back."""

    def __init__(self, module: nn.Module, forward: Any) -> None:
        self.module = module
        self.forward = forward

    def remove(self) -> None:
        if self.forward is not None:
            self.module.forward = self.forward
            self.forward = None


def hooks_in_frame(module: nn.Module) -> _Restore | None:
    """Make the `OptimizedModule` `module` (from `torch.compile(model)`) trace `model`'s
    own hooks into its graph, as it traces those of `model`'s children; returns what puts
    it back (`.remove()`), or None when `module` is no such wrapper or this torch lacks
    Dynamo's `wrap_inline`. By default the wrapper runs `model`'s hooks outside the
    compiled frame: a gradient hook that a forward hook puts there on `model`'s output then
    sees only the gradient from outside the graph, not that of a use inside it (BERT's
    pooler reading `last_hidden_state`). This is the wrapper torch itself builds when
    `torch._dynamo.config.wrap_top_frame` is set."""
    if type(module).__name__ != "OptimizedModule" or "_forward" in vars(module):
        return None  # a lazy module's wrapper checks its initialisation first: leave it
    forward = vars(module).get("forward")
    context = getattr(module, "dynamo_ctx", None)
    inner = getattr(module, "_orig_mod", None)
    try:
        from torch._dynamo.external_utils import wrap_inline
    except ImportError:
        return None
    if (
        forward is None
        or getattr(forward, "_tensor_tracker_in_frame", False)  # made here already
        or context is None
        or type(context).__name__ == "DisableContext"
        or not isinstance(inner, nn.Module)
    ):
        return None
    traced = context(wrap_inline(inner))
    traced._tensor_tracker_in_frame = True
    module.forward = traced
    return _Restore(module, forward)


def _codes(fn: Any) -> list[types.CodeType]:
    """The code objects of `fn` and of the functions it wraps (`functools.wraps` chains,
    bound methods, Dynamo's own wrappers)."""
    codes: list[types.CodeType] = []
    seen: set[int] = set()
    while fn is not None and id(fn) not in seen:
        seen.add(id(fn))
        inner = getattr(fn, "_torchdynamo_orig_callable", None)
        if inner is not None:  # a function wrapped by torch.compile: run the original
            fn = inner
            continue
        fn = getattr(fn, "__func__", fn)
        code = getattr(fn, "__code__", None)
        if isinstance(code, types.CodeType):
            codes.append(code)
        fn = getattr(fn, "__wrapped__", None)
    return codes


def forget_compiled_code(
    entries: Iterable[Callable[..., Any]], modules: Iterable[nn.Module]
) -> bool:
    """Drop the code Dynamo compiled for calls of `entries` and of `modules` (see the
    module docstring), so that their next call compiles again with the hooks as they are.
    Returns `False` when this torch has none of the (private) functions needed."""
    if "torch._dynamo" not in sys.modules:
        return True  # nothing was ever compiled in this process
    try:
        from torch._C._dynamo.eval_frame import reset_code
        from torch._dynamo.resume_execution import ContinueExecutionCache
    except ImportError:
        return False
    lock: contextlib.AbstractContextManager[Any]
    try:
        from torch._dynamo.convert_frame import compile_lock as lock
    except ImportError:  # older torch: compiling does not take a lock
        lock = contextlib.nullcontext()
    todo: list[types.CodeType] = []
    for entry in entries:
        todo += _codes(entry)
    classes: set[type] = set()
    for module in modules:
        for cls in type(module).__mro__:
            if cls is nn.Module or cls is object or cls in classes:
                continue
            classes.add(cls)
            for name in ("forward", "__call__"):
                if name in vars(cls):
                    todo += _codes(vars(cls)[name])
    resumes: Any = ContinueExecutionCache.cache
    done: set[types.CodeType] = set()
    with lock:
        while todo:
            code = todo.pop()
            if code in done:
                continue
            done.add(code)
            reset_code(code)
            if code in resumes:  # the functions that resume this code after a graph break
                todo += list(resumes[code].values())
    return True


@contextlib.contextmanager
def eager_calls() -> Iterator[None]:
    """While it lasts, what `torch.compile` compiled (a compiled model, `module.compile()`,
    compiled functions inside a model) runs eagerly, as the Python it was compiled from;
    the compiled code is kept for later calls. Nothing is imported when nothing was ever
    compiled in this process.

    Example:
        >>> compiled = torch.compile(model)
        >>> with eager_calls():
        ...     compiled(x).shape  # runs model's forward as Python, compiling nothing
        torch.Size([8, 4])
    """
    if "torch._dynamo" not in sys.modules:  # nothing was compiled
        yield
        return
    set_stance = getattr(torch.compiler, "set_stance", None)  # torch >= 2.6
    if set_stance is not None:
        with set_stance("force_eager"):
            yield
        return
    # Older torch: compiles nothing new (code compiled before may still run).
    from torch._dynamo import config

    with config.patch(disable=True):
        yield


def dynamo_has_compiled_code() -> bool:
    """Whether Dynamo holds compiled code for any function in this process."""
    convert_frame = sys.modules.get("torch._dynamo.convert_frame")
    if convert_frame is None:
        return False
    try:
        from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

        refs = list(convert_frame.input_codes.seen)
        return any(
            (code := ref()) is not None and len(_debug_get_cache_entry_list(code)) > 0
            for ref in refs
        )
    except Exception:  # private API changed: assume it may
        return True


def traces_intermediate_hooks() -> bool:
    """Whether Dynamo traces `register_hook` on an intermediate tensor into the graph (its
    `register_hook` higher-order operator, torch >= 2.13) instead of breaking the graph
    there; see `core.graph_sink`."""
    try:
        from torch._higher_order_ops.register_hook import register_hook_op  # noqa: F401
    except ImportError:
        return False
    return True


def keep_in_graph(op: Any) -> None:
    """Declare that operator `op` (an `OpOverload`) has a side effect, so that no compiler
    pass drops it as dead code (it returns nothing). `torch.fx.node.has_side_effect`, which
    PyTorch keeps for functions that are not operators: the effect system it recommends
    for operators (`torch.library._register_effectful_op`) wraps each call in the
    `with_effects` higher-order operator, which Inductor's FX graph cache refuses ("Can't
    cache HigherOrderOperator: with_effects"), so that every graph would be compiled anew,
    also when a tracker attaches its hooks again; and Inductor does not keep such calls in
    program order either."""
    torch.fx.node.has_side_effect(op)
