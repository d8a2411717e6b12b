"""Small builders the tests share: models, batches, stashes, and counting hooks."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp
from torch import nn

from examples.tiny_transformer import TinyTransformer, copy_task_batch
from tensor_tracker import Stash, Tracker


def hook_count(model: nn.Module) -> int:
    """Forward, forward-pre and backward hooks attached to `model` and its submodules."""
    return sum(
        len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
        for m in model.modules()
    )


def mlp() -> nn.Sequential:
    """A three-layer MLP from 4 to 2 features, the same weights every time."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))


def tiny_model() -> TinyTransformer:
    """A two-block transformer over 16 tokens, the same weights every time."""
    torch.manual_seed(0)
    return TinyTransformer(vocab=16, d_model=16, n_layers=2)


def batch(size: int = 2, seq: int = 8) -> torch.Tensor:
    """Token ids for `tiny_model`."""
    tokens, _ = copy_task_batch(size, seq, 16, torch.Generator().manual_seed(0))
    return tokens


def train(
    model: nn.Module, tracker: Tracker, steps: int = 1, tokens: torch.Tensor | None = None
) -> Tracker:
    """`steps` SGD steps of `model` inside `with tracker:`, calling `tracker.step()`."""
    tokens = batch() if tokens is None else tokens
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with tracker:
        for _ in range(steps):
            model(tokens).float().pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            tracker.step()
    return tracker


def stash(value: object, name: str = "x", grad: bool = False, **kw: object) -> Stash:
    """A stash of `value` as an `nn.Identity` module named `name` would record it."""
    return Stash(name, nn.Identity, grad, value, **kw)  # type: ignore[arg-type]


def spawn(worker: Callable[[int, int, str], None], nprocs: int, out: Path, timeout: float) -> None:
    """Run `worker(rank, port, str(out))` in `nprocs` spawned processes (`port`: a free
    local TCP port for their process group). Fails the test when they have not finished
    in `timeout` seconds (what is left is terminated) or when one raises, with the
    tracebacks the workers wrote to `out/*.err`."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    context = mp.start_processes(
        worker, args=(port, str(out)), nprocs=nprocs, join=False, start_method="spawn"
    )
    deadline = time.monotonic() + timeout
    try:
        while not context.join(timeout=max(deadline - time.monotonic(), 0.1)):
            if time.monotonic() > deadline:
                pytest.fail(f"the {nprocs}-process run did not finish in {timeout:.0f} s")
    except mp.ProcessRaisedException as error:
        errors = "\n".join(p.read_text() for p in sorted(out.glob("*.err")))
        pytest.fail(f"a process failed:\n{errors or error}")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.terminate()


def lines_run(function: Callable[..., Any], action: Callable[[], Any]) -> list[int]:
    """The lines of `function` that run while `action()` runs, in order, each once: where
    `interrupt_at` can interrupt it."""
    code = function.__code__
    lines: dict[int, None] = {}

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            lines[frame.f_lineno] = None
        return local

    before = sys.gettrace()
    sys.settrace(lambda frame, event, arg: local if frame.f_code is code else None)
    try:
        action()
    finally:
        sys.settrace(before)
    return list(lines)


@contextlib.contextmanager
def interrupt_at(function: Callable[..., Any], line: int, call: int = 1) -> Iterator[None]:
    """Raise `KeyboardInterrupt` in the `call`-th call of `function` (counted from now)
    just before its line `line` runs, as a Ctrl-C landing there would (a trace function
    that raises: the exception goes to the traced frame, and tracing stops)."""
    code: CodeType = function.__code__
    calls = 0

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and frame.f_lineno == line and calls == call:
            raise KeyboardInterrupt
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal calls
        if frame.f_code is not code:
            return None
        calls += 1
        return local

    before = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield
    finally:
        sys.settrace(before)
