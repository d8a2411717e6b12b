"""Memory: max_bytes, nbytes, and the full-copy options (device, dtype, sample, non_blocking)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tensor_tracker import CopyValue, MemoryBudgetError, track


def model_and_input() -> tuple[nn.Sequential, torch.Tensor]:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 10), nn.Linear(10, 10), nn.Linear(10, 10)), torch.randn(
        4, 10
    )


def hooks_left(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) for m in model.modules())


def test_nbytes_counts_stashed_tensors() -> None:
    model, x = model_and_input()
    with track(model, grad=False) as t:
        model(x)
    # Four [4, 10] float32 outputs; the root's is the last layer's object, copied once.
    assert len(t) == 4 and t.nbytes == 3 * 4 * 10 * 4


def test_max_bytes_raises_removes_hooks_and_keeps_stashes() -> None:
    model, x = model_and_input()
    budget = 2 * 4 * 10 * 4 + 10  # room for two outputs
    with pytest.raises(MemoryBudgetError) as info, track(model, max_bytes=budget) as t:
        model(x).sum().backward()
    message = str(info.value)
    assert "max_bytes=330" in message and "stats=True" in message and "include=" in message
    assert [s.name for s in t] == ["0", "1"]  # what fit is kept
    assert t.nbytes == 2 * 160
    assert hooks_left(model) == 0
    model(x)  # tracking has stopped
    assert len(t) == 2


def test_max_bytes_during_backward() -> None:
    model, x = model_and_input()
    # The three distinct forward copies (the root shares its last child's) and one
    # gradient (the root and its last child share that too).
    budget = 3 * 160 + 160 + 10
    with track(model, max_bytes=budget) as t:
        out = model(x)
        with pytest.raises(MemoryBudgetError):
            out.sum().backward()
    assert [(s.name, s.grad) for s in t][-2:] == [("", True), ("2", True)] and len(t) == 6
    assert t.nbytes == 4 * 160


def test_max_bytes_counts_shared_copies_once_like_nbytes() -> None:
    model, x = model_and_input()
    with track(model) as t:
        model(x).sum().backward()
    total = t.nbytes
    assert total == 6 * 160  # 8 stashes, two pairs share one copy each
    with track(model, max_bytes=total) as exact:  # the budget that nbytes says is enough
        model(x).sum().backward()
    assert len(exact) == len(t) and exact.nbytes == total
    with pytest.raises(MemoryBudgetError), track(model, max_bytes=total - 1):
        model(x).sum().backward()


def test_stats_mode_memory_is_independent_of_activation_size() -> None:
    sizes = []
    for width in (8, 512):
        model = nn.Sequential(nn.Linear(width, width), nn.ReLU())
        with track(model, stats=True) as t:
            model(torch.randn(64, width)).sum().backward()
        sizes.append(t.nbytes / len(t))
    assert sizes[0] == sizes[1] < 1024


def test_copy_keep_on_device_and_dtype() -> None:
    model, x = model_and_input()
    with track(model, grad=False, device=None, dtype=torch.bfloat16) as t:
        out = model(x)
    assert t[-1].value.dtype == torch.bfloat16
    assert torch.equal(t[-1].value, out.detach().bfloat16())
    assert t.nbytes == 3 * 4 * 10 * 2  # bfloat16; the root shares the last layer's copy


def test_sample_is_reproducible_and_drawn_from_the_tensor() -> None:
    x = torch.arange(1000.0)
    first = CopyValue(sample=50, seed=3)(x)
    again = CopyValue(sample=50, seed=3)(x)
    other = CopyValue(sample=50, seed=4)(x)
    assert first.shape == (50,) and torch.equal(first, again) and not torch.equal(first, other)
    assert len(set(first.tolist())) == 50  # without replacement
    assert torch.equal(CopyValue(sample=5000)(x), x)  # small tensors are kept whole


def test_sample_option_on_track() -> None:
    model, x = model_and_input()
    with track(model, grad=False, sample=7) as t:
        model(x)
    assert all(s.value.shape == (7,) for s in t)


def test_copy_value_validates() -> None:
    with pytest.raises(ValueError, match="sample"):
        CopyValue(sample=0)
    with pytest.raises(TypeError, match="dtype"):
        CopyValue(dtype="bf16")  # type: ignore[arg-type]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_non_blocking_copy_to_pinned_memory() -> None:
    model = nn.Linear(64, 64).cuda()
    x = torch.randn(256, 64, device="cuda")
    with track(model, non_blocking=True) as t:
        out = model(x)
        out.sum().backward()
    value = t[0].value
    assert value.is_pinned() and torch.equal(value, out.detach().cpu())


def test_a_copy_shared_by_parent_and_child_counts_once() -> None:
    model = nn.Sequential(nn.Sequential(nn.Linear(10, 10)))
    with track(model, grad=False) as t:
        model(torch.randn(4, 10))
    assert len(t) == 3 and t[0].value is t[2].value  # one copy, three stashes
    assert t.nbytes == 4 * 10 * 4
