"""Walking the nested structures that modules return: tuples, lists, dicts, dataclasses."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any

from torch import Tensor

__all__ = ["iter_leaves", "iter_tensors", "rmap_tensor"]


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(value, "_fields")


def rmap_tensor(value: Any, fn: Callable[[Tensor], Any]) -> Any:
    """Apply `fn` to every tensor inside `value`, rebuilding the same containers.

    Recurses through tuples (namedtuples included), lists, dicts and other mappings (keys
    included; `OrderedDict`, `UserDict`, a Hugging Face `ModelOutput` or `BatchEncoding`
    keep their class) and
    dataclass instances (fields with `init=False` are set after construction). Anything else
    is returned unchanged.

    Args:
        value: a tensor or any nesting of the containers above.
        fn: called on each tensor; its result replaces the tensor.

    Example:
        >>> rmap_tensor({"a": torch.ones(2), "b": [torch.zeros(1), "text"]}, lambda t: t.sum())
        {'a': tensor(2.), 'b': [tensor(0.), 'text']}
    """
    if isinstance(value, Tensor):
        return fn(value)
    if isinstance(value, (tuple, list)):
        items = [rmap_tensor(v, fn) for v in value]
        if type(value) is tuple:
            return tuple(items)
        if type(value) is list:
            return items
        if _is_namedtuple(value):
            return type(value)(*items)
        return type(value)(items)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _rmap_dataclass(value, fn)
    if isinstance(value, Mapping):
        items_ = [(rmap_tensor(k, fn), rmap_tensor(v, fn)) for k, v in value.items()]
        if type(value) is dict:
            return dict(items_)
        return _rebuild_mapping(value, items_)
    return value


def _rebuild_mapping(value: Mapping[Any, Any], items: list[tuple[Any, Any]]) -> Any:
    if isinstance(value, MutableMapping):
        # copy.copy keeps the class and its extra state (defaultdict's factory, the
        # encodings of a Hugging Face BatchEncoding, which is a UserDict).
        try:
            rebuilt = copy.copy(value)
            rebuilt.clear()
            rebuilt.update(items)
            return rebuilt
        except Exception:  # a class that refuses copying or clearing: try its constructor
            pass
    factory: Any = type(value)
    try:
        return factory(items)
    except Exception:
        return dict(items)


def _rmap_dataclass(value: Any, fn: Callable[[Tensor], Any]) -> Any:
    fields = [f for f in dataclasses.fields(value) if hasattr(value, f.name)]
    # Map in field order so that fn sees tensors in the order iter_tensors yields them.
    mapped = {f.name: rmap_tensor(getattr(value, f.name), fn) for f in fields}
    rebuilt = type(value)(**{f.name: mapped[f.name] for f in fields if f.init})
    for f in fields:
        if not f.init:
            # object.__setattr__ also works on frozen dataclasses.
            object.__setattr__(rebuilt, f.name, mapped[f.name])
    return rebuilt


def iter_leaves(value: Any) -> Iterator[Any]:
    """Yield everything inside `value` that is not a container (tensors, numbers, `None`,
    other objects; dict keys included), in the order `rmap_tensor` visits them.

    Example:
        >>> list(iter_leaves({"a": (1, None), "b": [torch.tensor(2.0)]}))
        ['a', 1, None, 'b', tensor(2.)]
    """
    if isinstance(value, (tuple, list)):
        for v in value:
            yield from iter_leaves(v)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            if hasattr(value, f.name):
                yield from iter_leaves(getattr(value, f.name))
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from iter_leaves(k)
            yield from iter_leaves(v)
    else:
        yield value


def iter_tensors(value: Any) -> Iterator[Tensor]:
    """Yield the tensors inside `value` in the order `rmap_tensor` visits them.

    Example:
        >>> [t.item() for t in iter_tensors((torch.tensor(1), {"x": torch.tensor(2)}))]
        [1, 2]
    """
    if isinstance(value, Tensor):  # the common case, without a generator
        yield value
        return
    for leaf in iter_leaves(value):
        if isinstance(leaf, Tensor):
            yield leaf
