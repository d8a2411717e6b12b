"""`Registrations`: the modules a tracker records, what each one's hooks need, and the
handles of the hooks attached to them.

A `Registration` is one module, resolved once at `register` time (its name, parameters,
argument names, the `Columns` sites of what is recorded of it) and carrying the two
counters its hooks keep (calls in this step, traced calls). `Registrations` holds them in
order, with the compiled callables of the models they came from, and keeps them across
`with` blocks (`suspend`, `resume`) until `forget`.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import Any

from torch import nn
from torch.utils.hooks import RemovableHandle

from .records import Kind

__all__ = ["Registration", "Registrations", "SiteId"]

SiteId = Callable[[str, type[nn.Module], Kind, str], int]
"""What numbers a site (name, module class, kind, attr): `RecordSink.site_id`."""


class Registration:
    """One registered module and what its hooks need, resolved once at `register` time.

    Example:
        >>> reg = Registration(nn.Linear(2, 2), "fc", True, lambda *site: 7)
        >>> reg.site("output", ""), [name for name, _ in reg.params], reg.arg_name(0)
        (7, ['weight', 'bias'], 'input')
    """

    __slots__ = (
        "_site_id",
        "arg_names",
        "calls",
        "counted_call",
        "counts",
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

    def __init__(self, module: nn.Module, name: str, grad: bool, site_id: SiteId) -> None:
        self.module = module
        self.name = name
        self.type = type(module)
        self.grad = grad
        self._site_id = site_id
        self.calls = 0  # calls in this step: the `call` of its records
        # See `count`: the call whose ops and taps `counts` counts.
        self.counted_call = -1
        self.counts: dict[str, int] = {}
        self.traced_calls = 0  # see CompiledHooks.forward_hook
        self.sites: dict[tuple[Kind, str], int] = {}  # see `site`
        self.param_step = -1  # the step (count) whose parameters were recorded last
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
        """The name of positional argument `index` of the module's `forward`."""
        return self.arg_names[index] if index < len(self.arg_names) else str(index)

    def count(self, name: str, call: int) -> int:
        """How many times `name` (an op, a tap) was counted before in call `call` of this
        step; counts this one."""
        if call != self.counted_call:
            self.counted_call = call
            self.counts.clear()
        k = self.counts.get(name, 0)
        self.counts[name] = k + 1
        return k

    def site(self, kind: Kind, attr: str) -> int:
        """The site of this module's (`kind`, `attr`), numbered once."""
        site = self.sites.get((kind, attr))
        if site is None:
            site = self.sites[kind, attr] = self._site_id(self.name, self.type, kind, attr)
        return site


class Registrations:
    """The registered modules, in order, and the handles of the hooks attached to them.

    Args:
        site_id: what numbers the sites of a registration (`RecordSink.site_id`).
    """

    def __init__(self, site_id: SiteId) -> None:
        self._site_id = site_id
        self.items: list[Registration] = []
        """The registered modules, in registration order."""
        self.compiled: list[Callable[..., Any]] = []
        """The compiled callables (torch.compile) of the models registered (see
        `Recorder.register_all`): what must recompile to see the hooks."""
        self.modules: weakref.WeakValueDictionary[str, nn.Module] = weakref.WeakValueDictionary()
        """Every module registered so far, by name, also after `forget` (held weakly)."""
        self.handles: list[RemovableHandle] = []
        """The handles of the hooks attached to the modules (and to the optimizer)."""
        self.forgotten = False
        """Whether `forget` emptied them (by `unregister()` or a `MemoryBudgetError`)."""
        self._suspended: tuple[list[Registration], list[Callable[..., Any]]] | None = None
        self._loose: Registration | None = None  # see `innermost`

    def add(self, module: nn.Module, name: str, grad: bool) -> Registration:
        """Register `module` under `name`."""
        registration = Registration(module, name, grad, self._site_id)
        self.items.append(registration)
        self.modules[name] = module
        self.forgotten = False
        return registration

    def detach(self) -> None:
        """Remove every hook attached (the registrations stay)."""
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    def forget(self) -> None:
        """Remove the hooks and forget the registrations (`modules` keeps their names)."""
        self.detach()
        self.items = []
        self.compiled = []
        self._suspended = None
        self.forgotten = True

    def suspend(
        self, registrations: list[Registration], compiled: list[Callable[..., Any]]
    ) -> None:
        """Keep `registrations` (and `compiled`) for the next `with` block (`resume`)."""
        self._suspended = (registrations, compiled) if registrations else None

    def resume(self) -> list[Registration]:
        """Take back the registrations `suspend` kept, before those registered since; returns
        them (to attach), or [] when none were kept."""
        if self._suspended is None:
            return []
        (registrations, compiled), self._suspended = self._suspended, None
        self.items = registrations + self.items
        self.compiled = compiled + self.compiled
        self.forgotten = False
        return registrations

    def restart_calls(self) -> None:
        """A new step: every module's calls are numbered from 0 again."""
        for registration in self.items:
            registration.calls = 0
            registration.counted_call = -1

    def innermost(self, frame: Any) -> Registration:
        """The innermost registered module whose `forward` is on the call stack from
        `frame` up; else the root (name ""), else one for records outside every module."""
        by_module = {id(reg.module): reg for reg in self.items}
        while frame is not None:
            owner = frame.f_locals.get("self")
            reg = None if owner is None else by_module.get(id(owner))
            if reg is not None:
                return reg
            frame = frame.f_back
        root = next((r for r in self.items if r.name == ""), None)
        if root is not None:
            return root
        if self._loose is None:
            self._loose = Registration(nn.Module(), "", True, self._site_id)
        return self._loose
