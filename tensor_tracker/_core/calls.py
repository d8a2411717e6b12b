"""`CallHooks`: a hook at the start and at the end of every module call of a model, the
modules named as `track()` names them (`naming.module_names`). What the one-pass probes
(`summary`, `module_graph`, `autograd_graph`) run a model with; their hooks' behaviour
lives here, once:

- every module is hooked once, under its `track()` name: an aliased module by its first
  name, wrapped models (compiled, DDP, FSDP) by the names of the plain model;
- the pass runs eagerly (`eager_calls`): code that `torch.compile` made runs as the Python
  it came from, so the hooks see every module call with its real tensors and autograd
  nodes (a compiled graph fuses them, and tracing the hooks would recompile the model);
- calls made inside a backward pass (activation checkpointing recomputing a forward) are
  not calls of the pass: the hooks ignore them, as `track()` records them once;
- `remove()` (or leaving a `with` block) removes every hook, exception or not.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from torch import nn
from torch.utils.hooks import RemovableHandle

from .._torch_compat import eager_calls, graph_task_id
from .naming import module_names

__all__ = ["CallHooks", "PostHook", "PreHook", "eager_calls"]

PreHook = Callable[[str, nn.Module, tuple[Any, ...], dict[str, Any]], None]
"""Called as a module call starts: `(name, module, args, kwargs)`."""

PostHook = Callable[[str, nn.Module, tuple[Any, ...], dict[str, Any], Any], None]
"""Called as a module call ends: `(name, module, args, kwargs, output)`."""


class CallHooks:
    """Calls `pre` as every module call of `model` starts and `post` as it ends, each with
    the module's name (see `naming.module_names`), until `remove()` or the end of a `with`
    block. Run the model under `eager_calls()` for the hooks to see the calls of a
    compiled one.

    Args:
        model: the model whose modules to hook.
        pre: `(name, module, args, kwargs)`, as a call starts.
        post: `(name, module, args, kwargs, output)`, as it ends.

    Example:
        >>> seen = []
        >>> with CallHooks(
        ...     model,
        ...     lambda name, *_: seen.append(("start", name)),
        ...     lambda name, *_: seen.append(("end", name)),
        ... ):
        ...     _ = model(x)
        >>> seen[:3], seen[-1]
        ([('start', ''), ('start', '0'), ('end', '0')], ('end', ''))
    """

    def __init__(self, model: nn.Module, pre: PreHook, post: PostHook) -> None:
        self.names = module_names(model)
        """`(name, module)` of every module hooked, parents first."""
        self._pre = pre
        self._post = post
        self.handles: list[RemovableHandle] = []
        try:
            for name, module in self.names:
                start = partial(self._start, name)
                end = partial(self._end, name)
                self.handles.append(module.register_forward_pre_hook(start, with_kwargs=True))
                self.handles.append(module.register_forward_hook(end, with_kwargs=True))
        except BaseException:
            self.remove()
            raise

    def _start(
        self, name: str, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        if graph_task_id() == -1:  # else a checkpoint's recomputation in backward()
            self._pre(name, module, args, kwargs)

    def _end(
        self,
        name: str,
        module: nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        output: Any,
    ) -> None:
        if graph_task_id() == -1:
            self._post(name, module, args, kwargs, output)

    def remove(self) -> None:
        """Remove every hook (again: nothing)."""
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    def __enter__(self) -> CallHooks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()
