"""`track(..., ops=...)`: calls of functional operations inside a tracked module's `forward`,
recorded like module outputs (`kind="op"`, `attr="<op>#<k>"`).

`OP_FUNCTIONS` names the operations as a user thinks of them: each name stands for every
torch function that computes it (`torch.softmax`, `F.softmax`, `Tensor.softmax`; `a + b`,
which torch hands on as `Tensor.add`). In-place variants count as the operation
(`x += y` is an `"add"`): what is recorded is the value the call returns, as it is then.

`OpsHooks` pushes a `TorchFunctionMode` at the start of the outermost tracked module's
call and pops it at its end (exception or not). The tracker's own hooks, taps and stashes
run with it off the stack (`OpsHooks.quiet`), so it sees the model's calls only; its
per-call work for an operation not asked for is one dict lookup. For one asked for, the
owner is the innermost module call on the Python stack (`Module._call_impl`'s `self`): the
op is recorded when that module is registered, so an untracked child's ops are not, nor
those the hooks run under a mode the model pushed above this one. The record goes through the same path as
`tensor_tracker.stash` (`EagerHooks.stash_named`), with the op's arguments as the
record's `args`/`kwargs`.

On a compiled model whose outputs are recorded in its graphs (`plan.inner_in_graph`),
`GraphOpsMode` takes its place: pushed and popped by hooks Dynamo traces, it is traced too,
and its records are made in the graph (`CompiledHooks.inner`), with no graph break.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from .._torch_compat import untraced
from ..errors import ArgumentTypeError, ArgumentValueError

__all__ = ["OP_FUNCTIONS", "GraphOpsMode", "OpsHooks", "check_ops"]


def _present(*functions: Any) -> tuple[Callable[..., Any], ...]:
    """The functions this torch has (some names come and go between versions)."""
    return tuple(f for f in functions if f is not None)


def _get(owner: Any, name: str) -> Any:
    return getattr(owner, name, None)


OP_FUNCTIONS: Mapping[str, tuple[Callable[..., Any], ...]] = types.MappingProxyType(
    {
        "add": _present(torch.add, Tensor.add, Tensor.add_, Tensor.__add__, Tensor.__iadd__),
        "sub": _present(
            torch.sub, torch.subtract, Tensor.sub, Tensor.sub_, Tensor.__sub__, Tensor.__rsub__
        ),
        "mul": _present(torch.mul, torch.multiply, Tensor.mul, Tensor.mul_, Tensor.__mul__),
        "div": _present(
            torch.div,
            torch.divide,
            torch.true_divide,
            Tensor.div,
            Tensor.div_,
            Tensor.__truediv__,
            Tensor.__rtruediv__,
        ),
        "matmul": _present(torch.matmul, Tensor.matmul, Tensor.__matmul__, Tensor.__rmatmul__),
        "bmm": _present(torch.bmm, Tensor.bmm),
        "mm": _present(torch.mm, Tensor.mm),
        "baddbmm": _present(torch.baddbmm, Tensor.baddbmm),
        "einsum": _present(torch.einsum),
        "linear": _present(F.linear),
        "softmax": _present(torch.softmax, F.softmax, Tensor.softmax, torch.special.softmax),
        "log_softmax": _present(torch.log_softmax, F.log_softmax, Tensor.log_softmax),
        "layer_norm": _present(F.layer_norm, torch.layer_norm),
        "rms_norm": _present(_get(F, "rms_norm"), _get(torch, "rms_norm")),
        "gelu": _present(F.gelu),
        "relu": _present(torch.relu, F.relu, Tensor.relu),
        "silu": _present(F.silu),
        "tanh": _present(torch.tanh, Tensor.tanh, F.tanh),
        "sigmoid": _present(torch.sigmoid, Tensor.sigmoid, F.sigmoid),
        "exp": _present(torch.exp, Tensor.exp),
        "dropout": _present(F.dropout),
        "embedding": _present(F.embedding),
        "cat": _present(torch.cat, torch.concat),
        "conv1d": _present(F.conv1d),
        "conv2d": _present(F.conv2d),
        "scaled_dot_product_attention": _present(F.scaled_dot_product_attention),
    }
)
"""Each operation `ops=` can name, and the torch functions that are that operation."""

_NAME_OF = {f: name for name, functions in OP_FUNCTIONS.items() for f in functions}


def check_ops(value: Any, argument: str) -> Mapping[Callable[..., Any], str] | None:
    """`ops=` checked: an operation name, a torch function, or a list of them; returns
    each torch function to record and its operation's name (read-only), or None.

    A torch function that `OP_FUNCTIONS` does not list is recorded under its own name.

    Example:
        >>> functions = check_ops(["softmax", torch.matmul], "ops=")
        >>> sorted(set(functions.values())), functions[F.softmax]
        (['matmul', 'softmax'], 'softmax')
        >>> check_ops("sofmax", "ops=")
        Traceback (most recent call last):
        ...
        tensor_tracker.errors.ArgumentValueError: ops=: unknown operation 'sofmax'; known: add, ...
    """
    if value is None:
        return None
    items = [value] if isinstance(value, str) or callable(value) else value
    if not isinstance(items, Iterable) or isinstance(items, Mapping):
        raise ArgumentTypeError(
            f"{argument} takes an operation name (e.g. 'softmax'), a torch function or a "
            f"list of them, got {type(value).__name__}"
        )
    functions: dict[Callable[..., Any], str] = {}
    for item in items:
        if isinstance(item, str):
            if item not in OP_FUNCTIONS:
                raise ArgumentValueError(
                    f"{argument}: unknown operation {item!r}; known: {', '.join(OP_FUNCTIONS)} "
                    "(or pass the torch function itself, e.g. ops=torch.cumsum)"
                )
            functions.update(dict.fromkeys(OP_FUNCTIONS[item], item))
        elif callable(item) and isinstance(getattr(item, "__name__", None), str):
            name = _NAME_OF.get(item)
            if name is None:
                functions[item] = item.__name__
            else:
                functions.update(dict.fromkeys(OP_FUNCTIONS[name], name))
        else:
            raise ArgumentTypeError(
                f"{argument} holds {item!r}: name an operation ({', '.join(OP_FUNCTIONS)}) "
                "or pass a torch function"
            )
    if not functions:
        raise ArgumentValueError(f"{argument} is empty: name at least one operation, or None")
    return types.MappingProxyType(functions)


_CALLS = frozenset({nn.Module._call_impl.__code__, nn.Module._wrapped_call_impl.__code__})
"""The code of a module call: its frame's `self` is the module whose call is running."""


_PASSED = frozenset({__name__, "tensor_tracker._torch_compat"})
"""This module and `untraced`'s: the frames between an op's caller and the record."""


def _caller_module(frame: Any) -> nn.Module | None:
    """The module whose call runs `frame` (from the innermost frame up to the first module
    call), or None when a frame of this package comes first: a tracker's own work (a hook,
    `tap`), never an op of the model."""
    while frame is not None:
        code = frame.f_code
        if code in _CALLS:
            owner: nn.Module | None = frame.f_locals.get("self")
            return owner
        module = frame.f_globals.get("__name__", "")
        if module.startswith("tensor_tracker.") and module not in _PASSED:
            return None
        frame = frame.f_back
    return None


_stack_length = torch._C._len_torch_function_stack
_pop_mode = torch._C._pop_torch_function_stack
_push_mode = torch._C._push_on_torch_function_stack

RecordOp = Callable[[Any, str, Any, tuple[Any, ...], dict[str, Any]], None]
"""Records one op call: `(registration, op name, output, args, kwargs)`."""


class _CallsMode(TorchFunctionMode):
    """Runs each torch call and hands each call of a function in `functions` to
    `self._record_call(op name, output, args, kwargs)`: the dispatch of both modes."""

    def __init__(
        self,
        functions: Mapping[Callable[..., Any], str],
        record_call: Callable[[str, Any, tuple[Any, ...], dict[str, Any] | None], None],
    ) -> None:
        super().__init__()
        # A dict, not the read-only mapping: Dynamo looks a function up in a dict while
        # it traces, so an op not asked for adds nothing to a compiled graph.
        self._functions = dict(functions)
        self._record_call = record_call

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        output = func(*args, **kwargs) if kwargs else func(*args)
        name = self._functions.get(func)
        if name is not None:
            self._record_call(name, output, args, kwargs)
        return output


class _OpsMode(_CallsMode):
    """Hands each call of a function in `functions` to `record`, with its owner."""

    def __init__(
        self,
        functions: Mapping[Callable[..., Any], str],
        owners: Mapping[int, Any],
        record: RecordOp,
    ) -> None:
        super().__init__(functions, self._recorded_call)
        self._owners = owners
        self._record = record
        self._dynamo = False

    def trace_safe(self) -> bool:
        """Dynamo cannot trace the frame walk: where it may run (it is imported), a
        recorded call runs eagerly, behind a graph break (an op not asked for traces as it
        is). Returns whether Dynamo may run."""
        if not self._dynamo and "torch._dynamo" in sys.modules:
            self._record_call = untraced(self._recorded_call)
            self._dynamo = True
        return self._dynamo

    def _recorded_call(
        self, name: str, output: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None
    ) -> None:
        owner = _caller_module(sys._getframe(1))
        reg = None if owner is None else self._owners.get(id(owner))
        if reg is not None:
            self._record(reg, name, output, args, kwargs or {})


class GraphOpsMode(_CallsMode):
    """The mode of `ops=` on a compiled model whose records are made in its graphs:
    pushed and popped by hooks Dynamo traces (`CompiledHooks.owner_hooks`), so Dynamo
    traces it too, and hands each call of a function in `functions` to `record(name,
    output, args, kwargs)` (`CompiledHooks.inner`, traced: it knows the owner at trace time). An
    operation not asked for adds nothing to the graph.

    Example:
        >>> seen = []
        >>> with GraphOpsMode(check_ops("add", "ops="), lambda name, *call: seen.append(name)):
        ...     _ = torch.ones(1) + 1
        >>> seen
        ['add']
    """


class OpsHooks:
    """The hooks that run the ops mode while a registered module's call runs.

    Args:
        functions: the torch functions to record and their names (`check_ops`).
        record: records one op call (`EagerHooks.stash_named`'s arguments, bound).

    Example:
        >>> seen = []
        >>> model = nn.Sequential(nn.Linear(2, 2))
        >>> ops = OpsHooks(check_ops("linear", "ops="), lambda reg, *call: seen.append(call[0]))
        >>> ops.attach(model[0], "fc")
        >>> _ = model(torch.ones(1, 2)); ops.detach()
        >>> seen
        ['linear']
    """

    def __init__(self, functions: Mapping[Callable[..., Any], str], record: RecordOp) -> None:
        self._owners: dict[int, Any] = {}
        self._mode = _OpsMode(functions, self._owners, record)
        self._depth = 0
        # Dynamo replays neither the push and pop of a mode nor the count as they ran, so
        # under torch.compile they run eagerly, behind a graph break (see `attach`).
        self._push: Callable[..., None] = self._enter
        self._pop: Callable[..., None] = self._exit
        self._pre: list[Any] = []
        self._post: list[Any] = []
        self._closing = False

    def attach(self, module: nn.Module, reg: Any) -> None:
        """Record the ops `module`'s own `forward` calls, with `reg` as their owner."""
        self._owners[id(module)] = reg
        if self._mode.trace_safe():
            self._push, self._pop = untraced(self._enter), untraced(self._exit)
        self._pre.append(module.register_forward_pre_hook(self._push))
        # First among the forward hooks, and also on an exception, so the mode leaves the
        # stack in the order it came (modes are a stack).
        self._post.append(module.register_forward_hook(self._pop, prepend=True, always_call=True))

    def _enter(self, module: nn.Module, args: Any) -> None:
        self._depth += 1
        if self._depth == 1:
            self._mode.__enter__()  # type: ignore[no-untyped-call]

    def _exit(self, module: nn.Module, args: Any, output: Any) -> None:
        if self._depth == 0:
            return  # attached while this call ran: its pre-hook did not
        self._depth -= 1
        if self._depth == 0:
            self._mode.__exit__(None, None, None)  # type: ignore[no-untyped-call]
            if self._closing:
                self.detach()

    def quiet(self, hook: Callable[..., None]) -> Callable[..., None]:
        """`hook` (one of the tracker's own: a module's hook, `tap`'s or `stash`'s record)
        run with the mode off the stack while it is on top: the statistics, copies and
        gradient hooks the tracker makes inside a tracked call never reach the
        interception, so an operation not asked for costs the model's own calls only.
        (Under a mode the model pushed above it, the mode stays: `_caller_module` tells the
        tracker's calls apart.) An op's record needs none: torch takes the mode off the
        stack while it handles the call."""
        mode = self._mode

        def run(*args: Any) -> None:
            # Popped and pushed back (0.3 us), not `DisableTorchFunction`, which would
            # also turn off the `__torch_function__` of tensor subclasses and other modes.
            if not self._depth or _stack_length() == 0:
                hook(*args)
                return
            top = _pop_mode()
            if top is not mode:
                _push_mode(top)
                hook(*args)
                return
            try:
                hook(*args)
            finally:
                _push_mode(mode)

        return run

    def detach(self) -> None:
        """Remove the hooks; while a call runs (a hook raised inside `forward`), the ones
        that pop the mode stay until it has left."""
        for handle in self._pre:
            handle.remove()
        self._pre.clear()
        self._owners.clear()
        if self._depth:
            self._closing = True
            return
        for handle in self._post:
            handle.remove()
        self._post.clear()
        self._closing = False
