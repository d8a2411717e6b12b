"""`core.naming`: the one naming of modules and parameters that `track()` and the probes
share (aliases by their first name, wrappers left out)."""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

from tensor_tracker import track
from tensor_tracker._core.naming import module_names, parameter_names, wrapped_module
from tests.helpers import batch, tiny_model


class FullyShardedDataParallel(nn.Module):
    """Stands in for FSDP1's wrapper (which needs a process group): what naming looks at
    is the class name and the attribute holding the wrapped module."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self._fsdp_wrapped_module = module

    def forward(self, *args: object) -> object:
        return self._fsdp_wrapped_module(*args)


def test_plain_models_keep_named_modules_names_and_order() -> None:
    model = tiny_model()
    assert [(n, id(m)) for n, m in module_names(model)] == [
        (n, id(m)) for n, m in model.named_modules()
    ]
    assert parameter_names(model) == {id(p): n for n, p in model.named_parameters()}


def test_an_alias_goes_by_its_first_name_and_is_listed_once() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    model.add_module("again", model[0])
    assert [n for n, _ in module_names(model)] == ["", "0"]
    assert sorted(parameter_names(model).values()) == ["0.bias", "0.weight"]


def test_wrappers_nested_in_any_order_add_nothing_to_the_names() -> None:
    inner = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 2), nn.ReLU()))
    plain = [(n, id(m)) for n, m in module_names(inner)]
    inner[1] = checkpoint_wrapper(torch.compile(inner[1], backend="eager"))
    wrapped = FullyShardedDataParallel(torch.compile(inner, backend="eager"))
    assert wrapped_module(wrapped) is not None and wrapped_module(inner) is None
    assert [(n, id(m)) for n, m in module_names(wrapped)] == plain
    assert sorted(parameter_names(wrapped).values()) == sorted(
        n
        for n, _ in nn.Sequential(
            nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 2))
        ).named_parameters()
    )


def test_track_names_a_checkpoint_wrapped_block_as_the_plain_one() -> None:
    model = tiny_model()
    plain = tiny_model()
    model.blocks[0] = checkpoint_wrapper(model.blocks[0])
    tokens = batch()
    with track(model) as t, track(plain) as reference:
        model(tokens).sum().backward()
        plain(tokens).sum().backward()
    assert [(r.name, r.grad, r.call) for r in t] == [(r.name, r.grad, r.call) for r in reference]
    for mine, theirs in zip(t, reference, strict=True):
        torch.testing.assert_close(mine.value, theirs.value, rtol=0, atol=0)
