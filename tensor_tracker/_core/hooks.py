"""The eager hooks and the record path: from a module's output to the stored row.

`EagerHooks` is the part of `Recorder` that runs inside the user's pass. A forward hook
(`_forward_hook`) numbers the call and hands the output to `_record`, which keeps it as one
row of `Columns`: statistics through the store (`StatsStore.put`, a few numbers on the
device), anything else through the standard `StashFn` (`keep`) or the user's own
(`_record_custom`, which gets an `Event`). Gradients come back through tensor hooks
(`_hook_grads`, see `grad_hooks`) into the same `_record`. Pre-hooks record inputs and
parameters, a post-accumulate hook parameter gradients, an optimizer hook its state.

Hot path: no host synchronisation, little Python; each hook resolves what it can once,
when it is made (`Registration`, `_site`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, NoReturn

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from .._torch_compat import graph_task_id, queue_at_end_of_backward
from ..errors import ArgumentTypeError, ArgumentValueError
from .budget import MemoryBudget, value_nbytes
from .columns import GRAD, REFS, TRAINING, TUPLE, Columns
from .dist import local_value
from .grad_hooks import Gather, Tap, handle_is_dead, unrecordable
from .memo import RecentTensors
from .options import Options
from .records import Kind, Origin, Stash, StashFn, StashValueFn
from .stash_fns import BoundDefaultStash, default_stash_value, keep
from .structure import iter_tensors

__all__ = ["EagerHooks", "Registration"]


def _flat_tensors(value: Any) -> bool:
    """Whether `value` is a plain tuple of tensors and `None`s, with at least one tensor."""
    if type(value) is not tuple:
        return False
    found = False
    for item in value:
        if isinstance(item, Tensor):
            found = True
        elif item is not None:
            return False
    return found


class _Guarded:
    """One of the library's own `StashValueFn`s, made never to raise into the user's pass:
    a tensor it cannot handle is kept as an `Unrecorded` (with one warning)."""

    __slots__ = ("fn",)

    def __init__(self, fn: StashValueFn) -> None:
        self.fn = fn

    def __call__(self, tensor: Tensor) -> Any:
        try:
            return self.fn(tensor)
        except _REFUSED:
            raise  # an argument the tensor shows wrong (per_channel(dim=99)): see _refuse
        except Exception as error:
            return unrecordable(tensor, error)


# What the library's own value functions raise for an argument that a tensor shows to be
# wrong (`stats.check_dim`): not a tensor they cannot handle, but a setting to fix.
_REFUSED = (ArgumentTypeError, ArgumentValueError)


def _guard(fn: StashValueFn) -> StashValueFn:
    # A user's own stash_value raises as it likes: that error is theirs to see.
    builtin = fn is default_stash_value or getattr(fn, "builtin_stash_value", False)
    return _Guarded(fn) if builtin else fn


class Registration:
    """One registered module and what its hooks need, resolved once at `register` time."""

    __slots__ = (
        "arg_names",
        "calls",
        "grad",
        "module",
        "name",
        "no_grad_call",
        "no_grad_hooked",
        "param_step",
        "params",
        "sites",
        "traced_calls",
        "type",
    )

    def __init__(self, module: nn.Module, name: str, grad: bool) -> None:
        self.module = module
        self.name = name
        self.type = type(module)
        self.grad = grad
        self.calls = 0
        self.traced_calls = 0  # see CompiledHooks._graph_hook
        self.sites: dict[tuple[Kind, str], int] = {}  # see EagerHooks._site
        self.param_step = -1
        # The last call that ran without autograd (as in reentrant activation checkpointing)
        # and the sites (output, an input...) whose gradients were hooked all the same
        # (tensors that required grad already): a recomputation of that call hooks the others.
        self.no_grad_call = -1
        self.no_grad_hooked: set[int] = set()
        self.params = list(module.named_parameters(recurse=False))
        self.arg_names: tuple[str, ...] = ()
        try:
            signature = inspect.signature(module.forward)
            self.arg_names = tuple(
                p.name
                for p in signature.parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            )
        except (TypeError, ValueError):  # builtins and odd callables have no signature
            pass

    def arg_name(self, index: int) -> str:
        return self.arg_names[index] if index < len(self.arg_names) else str(index)


class EagerHooks:
    """The hooks a `Recorder` attaches in eager mode, and the path from what they see to
    the stored row. Holds the state the hooks read; `Recorder` (registration, steps,
    `with` blocks) builds on it, and `CompiledHooks` adds the compiled-graph path."""

    if TYPE_CHECKING:  # defined by Recorder: what a hook calls to stop tracking

        def unregister(self) -> None: ...

    def __init__(self, options: Options) -> None:
        stash_fn = options.stash_fn
        self._stash_fn: StashFn = stash_fn
        # With the standard StashFn the hooks build each Stash directly (no Event); only
        # stashes built by a user's own StashFn need the tracker to stamp call/step/kind.
        self._default_value: StashValueFn | None = (
            _guard(stash_fn.stash_value) if isinstance(stash_fn, BoundDefaultStash) else None
        )
        stash_value = getattr(stash_fn, "stash_value", None)
        # Values that a store keeps as columns (statistics) need no Python object each.
        make_store = getattr(stash_value, "store", None) if self._default_value else None
        self.stashes = Columns(make_store() if callable(make_store) else None)
        """The records, readable as a list of `Stash` (see `Columns`)."""
        self._non_blocking = bool(getattr(stash_value, "non_blocking", False))
        self._pending_copies = False
        capture = options.capture
        self._outputs = "outputs" in capture
        self._inputs = "inputs" in capture
        self._params = "params" in capture
        self._train_only = options.train_only
        self._budget = (
            None if options.max_bytes is None else MemoryBudget(options.max_bytes, self.unregister)
        )
        self._step = 0  # the step's number, as records carry it; see Recorder.step
        self._step_count = 0  # steps so far, whatever their numbers
        self._keep_steps = options.keep_steps
        # keep_steps=: set by step(), cleared by the next step's first record (`_make_room`).
        self._room_pending = False
        self._registrations: list[Registration] = []
        self._loose: Registration | None = None  # see _stash_named
        self._recorded = False  # whether a hook recorded anything in the current block
        self._handles: list[RemovableHandle] = []
        self._grad_handles: list[Any] = []
        self._prune_at = 1024
        # A few, not one: a parent returning (loss, logits) hooks loss before it meets its
        # child's logits again.
        self._recent_taps = RecentTensors[Tap](8)
        # See `watch_nonfinite`.
        self._nonfinite: (
            tuple[Callable[[], bool], Callable[[], None], Callable[[Any], None]] | None
        ) = None
        self._watched_task = -1

    # -- the eager path, from a module's output to the stored row ------------------------

    def _forward_hook(self, reg: Registration) -> Callable[..., None]:
        site = self._site(reg, "output", "")

        def hook(
            module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
        ) -> None:
            training = module.training
            if self._train_only and not training:
                return
            if graph_task_id() != -1:  # in backward(): a checkpoint's recomputation
                self._recomputed(reg, output, site)
                return
            call = reg.calls
            reg.calls = call + 1
            flags = TRAINING if training else 0
            step = self._step
            self._record(site, call, step, flags, output, args, kwargs)
            if reg.grad:
                self._hook_grads(reg, site, call, step, flags, output)

        return hook

    def _record(
        self,
        site: int,
        call: int,
        step: int,
        flags: int,
        value: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        """Keep `value` as record (`site`, `call`, `step`, `flags`); with `TUPLE` in `flags`,
        `value` is the one gradient of a 1-tuple."""
        self._recorded = True  # see __exit__
        if self._room_pending and step == self._step:
            self._make_room()
        if self._nonfinite is not None and flags & GRAD:
            task = graph_task_id()
            if task != self._watched_task:
                self._watched_task = task
                queue_at_end_of_backward(self._check_nonfinite)
        stash_value = self._default_value
        if stash_value is None:
            self._record_custom(site, call, step, flags, value, args, kwargs)
            return
        columns = self.stashes
        store = columns.store
        tensor = isinstance(value, Tensor)
        if store is not None and (tensor or _flat_tensors(value)):
            budget = self._budget
            before = store.nbytes if budget is not None else 0
            try:
                if tensor:
                    ref = store.put(value)
                else:  # e.g. attention's (output, None)
                    refs = tuple(None if v is None else store.put(v) for v in value)
            except _REFUSED as error:
                self._refuse(site, flags, error)
            except Exception:  # the object path records it, or says why it could not
                pass
            else:
                if budget is not None:
                    budget.count(columns, site, flags, store.nbytes - before)
                if tensor:
                    columns.add(site, call, step, flags, ref)
                else:
                    columns.add_object(site, call, step, flags | REFS, refs)
                return
        # The standard StashFn's result, without building an Event or a Stash.
        try:
            kept = keep(value, stash_value)
        except _REFUSED as error:
            self._refuse(site, flags, error)
        if self._nonfinite is not None:
            self._nonfinite[2](kept)
        budget = self._budget
        if budget is not None:
            # Counted like `nbytes`: an object shared with an earlier stash (a parent
            # returning its child's output) is counted once.
            budget.count(columns, site, flags, value_nbytes(kept, budget.counted))
        self._pending_copies = self._non_blocking
        columns.add_object(site, call, step, flags, kept)

    def _make_room(self) -> None:
        """`keep_steps=`: drop the oldest steps when the first record of a new step comes,
        not at `step()`, so that the kept steps are the last ones that recorded anything (a
        loop ending in `step()` opens a step that records nothing) and never more than
        `keep_steps` of them are held. A late gradient of the step before does not count."""
        self._room_pending = False
        assert self._keep_steps is not None
        self.stashes.keep_recent_steps(self._keep_steps - 1)
        if self._budget is not None:
            self._budget.recount(self.stashes)

    def _site(self, reg: Registration, kind: Kind, attr: str) -> int:
        """The `Columns` site of (`reg`, `kind`, `attr`), resolved once."""
        site = reg.sites.get((kind, attr))
        if site is None:
            site = reg.sites[kind, attr] = self.stashes.site_id(reg.name, reg.type, kind, attr)
        return site

    def _record_custom(
        self,
        site: int,
        call: int,
        step: int,
        flags: int,
        value: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
    ) -> None:
        """Record through a user's own `StashFn`, which gets an `Event`."""
        name, cls, kind, attr = self.stashes.sites[site]
        origin = Origin(name, cls, call, step, kind, attr, bool(flags & TRAINING), site)
        if flags & TUPLE:
            value = (value,)
        stash = self._stash_fn(origin.event(bool(flags & GRAD), value, args, kwargs or {}))
        if not isinstance(stash, Stash):
            self._bad_stash(stash)
        origin.stamp(stash)
        budget = self._budget
        if budget is not None:
            budget.count(self.stashes, site, flags, value_nbytes(stash.value, budget.counted))
        self.stashes.append(stash)

    def _hook_grads(
        self, reg: Registration, site: int, call: int, step: int, flags: int, value: Any
    ) -> None:
        """Hook the gradients of the tensors in `value`, recorded as one gradient stash per
        backward pass (see `grad_hooks`). Tensor hooks add no autograd node, so gradients
        stay bitwise identical and later in-place ops on `value` are allowed; a hook
        registered now sees the gradient of the value as it is now."""
        if isinstance(value, Tensor):  # the common case, without the lists below
            tensors = None
            wanted: Any = value.requires_grad
        else:
            tensors = list(iter_tensors(value))
            wanted = [i for i, t in enumerate(tensors) if t.requires_grad]
        if not torch.is_grad_enabled():
            if reg.no_grad_call != call:
                reg.no_grad_call = call
                reg.no_grad_hooked.clear()
            if wanted:
                reg.no_grad_hooked.add(site)
        if not wanted:
            return
        # partial, not a lambda: one Python frame fewer per gradient. A value holding one
        # tensor (attention's `(output, None)`) has one gradient to wait for: recorded as
        # the 1-tuple it is, without gathering.
        if tensors is None or len(tensors) == 1:
            tensor = value if tensors is None else tensors[0]
            self._hook_tensor(tensor, partial(self._record, site, call, step, flags | GRAD | TUPLE))
            return
        gather = Gather(len(tensors), partial(self._record, site, call, step, flags | GRAD))
        for i in wanted:
            tap = self._hook_tensor(tensors[i], gather.callback(i))
            gather.add(i, tensors[i], tap)

    def _hook_tensor(self, tensor: Tensor, callback: Callable[[Any], None]) -> Tap:
        """Call `callback` with `tensor`'s gradient. A parent module often returns its last
        child's output object unchanged; then one hook serves both, and calls the parent's
        callback first so gradients are recorded from the output back towards the input."""
        tap = self._recent_taps.get(tensor)
        if tap is not None:
            tap.callbacks.insert(0, callback)
            return tap
        tap = Tap(tensor, [callback])
        handles = self._grad_handles
        handles += tap.handles
        if len(handles) > self._prune_at:
            # Handles of finished graphs are dead; forget them so long runs don't grow.
            handles[:] = [h for h in handles if not handle_is_dead(h)]
            self._prune_at = max(1024, 2 * len(handles))
        self._recent_taps.put(tensor, tap)
        return tap

    # -- the other hooks: inputs and parameters, checkpoints, optimizer, `stash` --------

    def _pre_hook(self, reg: Registration) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            training = module.training
            if self._train_only and not training:
                return
            inputs = [(reg.arg_name(i), v) for i, v in enumerate(args)] if self._inputs else []
            if self._inputs:
                inputs += kwargs.items()
            if graph_task_id() != -1:  # in backward(): a checkpoint's recomputation
                for attr, value in inputs:
                    self._recomputed(reg, value, self._site(reg, "input", attr))
                return
            call = reg.calls
            if not self._outputs:  # otherwise the forward hook counts the call
                reg.calls = call + 1
            flags = TRAINING if training else 0
            step = self._step
            for attr, value in inputs:
                if next(iter_tensors(value), None) is not None:
                    site = self._site(reg, "input", attr)
                    self._record(site, call, step, flags, value, args, kwargs)
                    if reg.grad:
                        self._hook_grads(reg, site, call, step, flags, value)
            if self._params and reg.param_step != self._step_count:
                reg.param_step = self._step_count
                for attr, param in reg.params:
                    site = self._site(reg, "param", attr)
                    self._record(site, 0, step, flags, local_value(param))

        return hook

    def _recomputed(self, reg: Registration, value: Any, site: int) -> None:
        """Activation checkpointing re-runs a forward pass during `backward()`: its values
        were recorded already, but when the first run had no autograd graph
        (`use_reentrant=True`), this run's graph is the one whose gradients come back."""
        call = max(reg.calls - 1, 0)
        if reg.grad and reg.no_grad_call == call and site not in reg.no_grad_hooked:
            flags = TRAINING if reg.module.training else 0
            self._hook_grads(reg, site, call, self._step, flags, value)

    def _param_grad_hook(self, reg: Registration, attr: str) -> Callable[[Tensor], None]:
        site = self._site(reg, "param", attr)

        def hook(param: Tensor) -> None:
            training = reg.module.training
            if self._train_only and not training:
                return
            flags = GRAD | TUPLE | (TRAINING if training else 0)
            grad = param.grad
            self._record(site, 0, self._step, flags, None if grad is None else local_value(grad))

        return hook

    def _optimizer_hook(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        for reg in self._registrations:
            training = reg.module.training
            if self._train_only and not training:
                continue
            for attr, param in reg.params:
                for key, value in optimizer.state.get(param, {}).items():
                    # Skip scalars such as Adam's "step"; keep per-element state.
                    if isinstance(value, Tensor) and value.shape == param.shape:
                        site = self._site(reg, "optimizer", f"{attr}.{key}")
                        flags = TRAINING if training else 0
                        self._record(site, 0, self._step, flags, local_value(value))

    def _stash_named(self, name: str, value: Any, frame: Any, kind: Kind) -> None:
        """Record `value` for `stash`, under the innermost registered module whose
        `forward` is on the call stack from `frame` up."""
        if graph_task_id() != -1:  # in backward(): a checkpoint's recomputation
            return
        by_module = {id(reg.module): reg for reg in self._registrations}
        reg = None
        while frame is not None and reg is None:
            owner = frame.f_locals.get("self")
            reg = None if owner is None else by_module.get(id(owner))
            frame = frame.f_back
        if reg is None:
            reg = next((r for r in self._registrations if r.name == ""), None)
            if reg is None:
                if self._loose is None:  # for records outside every tracked module
                    self._loose = Registration(nn.Module(), "", True)
                reg = self._loose
        training = reg.module.training
        if self._train_only and not training:
            return
        # Inside forward the forward hook has not counted this call yet (the pre-hook has,
        # when there is no forward hook).
        call = reg.calls if self._outputs else max(reg.calls - 1, 0)
        flags = TRAINING if training else 0
        site = self._site(reg, kind, name)
        self._record(site, call, self._step, flags, value)
        if reg.grad:
            self._hook_grads(reg, site, call, self._step, flags, value)

    def _refuse(
        self, site: int, flags: int, error: ArgumentTypeError | ArgumentValueError
    ) -> NoReturn:
        """Stop tracking on a setting the tensor just recorded shows wrong, as `max_bytes=`
        does: the hooks removed, the stashes kept, the error raised through the pass."""
        self.unregister()
        name, _, kind, _ = self.stashes.sites[site]
        grad = "gradient " if flags & GRAD else ""
        raise type(error)(
            f"tensor_tracker: recording the {kind} {grad}of {name or '<root>'!r}: {error}. "
            f"Tracking stopped (hooks removed); the {len(self.stashes)} stashes so far are kept."
        ) from None

    def _bad_stash(self, stash: object) -> None:
        self.unregister()
        raise ArgumentTypeError(
            "stash= must return a tensor_tracker.Stash (e.g. "
            "Stash(event.name, event.type, event.grad, value)), but it returned "
            f"{type(stash).__name__}. Tracking stopped (hooks removed); the "
            f"{len(self.stashes)} stashes so far are kept."
        )

    # -- the non-finite watch -----------------------------------------------------------

    def watch_nonfinite(
        self,
        seen: Callable[[], bool],
        handler: Callable[[], None],
        notice: Callable[[Any], None],
    ) -> None:
        """At the end of every backward pass that records gradients, and at `step()`, call
        `handler` if `seen()` (which may wait for the device: once per pass, never in a
        hook) says a non-finite value was recorded; `handler` may raise, which the
        `backward()` call then raises, before any optimizer step. `seen` watches what the
        store keeps; the values kept as objects (a dict or nested output's statistics) are
        shown to `notice` as they are recorded."""
        self._nonfinite = (seen, handler, notice)

    def _check_nonfinite(self) -> None:
        if self._nonfinite is not None:
            seen, handler, _ = self._nonfinite
            if seen():
                self._nonfinite = None  # once: the handler decides what happens next
                handler()
