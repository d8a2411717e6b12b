"""Run two models on the same inputs from the same random state and record both, leaving
everything as it was: the engine of `tensor_tracker.compare_models`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

from .._core.naming import unwrapped
from .._core.structure import rmap_tensor
from .._core.tracker import Recorder, check_module
from .._validate import check_callable, check_count, check_type
from ..errors import ArgumentTypeError, MemoryBudgetError

__all__ = ["DEFAULT_MAX_BYTES", "record_pair"]

DEFAULT_MAX_BYTES = 2**31
"""`compare_models`' default memory budget for the copies of both runs: 2 GiB."""

_R = TypeVar("_R", bound=Recorder)


@contextlib.contextmanager
def _restored(models: tuple[nn.Module, ...]) -> Iterator[Callable[[], None]]:
    """Inside: a function putting back every parameter, buffer and parameter gradient of
    `models` as they were on entry (bitwise, the same gradient tensors); on exit, the same,
    whatever happened."""
    params: dict[int, tuple[Tensor, Tensor, Tensor | None, Tensor | None]] = {}
    buffers: dict[int, tuple[Tensor, Tensor]] = {}
    for model in models:
        for p in model.parameters():
            if id(p) not in params:
                grad = p.grad
                params[id(p)] = (
                    p,
                    p.detach().clone(),
                    grad,
                    None if grad is None else grad.detach().clone(),
                )
        for b in model.buffers():
            if id(b) not in buffers:
                buffers[id(b)] = (b, b.detach().clone())

    def restore() -> None:
        with torch.no_grad():
            for p, value, grad, grad_value in params.values():
                p.copy_(value)
                if grad is None:
                    p.grad = None
                else:
                    assert grad_value is not None
                    grad.copy_(grad_value)
                    p.grad = grad
            for b, value in buffers.values():
                b.copy_(value)

    try:
        yield restore
    finally:
        restore()


@contextlib.contextmanager
def _same_random_state() -> Iterator[Callable[[], None]]:
    """Inside: a function resetting the CPU and CUDA generators to their state on entry
    (so that each run draws the same dropout masks); on exit, that state again: the
    caller's random state is left as it was."""
    cpu = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None

    def reset() -> None:
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)

    try:
        yield reset
    finally:
        reset()


def _placement(model: nn.Module) -> tuple[torch.dtype | None, torch.device | None]:
    """The dtype and device of the model's first floating-point parameter (or buffer)."""
    for t in (*model.parameters(), *model.buffers()):
        if t.is_floating_point():
            return t.dtype, t.device
    return None, None


def cast_inputs(value: Any, model: nn.Module) -> Any:
    """`value` with every floating-point tensor cast to the dtype of `model`'s first
    floating-point parameter, and every tensor moved to its device (integer tensors such
    as token ids keep their dtype); unchanged for a model without floating parameters."""
    dtype, device = _placement(unwrapped(model))

    def cast(t: Tensor) -> Tensor:
        if t.is_floating_point() and dtype is not None:
            return t.to(device=device, dtype=dtype)
        return t.to(device=device) if device is not None else t

    return rmap_tensor(value, cast)


def _run(
    recorder: Recorder,
    model: nn.Module,
    inputs: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    loss_fn: Callable[[Any], Tensor] | None,
) -> None:
    args = cast_inputs(inputs, model)
    kw = cast_inputs(dict(kwargs), model)
    with recorder:
        out = model(*args, **kw)
        if loss_fn is not None:
            loss = loss_fn(out)
            if not isinstance(loss, Tensor) or loss.numel() != 1:
                raise ArgumentTypeError(
                    "compare_models(loss_fn=...) must return a scalar tensor (the loss to "
                    f"call backward() on), got {type(loss).__name__}"
                    + (f" of shape {tuple(loss.shape)}" if isinstance(loss, Tensor) else "")
                )
            torch.autograd.backward(loss)


def record_pair(
    new_recorder: Callable[[int], _R],
    model_a: nn.Module,
    model_b: nn.Module,
    inputs: tuple[Any, ...],
    kwargs: Mapping[str, Any] | None,
    loss_fn: Callable[[Any], Tensor] | None,
    max_bytes: int,
) -> tuple[_R, _R]:
    """Record full copies of every module output of `model_a`, then of `model_b` (and with
    `loss_fn` their gradients), each from the caller's random state, parameters, buffers
    and gradients; put all of those back afterwards, also on error. `new_recorder(budget)`
    makes an empty recorder (copies, with gradients when `loss_fn` is given) whose
    stashes may not exceed `budget` bytes; both runs share `max_bytes`.

    Raises:
        MemoryBudgetError: the copies of both runs would exceed `max_bytes` (the models and
            the random state are put back first).
    """
    check_module(model_a, "compare_models(model_a)")
    check_module(model_b, "compare_models(model_b)")
    if loss_fn is not None:
        check_callable(loss_fn, "compare_models(loss_fn=...)", "model output -> scalar loss")
    if kwargs is not None:
        check_type(kwargs, Mapping, "compare_models(kwargs=...)", "a dict of keyword inputs")
    check_count(max_bytes, "compare_models(max_bytes=...)", "bytes of copies for both runs")
    models = (unwrapped(model_a), unwrapped(model_b))
    with _restored(models) as restore, _same_random_state() as reset:
        recorder_a = new_recorder(max_bytes)
        recorder_a.register_all(model_a, grad=loss_fn is not None)
        try:
            _run(recorder_a, model_a, inputs, kwargs or {}, loss_fn)
            restore()
            reset()
            left = max_bytes - recorder_a.nbytes
            recorder_b = new_recorder(max(left, 1))
            recorder_b.register_all(model_b, grad=loss_fn is not None)
            _run(recorder_b, model_b, inputs, kwargs or {}, loss_fn)
        except MemoryBudgetError as error:
            raise MemoryBudgetError(
                f"compare_models: the copies of every module's output"
                f"{' and gradient' if loss_fn is not None else ''} of both models would exceed "
                f"max_bytes={max_bytes:,} ({error}). Pass a larger max_bytes=, smaller inputs "
                "(a shorter sequence, a smaller batch), or record statistics instead: "
                "track(..., stats=True) each model and tensor_tracker.compare(a, b)."
            ) from error
    return recorder_a, recorder_b
