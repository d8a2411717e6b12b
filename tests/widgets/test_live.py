"""`widgets.live_view`: redraws as a run streamed from another thread writes new steps."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch
from torch import nn

pytest.importorskip("ipywidgets")
pytest.importorskip("matplotlib")
pytest.importorskip("pyarrow")

from tensor_tracker import track, widgets


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def _steps(t: object, model: nn.Module, n: int) -> None:
    for _ in range(n):
        model(torch.randn(3, 4)).sum().backward()
        t.step()  # type: ignore[attr-defined]


def test_refresh_draws_the_new_steps(tmp_path: Path) -> None:
    model = _model()
    path = tmp_path / "run"
    with track(model, stats=True, stream_to=path) as t:
        _steps(t, model, 3)
        view = widgets.live_view(t, start=False)
        assert view.steps == [0, 1, 2] and view.figure is not None
        lines = {line.get_label() for line in view.figure.axes[0].get_lines()}
        assert {"0", "2"} <= lines
        assert "steps 0-2 (3 recorded)" in view.status.value
        assert view.refresh() is False  # nothing new on disk: no redraw
        _steps(t, model, 2)
        assert view.refresh() is True and view.steps == [0, 1, 2, 3, 4]
    scale = widgets.live_view(path, figure="scale", start=False)
    assert scale.figure is not None and scale.steps == [0, 1, 2, 3, 4]


def test_a_background_thread_follows_a_training_thread(tmp_path: Path) -> None:
    model = _model()
    path = tmp_path / "run"
    done = threading.Event()

    def train() -> None:
        with track(model, stats=True, stream_to=path) as t:
            for _ in range(40):
                model(torch.randn(3, 4)).sum().backward()
                t.step()
                time.sleep(0.02)
        done.set()

    trainer = threading.Thread(target=train)
    trainer.start()
    view = widgets.live_view(path, interval=0.05)
    try:
        deadline = time.monotonic() + 30
        while not (done.is_set() and view.steps and view.steps[-1] == 39):
            assert time.monotonic() < deadline, f"the view stopped at {view.steps[-1:]}"
            time.sleep(0.05)
    finally:
        view.stop()
        trainer.join(timeout=30)
    assert view.figure is not None


def test_bad_sources_are_named(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="stream_to"):
        widgets.live_view(3)
    with pytest.raises(ValueError, match="figure"):
        widgets.live_view(tmp_path, figure="pie")
    waiting = widgets.live_view(tmp_path / "nothing yet", start=False)
    assert waiting.figure is None and waiting.steps == []
