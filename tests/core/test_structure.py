"""rmap_tensor / iter_tensors over every container a module may return."""

from __future__ import annotations

import collections
import dataclasses
import types
from typing import NamedTuple

import torch

from tensor_tracker import Stash, default_stash_value, rmap_tensor
from tensor_tracker._core.structure import iter_tensors


def double(t: torch.Tensor) -> torch.Tensor:
    return t * 2


class Pair(NamedTuple):
    a: torch.Tensor
    b: object


@dataclasses.dataclass
class WithDerived:
    x: torch.Tensor
    label: str
    derived: torch.Tensor = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.derived = self.x + 100


@dataclasses.dataclass(frozen=True)
class Frozen:
    x: torch.Tensor


class MyDict(dict[str, torch.Tensor]):
    pass


def test_rmap_plain_containers_and_non_tensors() -> None:
    value = (torch.tensor(1.0), [torch.tensor(2.0), "s", 3], None)
    out = rmap_tensor(value, double)
    assert type(out) is tuple and type(out[1]) is list
    assert out[0].item() == 2.0 and out[1][0].item() == 4.0
    assert out[1][1:] == ["s", 3] and out[2] is None


def test_rmap_namedtuple_is_rebuilt() -> None:
    out = rmap_tensor(Pair(torch.tensor(1.0), "keep"), double)
    assert isinstance(out, Pair)
    assert out.a.item() == 2.0 and out.b == "keep"


def test_rmap_dict_keys_included_and_subclasses_kept() -> None:
    key = torch.tensor(1.0)
    out = rmap_tensor({key: torch.tensor(3.0)}, double)
    ((k, v),) = out.items()
    assert k.item() == 2.0 and v.item() == 6.0
    ordered = rmap_tensor(collections.OrderedDict(b=torch.tensor(1.0), a=torch.tensor(2.0)), double)
    assert type(ordered) is collections.OrderedDict and list(ordered) == ["b", "a"]
    assert ordered["a"].item() == 4.0
    mine = rmap_tensor(MyDict(x=torch.tensor(1.0)), double)
    assert type(mine) is MyDict and mine["x"].item() == 2.0
    default = collections.defaultdict(list, x=torch.tensor(1.0))
    mapped = rmap_tensor(default, double)
    assert type(mapped) is collections.defaultdict and mapped.default_factory is list


def test_rmap_dataclass_with_init_false_field() -> None:
    value = WithDerived(torch.tensor(1.0), "lbl")
    out = rmap_tensor(value, double)
    assert isinstance(out, WithDerived)
    assert out.x.item() == 2.0 and out.label == "lbl"
    # The init=False field is mapped from the original (101 * 2), not recomputed (2 + 100).
    assert out.derived.item() == 202.0


def test_rmap_frozen_dataclass() -> None:
    out = rmap_tensor(Frozen(torch.tensor(5.0)), double)
    assert isinstance(out, Frozen) and out.x.item() == 10.0


def test_iter_tensors_follows_rmap_order() -> None:
    value = {"a": (torch.tensor(1), Pair(torch.tensor(2), torch.tensor(3))), "b": [torch.tensor(4)]}
    seen: list[int] = []
    rmap_tensor(value, lambda t: seen.append(int(t)))
    assert [int(t) for t in iter_tensors(value)] == seen == [1, 2, 3, 4]


def test_first_value_unwraps_tuples_and_lists_only() -> None:
    t = torch.ones(1)
    assert Stash("x", torch.nn.Linear, False, ([(t, 1)], 2)).first_value is t
    d = {"a": t}
    assert Stash("x", torch.nn.Linear, False, (d,)).first_value is d
    assert Stash("x", torch.nn.Linear, False, ()).first_value == ()


def test_stash_four_positional_fields_still_work() -> None:
    s = Stash("m", torch.nn.Linear, True, None)
    assert (s.call, s.step, s.kind, s.attr, s.training) == (0, 0, "output", "", True)


def test_default_stash_value_is_a_detached_cpu_copy() -> None:
    x = torch.ones(3, requires_grad=True)
    copy = default_stash_value(x)
    assert not copy.requires_grad and copy.device.type == "cpu"
    assert copy.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    with torch.no_grad():
        x.add_(1)
    assert torch.equal(copy, torch.ones(3))


def test_rmap_userdict_and_other_mappings_are_copied() -> None:
    user = collections.UserDict(y=torch.tensor(1.0))
    out = rmap_tensor(user, double)
    assert type(out) is collections.UserDict and out["y"].item() == 2.0
    assert user["y"].item() == 1.0  # the original is untouched
    proxy = rmap_tensor(types.MappingProxyType({"y": torch.tensor(3.0)}), double)
    assert proxy["y"].item() == 6.0
    assert [t.item() for t in iter_tensors(collections.UserDict(a=torch.tensor(5.0)))] == [5.0]
