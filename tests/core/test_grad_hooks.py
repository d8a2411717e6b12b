"""`grad_hooks.stand_in`, the one rule for which gradient stands in for a view's (eager and
compiled paths alike, issue #35), and `ViewSlice` and `view_replay`, which cut the view's
part out of the base's gradient in each, checked on tensors alone, without a model."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from tensor_tracker._core.grad_hooks import ViewSlice, stand_in, view_replay


def _intermediate(*shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """A non-leaf tensor that requires grad, as a module computes one."""
    leaf = torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(0))
    return leaf.requires_grad_() * 2


def test_a_tensor_that_is_no_view_is_read_by_its_own_hook() -> None:
    assert stand_in(_intermediate(3, 4)) is None
    assert stand_in(torch.randn(3, 4, requires_grad=True)) is None  # a leaf


def test_a_view_of_a_tensor_that_needs_no_gradient_has_no_stand_in() -> None:
    assert stand_in(torch.randn(3, 4)[:, :2]) is None


def test_a_view_of_a_leaf_has_no_stand_in() -> None:
    # Autograd refuses an in-place change to it: its own hook always fires.
    leaf = torch.randn(3, 4, requires_grad=True)
    assert stand_in(leaf[:, :2]) is None
    with pytest.raises(RuntimeError, match="leaf"):
        leaf[:, :2].mul_(2)


@pytest.mark.parametrize("size_of_base", [False, True])
def test_a_view_of_a_tensor_that_requires_grad_has_its_base_as_stand_in(
    size_of_base: bool,
) -> None:
    # Whatever its size: a part of the base (`h[:, :2]`, which the compiled path dropped)
    # or all of it (`nn.Linear`'s output for a 3-D input).
    h = _intermediate(3, 4)
    view = h.view(2, 6) if size_of_base else h[:, :2]
    assert stand_in(view) is h


VIEWS: dict[str, Callable[[Tensor], Tensor]] = {
    "columns": lambda h: h[:, :2],
    "offset_and_step": lambda h: h[1:, ::2],
    "last_row": lambda h: h[-1],
    "transposed": lambda h: h.t(),
    "reshaped": lambda h: h.view(2, 6),
}


@pytest.mark.parametrize("name", list(VIEWS))
@pytest.mark.parametrize("grad_layout", ["like_base", "transposed"])
def test_view_slice_cuts_the_views_part_of_the_base_gradient(name: str, grad_layout: str) -> None:
    h = _intermediate(3, 4)
    view = VIEWS[name](h)
    cut = ViewSlice(view, h)
    grad = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    if grad_layout == "transposed":  # the same values, laid out unlike the base
        grad = grad.t().contiguous().t()
    expected = VIEWS[name](grad.contiguous())
    assert torch.equal(cut(grad), expected)
    # What the compiled path cuts with instead (a traced hook cannot read storage offsets).
    assert torch.equal(view_replay(view, h)(grad), expected)


def test_view_slice_of_a_dtype_changing_view_at_an_offset() -> None:
    z = _intermediate(5, dtype=torch.complex64)
    view = torch.view_as_real(z[2:])
    grad = torch.randn(5, dtype=torch.complex64, generator=torch.Generator().manual_seed(1))
    expected = torch.view_as_real(grad[2:])
    assert torch.equal(ViewSlice(view, z)(grad), expected)
    assert torch.equal(view_replay(view, z)(grad), expected)
