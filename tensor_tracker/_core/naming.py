"""The one naming of a model's modules: what `track()`, `summary()`, `module_graph()` and
`autograd_graph()` call each module and each parameter.

- The names are `named_modules()`'s dotted paths (the root is `""`).
- A module held under several names (`self.b = self.a`, tied blocks) is listed once, under
  the first name `named_modules()` finds it by.
- Wrappers that frameworks put around a model are not listed and add nothing to the names:
  the module they wrap takes the wrapper's name. These are `torch.compile`'s
  `OptimizedModule` (`_orig_mod`), `DistributedDataParallel` (`module`), FSDP1's
  `FullyShardedDataParallel` (`_fsdp_wrapped_module`) and activation checkpointing's
  `CheckpointWrapper` (`_checkpoint_wrapped_module`). FSDP2 (`fully_shard`) wraps nothing:
  its names are the model's already.

So a compiled, DDP-wrapped or FSDP-wrapped model has the names of the plain model.
"""

from __future__ import annotations

from torch import nn

__all__ = ["WRAPPERS", "module_names", "parameter_names", "unwrapped", "wrapped_module"]

WRAPPERS = {
    "OptimizedModule": "_orig_mod",
    "DistributedDataParallel": "module",
    "FullyShardedDataParallel": "_fsdp_wrapped_module",
    "CheckpointWrapper": "_checkpoint_wrapped_module",
    "OffloadWrapper": "_checkpoint_wrapped_module",
}
"""Wrapper class name -> the attribute holding the module it wraps."""


def wrapped_module(module: nn.Module) -> nn.Module | None:
    """The module that `module` wraps, when it is one of the `WRAPPERS`; else `None`.

    Example:
        >>> inner = nn.Linear(2, 2)
        >>> wrapped_module(torch.compile(inner)) is inner, wrapped_module(inner)
        (True, None)
    """
    attr = WRAPPERS.get(type(module).__name__)
    inner = None if attr is None else module._modules.get(attr)
    return inner if isinstance(inner, nn.Module) else None


def unwrapped(model: nn.Module) -> nn.Module:
    """`model` without the `WRAPPERS` around it: the module whose name is `""`.

    Example:
        >>> inner = nn.Linear(2, 2)
        >>> unwrapped(torch.compile(inner)) is inner
        True
    """
    inner = wrapped_module(model)
    while inner is not None:
        model, inner = inner, wrapped_module(inner)
    return model


def module_names(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Every module of `model` once, wrappers left out, as `(name, module)` in the order of
    `model.named_modules()` (parents before their children).

    Example:
        >>> class Tied(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.a = nn.Linear(2, 2)
        ...         self.b = self.a
        >>> [name for name, _ in module_names(torch.compile(Tied()))]
        ['', 'a']
    """
    found: list[tuple[str, nn.Module]] = []
    seen: set[int] = set()
    # Iterative, parents before children, each child list in order: named_modules' order.
    pending: list[tuple[str, nn.Module]] = [("", model)]
    while pending:
        name, module = pending.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        inner = wrapped_module(module)
        children = [
            (child, f"{name}.{attr}" if name else attr)
            for attr, child in module._modules.items()
            if child is not None and child is not inner
        ]
        if inner is None:
            found.append((name, module))
        else:  # the wrapped module goes by the wrapper's name, before the wrapper's others
            children.insert(0, (inner, name))
        pending.extend((path, child) for child, path in reversed(children))
    return found


def parameter_names(model: nn.Module) -> dict[int, str]:
    """The qualified name of each parameter of `model` by `id`: its module's name (see
    `module_names`) and attribute, e.g. `"0.weight"`; a shared parameter by its first name.

    Example:
        >>> names = parameter_names(torch.compile(nn.Sequential(nn.Linear(2, 2))))
        >>> sorted(names.values())
        ['0.bias', '0.weight']
    """
    names: dict[int, str] = {}
    for module_name, module in module_names(model):
        for attr, param in module.named_parameters(recurse=False):
            names.setdefault(id(param), f"{module_name}.{attr}" if module_name else attr)
    return names
