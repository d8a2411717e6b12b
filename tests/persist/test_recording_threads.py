"""Issue 35 items 16-17: a streaming tracker used from several threads, and Ctrl-C landing
anywhere: the recording on disk always loads, with every finished step once, and a step
the interrupt cut short marked partial."""

from __future__ import annotations

import functools
import gc
import threading
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tensor_tracker import Tracker, load, track
from tensor_tracker._core.columns import Columns
from tensor_tracker._persist import integrity
from tests.helpers import interrupt_at, lines_run

pytest.importorskip("pyarrow")

_RECORDS = 8  # per step of `_model`: 3 modules and the root, forward and gradient


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))


def _load(path: Path) -> Tracker:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a complete recording loads without any warning
        run = load(path)
    assert run.complete
    return run


class _Turns:
    """The tracker's lock, telling the test when another thread is about to wait for it."""

    def __init__(self, lock: Any, waiting: threading.Event) -> None:
        self.lock, self.waiting = lock, waiting

    def __enter__(self) -> Any:
        if threading.current_thread() is not threading.main_thread():
            self.waiting.set()
        return self.lock.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self.lock.__exit__(*exc)


def _while_step_writes(
    path: Path, monkeypatch: pytest.MonkeyPatch, other: Callable[[Tracker], None]
) -> Tracker:
    """Record 4 steps streaming to `path`; while step 1 is being written (its first block
    appended to disk, its commit not yet), let another thread call `other(t)`, until it
    returns or waits for its turn."""
    model = _model()
    real = integrity.AppendFile.append
    turn = threading.Event()
    go = threading.Event()
    errors: list[BaseException] = []

    def in_the_middle(self: integrity.AppendFile, data: Any) -> None:
        real(self, data)
        if not go.is_set():
            go.set()
            assert turn.wait(timeout=60)

    def run_other(t: Tracker) -> None:
        assert go.wait(timeout=60)
        try:
            other(t)
        except BaseException as error:  # reported by the test, not lost in the thread
            errors.append(error)
        finally:
            turn.set()

    with track(model, stats=True, stream_to=path) as t:
        t._lock = _Turns(getattr(t, "_lock", None), turn)  # type: ignore[attr-defined]
        thread = threading.Thread(target=run_other, args=(t,))
        thread.start()
        try:
            for step in range(4):
                model(torch.randn(3, 4)).sum().backward()
                t.log("loss", float(step))
                if step == 1:
                    monkeypatch.setattr(integrity.AppendFile, "append", in_the_middle)
                t.step()
                monkeypatch.setattr(integrity.AppendFile, "append", real)
                if step == 1:
                    # The other thread's call, which waited for step 1's write, ends before
                    # step 2 records anything, however slowly the machine runs it.
                    thread.join(timeout=60)
        finally:
            go.set()
            thread.join(timeout=60)
    assert not thread.is_alive() and not errors, errors
    return _load(path)


def test_a_second_thread_stepping_waits_for_the_write_in_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _while_step_writes(tmp_path / "run", monkeypatch, lambda t: t.step())
    sizes = run.to_frame().groupby("step").size()
    # The other thread's step() came after step 1's: step 2 recorded nothing.
    assert sizes.to_dict() == {0: _RECORDS, 1: _RECORDS, 3: _RECORDS, 4: _RECORDS}
    assert run.log_frame()["step"].tolist() == [0, 1, 3, 4]


def test_a_logging_thread_loses_no_scalar_and_no_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def log(t: Tracker) -> None:
        t.log("lr", 0.5)
        t.note("from another thread")

    run = _while_step_writes(tmp_path / "run", monkeypatch, log)
    logged = [(e.step, e.name or e.text) for e in run.logged]
    # Logged while step 1 was being written: after it, so with step 2.
    assert logged == [
        (0, "loss"),
        (1, "loss"),
        (2, "lr"),
        (2, "from another thread"),
        (2, "loss"),
        (3, "loss"),
    ]
    assert run.to_frame().groupby("step").size().tolist() == [_RECORDS] * 4


def test_the_end_of_a_block_closes_the_recording(tmp_path: Path) -> None:
    path = tmp_path / "run"
    model = _model()
    gc.disable()  # nothing left for a garbage collection to do
    try:
        t = track(model, stats=True, stream_to=path)
        for _ in range(2):
            with t:
                model(torch.randn(3, 4)).sum().backward()
                t.step()
                assert integrity.writer_alive(path)
            # Released at once: load checks the whole recording, files left behind included.
            assert not integrity.writer_alive(path)
            _load(path)
        gone = weakref.ref(t)
        del t
        assert gone() is None  # no reference cycle keeps the tracker (and its writer)
    finally:
        gc.enable()
    assert sorted(set(_load(path).to_frame()["step"])) == [0, 1]


def _record_interrupted(path: Path, interrupt: Callable[[], Any]) -> None:
    """Two steps, then a third that `interrupt` cuts short, streaming to `path`."""
    model = _model()
    with pytest.raises(KeyboardInterrupt), track(model, stats=True, stream_to=path) as t:
        for step in range(3):
            t.log("loss", float(step))
            with interrupt() if step == 2 else _nothing():
                model(torch.randn(3, 4)).sum().backward()
            t.step()


class _nothing:
    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: Any) -> None:
        pass


def test_a_ctrl_c_anywhere_in_a_record_leaves_the_step_marked_partial(tmp_path: Path) -> None:
    cols = Columns()
    site = cols.site_id("x", nn.Linear, "output", "")
    first = lines_run(Columns.add, lambda: cols.add(site, 0, 0, 0, 0))  # a step's first
    later = lines_run(Columns.add, lambda: cols.add(site, 1, 0, 0, 0))
    cases = [(1, line) for line in first] + [(5, line) for line in later]
    for k, (call, line) in enumerate(cases):
        path = tmp_path / f"run-{k}"
        # Ctrl-C in the step's first record, or in its 5th (its first gradient).
        _record_interrupted(path, functools.partial(interrupt_at, Columns.add, line, call))
        run = _load(path)
        sizes = run.to_frame().groupby("step").size().to_dict()
        expected = {0: _RECORDS, 1: _RECORDS, **({2: call - 1} if call > 1 else {})}
        assert sizes == expected, (call, line)
        assert run.partial_steps == [2]
        assert run.log_frame()["step"].tolist() == [0, 1, 2]


def test_a_ctrl_c_inside_the_model_or_inside_step_marks_only_a_cut_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Interrupting(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise KeyboardInterrupt

    model = _model()
    with pytest.raises(KeyboardInterrupt), track(model, stream_to=tmp_path / "model") as t:
        model(torch.randn(3, 4)).sum().backward()
        t.step()
        model[1] = Interrupting()  # the step ends in the middle of its forward pass
        model(torch.randn(3, 4))
    run = _load(tmp_path / "model")
    assert run.to_frame().groupby("step").size().to_dict() == {0: _RECORDS, 1: 1}
    assert run.partial_steps == [1]
    # In memory too, and `save` keeps it.
    model = _model()
    with pytest.raises(KeyboardInterrupt), track(model) as t:
        model[1] = Interrupting()
        model(torch.randn(3, 4))
    assert t.partial_steps == [0]
    t.save(tmp_path / "saved")
    assert _load(tmp_path / "saved").partial_steps == [0]

    # A Ctrl-C inside step() comes after the step's work: the step is whole.
    def interrupted(self: Tracker, block_ended: bool) -> None:
        raise KeyboardInterrupt

    model = _model()
    with pytest.raises(KeyboardInterrupt), track(model, stream_to=tmp_path / "step") as t:
        model(torch.randn(3, 4)).sum().backward()
        monkeypatch.setattr(t, "_check_nonfinite", lambda: interrupted(t, False))
        t.step()
    run = _load(tmp_path / "step")
    assert run.to_frame().groupby("step").size().to_dict() == {0: _RECORDS}
    assert run.partial_steps == []
