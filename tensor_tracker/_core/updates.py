"""`UpdateHooks`: what `capture="updates"` records at each `optimizer.step()`.

For each parameter of a registered module that the step changes (the optimizer holds it
and it has a gradient), two records of that module, both with `attr` the parameter's name:

- `kind="update"`: the update, the parameter's value after the step minus its value
  before, recorded as any tensor is (`stats=`, or a copy);
- `kind="update_ratio"`: one number, `rms(update) / rms(parameter before the step)`, the
  update's size relative to the parameter's (about 1e-3 in healthy training; 0/0 is NaN).

The value before the step comes from one of two places:

- `torch.optim.Adam` and `AdamW` (`adam_before`): rebuilt after the step from the
  optimizer's new state and hyper-parameters, without a copy of the parameter. The
  arithmetic is the optimizer's own (bias corrections, `eps`, `maximize`, `amsgrad`,
  Adam's L2 weight decay folded into the moments, AdamW's decoupled weight decay
  undone), so the update is what a copy gives up to the rounding of the parameter
  itself (one unit in its last place, which both carry: see doc/benchmarks.md for the
  measured error). Also for `foreach=True`, which rounds as the single-tensor loop does.
- anything else (`copy_before`): SGD, Adam with `capturable`, `differentiable` or
  `fused` (their arithmetic or their device-side step differs), a learning rate or betas
  held in a device tensor (reading them would wait for the device), complex or sharded
  parameters: the parameters are copied before the step into one buffer per (device,
  dtype), allocated when first needed and reused at every recorded step.

No host synchronisation; the hooks are attached only during recorded steps (`every=`).
The optimizer's moments (Adam's `exp_avg`, `exp_avg_sq`) are recorded by `optimizer=`
itself, as records of kind `"optimizer"` (their norm is `rms * sqrt(numel)`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from .clock import Clock
from .columns import TRAINING
from .dist import local_value
from .registrations import Registration, Registrations
from .sink import RecordSink

__all__ = ["UpdateHooks", "adam_before", "rebuilds_before"]

_PLAIN = (Tensor, nn.Parameter)


def _on_host(value: Any) -> bool:
    """Whether a hyper-parameter can be read without waiting for a device."""
    return not isinstance(value, Tensor) or value.device.type == "cpu"


def rebuilds_before(optimizer: torch.optim.Optimizer, group: Mapping[str, Any], p: Tensor) -> bool:
    """Whether `adam_before` gives `p`'s value before the step exactly (see the module
    docstring); otherwise the parameter is copied before the step.

    Example:
        >>> w = nn.Parameter(torch.ones(2))
        >>> adam, sgd = torch.optim.Adam([w]), torch.optim.SGD([w], lr=0.1)
        >>> rebuilds_before(adam, adam.param_groups[0], w), rebuilds_before(sgd, sgd.param_groups[0], w)
        (True, False)
    """
    return (
        type(optimizer) in (torch.optim.Adam, torch.optim.AdamW)
        and not (group.get("capturable") or group.get("differentiable") or group.get("fused"))
        and type(p) in _PLAIN
        and not p.is_complex()
        and all(_on_host(v) for v in (group["lr"], *group["betas"]))
    )


def adam_before(p: Tensor, state: Mapping[str, Any], group: Mapping[str, Any]) -> Tensor:
    """`p`'s value before the Adam/AdamW step that just ran, rebuilt from the optimizer's
    new `state` and its `group`'s hyper-parameters as `torch.optim.adam` computes the step
    (a new tensor; `rebuilds_before` says when this is exact).

    Example:
        >>> w = nn.Parameter(torch.tensor([1.0, -2.0]))
        >>> adam = torch.optim.AdamW([w], lr=0.1, weight_decay=0.5)
        >>> w.grad = torch.tensor([0.3, 0.4]); adam.step()
        >>> adam_before(w.detach(), adam.state[w], adam.param_groups[0])
        tensor([ 1., -2.])
    """
    beta1, beta2 = (float(b) for b in group["betas"])
    lr, step = float(group["lr"]), float(state["step"])
    # The same Python floats, in the same order, as `_single_tensor_adam` (and `foreach`).
    bias_correction2_sqrt = (1 - beta2**step) ** 0.5
    step_size = lr / (1 - beta1**step)
    second = state["max_exp_avg_sq"] if group["amsgrad"] else state["exp_avg_sq"]
    # One allocation, reused in place: the rounding is that of the optimizer's own
    # `(sqrt(v) / c).add_(eps)` and `addcdiv_`.
    denom = second.sqrt().div_(bias_correction2_sqrt).add_(group["eps"])
    before = torch.addcdiv(p, state["exp_avg"], denom, value=step_size, out=denom)
    weight_decay = group["weight_decay"]
    if weight_decay and group.get("decoupled_weight_decay", False):
        before.div_(1 - lr * weight_decay)
    return before


def _norm(t: Tensor) -> Tensor:
    # Half-precision parameters' norms in float32: their squares overflow float16.
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.float()
    norm: Tensor = torch.linalg.vector_norm(t)
    return norm


_Target = tuple[int, int, int, Tensor, Mapping[str, Any], Tensor | None]
"""(update site, ratio site, flags, parameter, its param group, its copy before the step
or None: rebuilt after it)."""


class UpdateHooks:
    """The step pre- and post-hooks of `capture="updates"` (see the module docstring).

    Args:
        clock: the step records carry.
        sink: where records go.
        train_only: record only the parameters of modules in training mode.

    Example:
        >>> from tensor_tracker._core.options import Options
        >>> sink = RecordSink(Options(), stop=lambda: None)
        >>> linear = nn.Linear(2, 1); _ = nn.init.ones_(linear.weight)
        >>> regs = Registrations(sink.site_id); _ = regs.add(linear, "fc", True)
        >>> sgd = torch.optim.SGD(linear.parameters(), lr=0.5)
        >>> handles = UpdateHooks(Clock(lambda kind: 1), sink, False).attach(sgd, regs)
        >>> linear(torch.ones(1, 2)).sum().backward(); sgd.step()
        >>> [(s.kind, s.attr, s.value.tolist()) for s in sink.stashes][:2]
        [('update', 'weight', [[-0.5, -0.5]]), ('update_ratio', 'weight', 0.5)]
    """

    def __init__(self, clock: Clock, sink: RecordSink, train_only: bool) -> None:
        self._clock = clock
        self._record = sink.record
        self._train_only = train_only
        self._buffers: dict[tuple[torch.device, torch.dtype], Tensor] = {}
        self._targets: list[_Target] = []

    def attach(self, optimizer: torch.optim.Optimizer, regs: Registrations) -> list[Any]:
        """Hook `optimizer`'s steps for the parameters of `regs`; the hooks' handles."""
        return [
            optimizer.register_step_pre_hook(self._before_hook(regs)),
            optimizer.register_step_post_hook(self._after_hook()),
        ]

    def release(self) -> None:
        """Free the buffers of the copies (a later step allocates them again)."""
        self._buffers.clear()
        self._targets.clear()

    def _before_hook(self, regs: Registrations) -> Callable[..., None]:
        def hook(optimizer: torch.optim.Optimizer, *_: Any) -> None:
            groups = {p: g for g in optimizer.param_groups for p in g["params"]}
            targets: list[_Target] = []
            copies: list[tuple[int, Tensor]] = []
            for reg in regs.items:
                if reg.params:
                    self._targets_of(reg, optimizer, groups, targets, copies)
            self._copy(copies, targets)
            self._targets = targets

        return hook

    def _targets_of(
        self,
        reg: Registration,
        optimizer: torch.optim.Optimizer,
        groups: Mapping[Tensor, Mapping[str, Any]],
        targets: list[_Target],
        copies: list[tuple[int, Tensor]],
    ) -> None:
        """Add the parameters of `reg` that this step changes to `targets` (those to copy
        before it also to `copies`, by their index in `targets`)."""
        training = reg.module.training
        if self._train_only and not training:
            return
        flags = TRAINING if training else 0
        for attr, p in reg.params:
            group = groups.get(p)
            if group is None or p.grad is None:  # the step leaves it as it is
                continue
            if not rebuilds_before(optimizer, group, p):
                copies.append((len(targets), local_value(p).detach()))
            sites = reg.site("update", attr), reg.site("update_ratio", attr)
            targets.append((*sites, flags, p, group, None))

    def _copy(self, copies: list[tuple[int, Tensor]], targets: list[_Target]) -> None:
        """Copy each parameter of `copies` into its slice of the buffer of its device and
        dtype (grown when a parameter is added, else allocated once)."""
        sizes: dict[tuple[torch.device, torch.dtype], int] = {}
        for _, value in copies:
            key = (value.device, value.dtype)
            sizes[key] = sizes.get(key, 0) + value.numel()
        for key, size in sizes.items():
            buffer = self._buffers.get(key)
            if buffer is None or buffer.numel() < size:
                self._buffers[key] = torch.empty(size, device=key[0], dtype=key[1])
        offsets = dict.fromkeys(sizes, 0)
        for i, value in copies:
            key = (value.device, value.dtype)
            start, offsets[key] = offsets[key], offsets[key] + value.numel()
            before = self._buffers[key][start : offsets[key]].view(value.shape).copy_(value)
            targets[i] = (*targets[i][:5], before)

    def _after_hook(self) -> Callable[..., None]:
        clock, record = self._clock, self._record

        def hook(optimizer: torch.optim.Optimizer, *_: Any) -> None:
            targets, self._targets = self._targets, []
            step, state = clock.step, optimizer.state
            for update_site, ratio_site, flags, p, group, before in targets:
                after = local_value(p).detach()
                if before is None:
                    before = adam_before(after, state[p], group)
                size = _norm(before)
                update = torch.sub(after, before, out=before)  # the copy is not needed again
                record(update_site, 0, step, flags, update)
                record(ratio_site, 0, step, flags, _norm(update) / size)

        return hook
