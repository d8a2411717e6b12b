"""Issue #9, correctness on real models: torch.compile'd models, Hugging Face caches and
generate(), objects that are not containers, and re-entering a tracker."""

from __future__ import annotations

import collections
import dataclasses
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils._pytree as pytree
from torch import Tensor, nn

from tensor_tracker import (
    Event,
    Stash,
    Tracker,
    Unrecorded,
    default_stash,
    default_stash_value,
    rmap_tensor,
    track,
)
from tensor_tracker._core.structure import iter_leaves, iter_tensors
from tests.helpers import hook_count


def tensors_in(stashes: list[Stash]) -> Iterator[Tensor]:
    for s in stashes:
        yield from iter_tensors(s.value)


# -- torch.compile ------------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.b = nn.Linear(6, 6)

    def forward(self, x: Tensor) -> Tensor:
        h = self.a(x)
        torch._dynamo.graph_break()  # Dynamo compiles the rest as a separate resume function
        return self.b(torch.relu(h)) + x


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(6, 2)

    def forward(self, x: Tensor) -> Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def eager_record(model: nn.Module, x: Tensor) -> list[Stash]:
    with track(model) as t:
        model(x).sum().backward()
    model.zero_grad()
    return list(t)


@pytest.mark.parametrize("how", ["torch.compile", "Module.compile"])
@pytest.mark.parametrize(
    "make", [Net, lambda: nn.Sequential(nn.Linear(6, 6), nn.Tanh())], ids=["Net", "Sequential"]
)
@pytest.mark.slow
def test_model_compiled_and_run_before_tracking_is_recorded(how: str, make: Any) -> None:
    torch.manual_seed(0)
    model = make()
    x = torch.randn(3, 6)
    expected = eager_record(model, x)
    if how == "torch.compile":
        compiled = torch.compile(model, backend="eager")
    else:
        compiled = model
        compiled.compile(backend="eager")
    compiled(x).sum().backward()  # compiled now, without hooks
    model.zero_grad()
    with track(compiled) as t:
        compiled(x).sum().backward()
    assert [(s.name, s.grad) for s in t] == [(s.name, s.grad) for s in expected]
    for got, want in zip(t, expected, strict=True):
        assert all(map(torch.equal, iter_tensors(got.value), iter_tensors(want.value)))
    # Hooks gone: the compiled model runs without recording; entering again records again.
    recorded = len(t)
    compiled(x)
    assert len(t) == recorded and hook_count(model) == 0
    with t:
        compiled(x)
    assert [s.name for s in t[recorded:]] == [s.name for s in expected if not s.grad]


@pytest.mark.slow
def test_stale_compiled_code_out_of_reach_warns() -> None:
    # A compiled function calling the model: the tracker cannot know what to recompile,
    # so a block that records nothing says why.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 1))

    @torch.compile(backend="eager")
    def loss(x: Tensor) -> Tensor:
        return model(x).sum()

    x = torch.randn(3, 6)
    loss(x)
    with (
        pytest.warns(RuntimeWarning, match=r"nothing was recorded.*torch\.compiler\.reset"),
        track(model),
    ):
        loss(x)
    torch.compiler.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with track(model) as t:
            loss(x).backward()
    assert len(t) == 8
    assert not [w for w in caught if "tensor_tracker" in str(w.message)]


# -- Hugging Face caches and generate() ---------------------------------------------------


@pytest.fixture(scope="module")
def gpt2() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64)
    model: nn.Module = transformers.GPT2LMHeadModel(config)
    return model.eval()


@pytest.mark.slow
def test_generate_stashes_a_copy_of_the_cache_at_each_step(gpt2: nn.Module) -> None:
    prompt = torch.randint(0, 100, (1, 5))
    with track(gpt2) as t:
        generated: Any = gpt2.generate(  # type: ignore[operator]
            prompt, max_new_tokens=3, do_sample=False, pad_token_id=0, return_dict_in_generate=True
        )
    live = generated.past_key_values
    roots = [s for s in t if s.name == ""]
    assert [s.call for s in roots] == [0, 1, 2]
    caches = [s.value["past_key_values"] for s in roots]
    assert all(type(c) is type(live) and c is not live for c in caches)
    # Each stash shows the cache as it was then: the prompt, then one more token per step.
    assert [c.get_seq_length() for c in caches] == [5, 6, 7]
    assert live.get_seq_length() == 7
    for cache in caches:
        for layer, live_layer in zip(cache.layers, live.layers, strict=True):
            assert layer is not live_layer and layer.keys is not live_layer.keys
            n = layer.keys.shape[-2]
            assert torch.equal(layer.keys, live_layer.keys[..., :n, :])
    assert not any(tensor.requires_grad for tensor in tensors_in(list(t)))


def test_cache_tensors_are_counted_and_their_gradients_recorded(gpt2: nn.Module) -> None:
    x = torch.randint(0, 100, (1, 5))
    with track(gpt2, grad=False) as without_cache:
        gpt2(x, use_cache=False)
    with track(gpt2, grad=False) as with_cache:
        gpt2(x, use_cache=True)
    with track(gpt2) as t:
        out = gpt2(x, use_cache=True)
        live = list(iter_tensors(out))
        loss = out.logits.square().sum()
        loss.backward(retain_graph=True)
    reference = torch.autograd.grad(loss, live)  # the same graph, with the hooks removed
    gpt2.zero_grad()
    cache = list(iter_tensors(out.past_key_values))
    assert len(cache) == 4 and len(live) == 5  # logits, then keys and values of 2 layers
    cache_bytes = sum(c.numel() * c.element_size() for c in cache)
    # The cache is in the outputs of the model and of its `transformer`: two copies.
    assert with_cache.nbytes - without_cache.nbytes == 2 * cache_bytes
    (root_grad,) = [s for s in t if s.name == "" and s.grad]
    assert len(root_grad.value) == 5
    assert all(map(torch.equal, root_grad.value, reference))
    assert not any(tensor.requires_grad for tensor in tensors_in(list(t)))


# -- objects that are not containers ------------------------------------------------------


class State:
    """Holds a tensor, but is neither a container nor registered with pytree."""

    def __init__(self, value: Tensor) -> None:
        self.value = value


class Registered:
    def __init__(self, a: Tensor, label: str) -> None:
        self.a, self.label = a, label


pytree.register_pytree_node(
    Registered,
    lambda r: ([r.a], r.label),
    lambda children, label: Registered(next(iter(children)), label),
)


class Returns(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)
        self.state = State(torch.zeros(3))

    def forward(self, x: Tensor) -> Any:
        h = self.linear(x)
        self.state.value = h.detach()
        return h, self.state, Registered(2 * h, "doubled"), np.ones(2), collections.deque([h])


def test_objects_that_cannot_be_walked_are_described_never_kept() -> None:
    model = Returns()
    x = torch.randn(2, 3)
    with track(model, include="^$") as t:
        out = model(x)
        forward_bytes = t.nbytes
        loss = sum((o * o).sum() for o in iter_tensors(out))
        loss.backward(retain_graph=True)
    reference = torch.autograd.grad(loss, list(iter_tensors(out)))
    forward, grad = t[0], t[1]
    h, state, registered, array, queue = forward.value
    assert isinstance(state, Unrecorded) and state.type.endswith("test_compat.State")
    assert "register_pytree_node" in state.reason
    assert all(leaf is not model.state for leaf in iter_leaves(forward.value))
    assert type(registered) is Registered and registered.label == "doubled"
    assert torch.equal(registered.a, 2 * h) and not registered.a.requires_grad
    assert array is not out[3] and np.array_equal(array, out[3])
    assert type(queue) is collections.deque and torch.equal(queue[0], h)
    # nbytes counts the copies kept (h, 2h, h in the deque, and the NumPy array), not the
    # state's tensor.
    tensor_bytes = sum(t.numel() * 4 for t in iter_tensors(forward.value))
    assert tensor_bytes == 3 * 6 * 4 and forward_bytes == tensor_bytes + array.nbytes
    # Gradients cover the tensors of the pytree node and the deque, in rmap order.
    assert len(grad.value) == 3 and all(map(torch.equal, grad.value, reference))
    # rmap_tensor itself keeps its contract: other objects come back unchanged.
    mapped = rmap_tensor(out, lambda t: t + 1)
    assert mapped[1] is model.state and type(mapped[2]) is Registered


@dataclasses.dataclass
class Note:
    text: str


def test_plain_values_are_kept_as_they_are() -> None:
    values = (None, 1, 2.5, "s", b"b", torch.float16, torch.device("cpu"), Note("n"), range(2))
    event = Event("m", nn.Identity, False, values, (), {})
    assert default_stash(event, default_stash_value).value == values


# -- re-entering a tracker ----------------------------------------------------------------


def test_entering_a_tracker_again_records_again() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    x = torch.randn(2, 4)
    t = track(model, grad=False)
    with t:
        model(x)
    assert hook_count(model) == 0 and str(t) == "Tracker(stashes=3, tracking=0)"
    model(x)  # between blocks: nothing recorded
    with t:
        model(x)
    assert hook_count(model) == 0
    assert [(s.name, s.call) for s in t] == [
        ("0", 0), ("1", 0), ("", 0), ("0", 1), ("1", 1), ("", 1),
    ]  # fmt: skip
    t.step()  # after the block: attaches nothing
    model(x)
    assert len(t) == 6 and hook_count(model) == 0
    with t:  # nested blocks: the outermost one detaches
        with t:
            model(x)
        model(x)
    with t:
        model(x)
    assert len(t) == 15 and hook_count(model) == 0


def test_entering_an_unregistered_tracker_raises() -> None:
    model = nn.Sequential(nn.Linear(4, 4))
    t = track(model)
    t.unregister()
    with pytest.raises(RuntimeError, match=r"unregister\(\).*register_all"), t:
        pass
    assert hook_count(model) == 0
    t.register_all(model, grad=False)  # registering again makes it usable
    with t:
        model(torch.randn(1, 4))
    assert [s.name for s in t] == ["0", ""] and hook_count(model) == 0
    # A new Tracker has nothing registered yet; registering inside the block is fine.
    with Tracker() as fresh:
        fresh.register(model, "m", grad=False)
        model(torch.randn(1, 4))
    assert [s.name for s in fresh] == ["m"]
