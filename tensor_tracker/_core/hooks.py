"""`EagerHooks`: the hooks that run inside the user's eager pass, from what they see to
`RecordSink.record`.

A forward hook numbers the call (`Registration.calls`), hands the output to the sink and
hooks its gradients (`hook_grads`: tensor hooks, see `grad_hooks`), which come back into
the same `record`. A pre-hook records inputs and parameters, a post-accumulate hook
parameter gradients, an optimizer hook its state; `stash_named` records what
`tensor_tracker.stash` is given. Which tensors are hooked is `plan`'s decision.

Hot path: no host synchronisation, little Python; each hook binds what it needs (the
clock, the sink's `record`, its registration and site) when it is made.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from .._torch_compat import graph_task_id
from .clock import Clock
from .columns import GRAD, TRAINING, TUPLE
from .dist import local_value
from .grad_hooks import Gather, Tap, handle_is_dead
from .memo import RecentTensors
from .plan import grad_targets, optimizer_states, recorded_inputs
from .records import Kind
from .registrations import Registration, Registrations
from .sink import RecordSink

__all__ = ["EagerHooks"]


class EagerHooks:
    """Makes the eager hooks of registered modules; keeps the gradient hooks they add.

    Args:
        clock: the step records carry (`clock.step`) and its count (`clock.count`).
        sink: where records go.
        train_only: record only while a module is in training mode.

    Example:
        >>> from tensor_tracker._core.options import Options
        >>> sink = RecordSink(Options(), stop=lambda: None)
        >>> hooks = EagerHooks(Clock(lambda kind: 1), sink, train_only=False)
        >>> linear = nn.Linear(2, 2)
        >>> reg = Registration(linear, "fc", False, sink.site_id)
        >>> handle = linear.register_forward_hook(hooks.forward_hook(reg), with_kwargs=True)
        >>> _ = linear(torch.ones(1, 2)); handle.remove()
        >>> [(s.name, s.call, s.grad) for s in sink.stashes]
        [('fc', 0, False)]
    """

    def __init__(self, clock: Clock, sink: RecordSink, train_only: bool) -> None:
        self._clock = clock
        self._sink = sink
        self._record = sink.record
        self._train_only = train_only
        self.grad_handles: list[Any] = []
        """The handles of the gradient hooks on tensors (removed by `detach`)."""
        self._prune_at = 1024
        # A few, not one: a parent returning (loss, logits) hooks loss before it meets its
        # child's logits again.
        self._recent_taps = RecentTensors[Tap](8)

    def forward_hook(self, reg: Registration) -> Callable[..., None]:
        """The forward hook of `reg`'s module: the output, and its gradient."""
        site = reg.site("output", "")
        clock, record, hook_grads = self._clock, self._record, self.hook_grads
        train_only, recomputed = self._train_only, self._recomputed

        def hook(
            module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
        ) -> None:
            training = module.training
            if train_only and not training:
                return
            if graph_task_id() != -1:  # in backward(): a checkpoint's recomputation
                recomputed(reg, output, site)
                return
            call = reg.calls
            reg.calls = call + 1
            flags = TRAINING if training else 0
            step = clock.step
            record(site, call, step, flags, output, args, kwargs)
            if reg.grad:
                hook_grads(reg, site, call, step, flags, output)

        return hook

    def hook_grads(
        self, reg: Registration, site: int, call: int, step: int, flags: int, value: Any
    ) -> None:
        """Hook the gradients of the tensors in `value`, recorded as one gradient stash per
        backward pass (see `grad_hooks`). Tensor hooks add no autograd node, so gradients
        stay bitwise identical and later in-place ops on `value` are allowed; a hook
        registered now sees the gradient of the value as it is now."""
        tensors: list[Tensor] | None
        wanted: Any
        if isinstance(value, Tensor):  # `grad_targets`' first case inline: one call fewer
            tensors, wanted = None, value.requires_grad
        else:
            tensors, wanted = grad_targets(value)
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
        handles = self.grad_handles
        handles += tap.handles
        if len(handles) > self._prune_at:
            # Handles of finished graphs are dead; forget them so long runs don't grow.
            handles[:] = [h for h in handles if not handle_is_dead(h)]
            self._prune_at = max(1024, 2 * len(handles))
        self._recent_taps.put(tensor, tap)
        return tap

    def detach(self) -> None:
        """Remove the gradient hooks on tensors and forget the tensors seen."""
        for handle in self.grad_handles:
            handle.remove()
        self.grad_handles.clear()
        self._recent_taps.clear()

    # -- the other hooks: inputs and parameters, checkpoints, optimizer, `stash` --------

    def pre_hook(
        self, reg: Registration, inputs: bool, params: bool, counts: bool
    ) -> Callable[..., None]:
        """The forward pre-hook of `reg`'s module: its `inputs`, and its `params` at the
        first call of each step; `counts`: it numbers the calls (no forward hook does)."""
        clock, record, hook_grads = self._clock, self._record, self.hook_grads
        train_only, recomputed = self._train_only, self._recomputed

        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            training = module.training
            if train_only and not training:
                return
            values = recorded_inputs(reg.arg_names, args, kwargs) if inputs else []
            if graph_task_id() != -1:  # in backward(): a checkpoint's recomputation
                for attr, value in values:
                    recomputed(reg, value, reg.site("input", attr))
                return
            call = reg.calls
            if counts:
                reg.calls = call + 1
            flags = TRAINING if training else 0
            step = clock.step
            for attr, value in values:
                site = reg.site("input", attr)
                record(site, call, step, flags, value, args, kwargs)
                if reg.grad:
                    hook_grads(reg, site, call, step, flags, value)
            if params and reg.param_step != clock.count:
                reg.param_step = clock.count
                for attr, param in reg.params:
                    record(reg.site("param", attr), 0, step, flags, local_value(param))

        return hook

    def _recomputed(self, reg: Registration, value: Any, site: int) -> None:
        """Activation checkpointing re-runs a forward pass during `backward()`: its values
        were recorded already, but when the first run had no autograd graph
        (`use_reentrant=True`), this run's graph is the one whose gradients come back."""
        call = max(reg.calls - 1, 0)
        if reg.grad and reg.no_grad_call == call and site not in reg.no_grad_hooked:
            flags = TRAINING if reg.module.training else 0
            self.hook_grads(reg, site, call, self._clock.step, flags, value)

    def param_grad_hook(self, reg: Registration, attr: str) -> Callable[[Tensor], None]:
        """The post-accumulate-grad hook of `reg`'s parameter `attr`."""
        site = reg.site("param", attr)
        clock, record, train_only = self._clock, self._record, self._train_only

        def hook(param: Tensor) -> None:
            training = reg.module.training
            if train_only and not training:
                return
            flags = GRAD | TUPLE | (TRAINING if training else 0)
            grad = param.grad
            record(site, 0, clock.step, flags, None if grad is None else local_value(grad))

        return hook

    def optimizer_hook(self, registrations: Registrations) -> Callable[..., None]:
        """The step post-hook of an optimizer: its state of the registered modules'
        parameters (see `plan.optimizer_states`)."""
        clock, record, train_only = self._clock, self._record, self._train_only

        def hook(optimizer: torch.optim.Optimizer, *_: Any) -> None:
            state, step = optimizer.state, clock.step
            for reg in registrations.items:
                # Most modules (containers, activations) hold no parameter of their own:
                # no call and no list for them, at every optimizer step.
                if not reg.params:
                    continue
                training = reg.module.training
                if train_only and not training:
                    continue
                flags = TRAINING if training else 0
                for attr, value in optimizer_states(reg.params, state):
                    record(reg.site("optimizer", attr), 0, step, flags, local_value(value))

        return hook

    def stash_named(
        self,
        reg: Registration,
        name: str,
        value: Any,
        kind: Kind,
        counted: bool,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        number: int | None = None,
    ) -> None:
        """Record `value` for `tensor_tracker.stash`, `tap` or an op (`kind`) under `reg`,
        whose `forward` is running (`counted`: its pre-hook numbered this call already, as
        when no forward hook does). An op's `args`/`kwargs` (its inputs) go to the record
        (`RecordSink.record`, a `stash=`'s `Event`). An op is numbered within the call
        (`"softmax#0"`), a tap from its second use (`"h"`, `"h#1"`); `number`, when
        given, is that number, counted already (a compiled graph's `CompiledHooks.inner`)."""
        if graph_task_id() != -1:  # in backward(): a checkpoint's recomputation
            return
        training = reg.module.training
        if self._train_only and not training:
            return
        call = max(reg.calls - 1, 0) if counted else reg.calls
        if kind == "op" or kind == "tap":
            k = reg.count(name, call) if number is None else number
            if k or kind == "op":
                name = f"{name}#{k}"
        flags = TRAINING if training else 0
        site = reg.site(kind, name)
        step = self._clock.step
        # An attention call's inputs also give `stats.attention_logits` its logits per head.
        attention = kind == "op" and name.startswith("scaled_dot_product_attention#")
        self._record(site, call, step, flags, value, args, kwargs, attention)
        if reg.grad:
            self.hook_grads(reg, site, call, step, flags, value)
