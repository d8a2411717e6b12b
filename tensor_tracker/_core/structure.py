"""Walking the nested structures that modules return: tuples, lists, dicts, dataclasses,
pytree nodes and Hugging Face caches."""

from __future__ import annotations

import copy
import dataclasses
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any

from torch import Tensor
from torch.utils._pytree import SUPPORTED_NODES

from .._validate import check_callable

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

    Also walked, rebuilt as new objects of their class: types registered with
    `torch.utils._pytree.register_pytree_node` (e.g. `collections.deque`; register your own
    classes this way), and Hugging Face caches (`transformers.cache_utils.Cache` such as
    `DynamicCache`, and their layers), whose attributes are mapped one by one. A pytree node
    that cannot be rebuilt from the mapped children comes back as a list of them.

    Args:
        value: a tensor or any nesting of the containers above.
        fn: called on each tensor; its result replaces the tensor.

    Example:
        >>> rmap_tensor({"a": torch.ones(2), "b": [torch.zeros(1), "text"]}, lambda t: t.sum())
        {'a': tensor(2.), 'b': [tensor(0.), 'text']}
    """
    if not callable(fn):
        check_callable(fn, "rmap_tensor(value, fn): fn", "Tensor -> value")
    if isinstance(value, Tensor):
        return fn(value)
    return rmap(value, fn, None)


def rmap(value: Any, fn: Callable[[Tensor], Any], leaf: Callable[[Any], Any] | None) -> Any:
    """`rmap_tensor`, with `leaf` (when given) applied to everything that is neither a
    tensor nor a container it walks."""
    if isinstance(value, Tensor):
        return fn(value)
    if type(value) in _SCALARS:
        return value
    if isinstance(value, (tuple, list)):
        items = [rmap(v, fn, leaf) for v in value]
        if type(value) is tuple:
            return tuple(items)
        if type(value) is list:
            return items
        if _is_namedtuple(value):
            return type(value)(*items)
        return type(value)(items)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _rmap_dataclass(value, fn, leaf)
    if isinstance(value, Mapping):
        items_ = [(rmap(k, fn, leaf), rmap(v, fn, leaf)) for k, v in value.items()]
        if type(value) is dict:
            return dict(items_)
        return _rebuild_mapping(value, items_)
    node = SUPPORTED_NODES.get(type(value))
    if node is not None:
        children, context = node.flatten_fn(value)
        mapped = [rmap(c, fn, leaf) for c in children]
        try:
            return node.unflatten_fn(mapped, context)
        except Exception:  # e.g. a class that checks its children are tensors
            return mapped
    if walks_attributes(value):
        rebuilt = object.__new__(type(value))
        vars(rebuilt).update({k: rmap(v, fn, leaf) for k, v in vars(value).items()})
        return rebuilt
    return value if leaf is None else leaf(value)


# Types that are never containers: iter_leaves and rmap return them at once.
_SCALARS = frozenset({type(None), bool, int, float, str})

# Classes whose instances hold tensors as plain attributes and are walked attribute by
# attribute (rebuilt with object.__new__, so __init__ is not called): Hugging Face caches,
# which the model keeps updating in place during generate(). Looked up in sys.modules
# only, so that nothing is imported here.
_ATTRIBUTE_CLASSES = {
    "transformers.cache_utils": (
        "Cache",
        "CacheLayerMixin",
        "LinearAttentionCacheLayerMixin",
        "DummyLayer",
    ),
}
_attribute_types: tuple[type, ...] = ()


def walks_attributes(value: Any) -> bool:
    """Whether `value` is an instance of one of `_ATTRIBUTE_CLASSES`."""
    global _attribute_types
    if _ATTRIBUTE_CLASSES:  # pick up the classes of modules imported since the last call
        for name in [n for n in _ATTRIBUTE_CLASSES if n in sys.modules]:
            module, classes = sys.modules[name], _ATTRIBUTE_CLASSES.pop(name)
            found = (getattr(module, c, None) for c in classes)
            _attribute_types += tuple(c for c in found if isinstance(c, type))
    return bool(_attribute_types) and isinstance(value, _attribute_types)


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


def _rmap_dataclass(
    value: Any, fn: Callable[[Tensor], Any], leaf: Callable[[Any], Any] | None
) -> Any:
    fields = [f for f in dataclasses.fields(value) if hasattr(value, f.name)]
    # Map in field order so that fn sees tensors in the order iter_tensors yields them.
    mapped = {f.name: rmap(getattr(value, f.name), fn, leaf) for f in fields}
    rebuilt = type(value)(**{f.name: mapped[f.name] for f in fields if f.init})
    for f in fields:
        if not f.init:
            # object.__setattr__ also works on frozen dataclasses.
            object.__setattr__(rebuilt, f.name, mapped[f.name])
    return rebuilt


def iter_leaves(value: Any) -> Iterator[Any]:
    """Yield everything inside `value` that is not a container (tensors, numbers, `None`,
    other objects; dict keys included), in the order `rmap_tensor` visits them. The
    containers are those `rmap_tensor` walks.

    Example:
        >>> list(iter_leaves({"a": (1, None), "b": [torch.tensor(2.0)]}))
        ['a', 1, None, 'b', tensor(2.)]
    """
    if isinstance(value, Tensor) or type(value) in _SCALARS:
        yield value
    elif isinstance(value, (tuple, list)):
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
    elif type(value) in SUPPORTED_NODES:
        for child in SUPPORTED_NODES[type(value)].flatten_fn(value)[0]:
            yield from iter_leaves(child)
    elif walks_attributes(value):
        for v in vars(value).values():
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
