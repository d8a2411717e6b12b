"""`widgets.live_view`: redraws as a run streamed from another thread writes new steps."""

from __future__ import annotations

import html
import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
from torch import nn

pytest.importorskip("ipywidgets")
pytest.importorskip("matplotlib")
pytest.importorskip("pyarrow")

from tensor_tracker import load, track, widgets


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


_HOLDING = textwrap.dedent(
    """
    import sys, time, torch
    from torch import nn
    import tensor_tracker
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with tensor_tracker.track(model, stats=True, stream_to=sys.argv[1]) as t:
        for _ in range(3):
            model(torch.randn(2, 4)).sum().backward()
            t.step()
        print("ready", flush=True)
        time.sleep(600)
    """
)


@pytest.mark.slow
def test_a_run_killed_mid_run_is_read_again_and_said_incomplete(tmp_path: Path) -> None:
    """A killed writer changes no file, only its lock: the view read it once, while it ran,
    and never said that the run had stopped (issue 36 item 5, live view)."""
    path = tmp_path / "run"
    writer = subprocess.Popen(
        [sys.executable, "-c", _HOLDING, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        view = widgets.live_view(path, start=False)
        assert view.steps == [0, 1, 2] and "incomplete" not in view.status.value
        assert view.refresh() is False  # still running, nothing new
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(timeout=30)
    with pytest.warns(RuntimeWarning, match="incomplete recording"):
        assert view.refresh() is True
    assert view.steps == [0, 1, 2] and view.figure is not None
    assert "steps 0-2 (3 recorded)" in view.status.value
    assert "incomplete recording: its writer stopped without closing it" in view.status.value
    assert view.refresh() is False  # a dead writer is not asked again


def test_bad_sources_are_named(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="stream_to"):
        widgets.live_view(3)
    with pytest.raises(ValueError, match="figure"):
        widgets.live_view(tmp_path, figure="pie")
    # A directory a run has not created yet: the refresh thread waits for it; read once
    # only (start=False), it is refused (issue #35 item 18: accepted silently).
    waiting = widgets.live_view(tmp_path / "nothing yet", interval=60)
    waiting.stop()
    assert waiting.figure is None and waiting.steps == []
    assert "nothing yet" in waiting.status.value
    with pytest.raises(ValueError, match="no such directory"):
        widgets.live_view(tmp_path / "nothing yet", start=False)


def test_a_hostile_recordings_text_is_shown_escaped(tmp_path: Path) -> None:
    """The status is an HTML widget: a recording's own text reached it unescaped."""
    run = tmp_path / "run"
    run.mkdir()
    tag = "<img src=x onerror=alert(1)>"
    (run / "recording.json").write_text(
        json.dumps({"format": "tensor_tracker.recording", "version": tag})
    )
    view = widgets.live_view(run, start=False)
    assert view.figure is None and "format version" in view.status.value
    assert tag not in view.status.value and html.escape(repr(tag)) in view.status.value


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + torch.tanh(self.fc(x)))


class _Blocks(nn.Module):
    """An embedding, 8 repeated blocks and a head: 18 leaf modules, as a BERT's layers."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.layers = nn.ModuleList(_Block() for _ in range(8))
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def _lines(view: object) -> list[str]:
    figure = view.figure  # type: ignore[attr-defined]
    return [line.get_label() for line in figure.axes[0].get_lines() if not line.get_gid()]


def test_the_history_opens_on_one_role_across_the_blocks_with_a_legend_and_readout(
    tmp_path: Path,
) -> None:
    """On a model of repeated blocks the view drew every module coloured by depth (a
    trend and nothing else): it opens on one role across the blocks, each line named."""
    torch.manual_seed(0)
    model = _Blocks()
    with track(model, stats=True, stream_to=tmp_path / "run") as t:
        _steps(t, model, 4)
    frame = load(tmp_path / "run").to_frame()
    view = widgets.live_view(tmp_path / "run", start=False)
    c = view.controls
    fc = [f"layers.{i}.fc" for i in range(8)]
    assert c["show"].value == "role:fc" and c["show"].layout.display != "none"
    values = [v for _, v in c["show"].options]
    assert values[:2] == ["role:fc", "role:norm"] and {"extremes", "all"} <= set(values)
    assert view.shown == fc and _lines(view) == fc
    legend = view.figure.axes[0].get_legend()
    assert [text.get_text() for text in legend.get_texts()][:8] == fc
    # Only the controls that work: statistics recorded, both directions recorded.
    assert list(c["stat"].options) == ["mean", "std", "rms", "abs_max", "min", "max", "numel"]
    assert c["grad"].value is True and c["grad"].layout.display != "none"
    # The readout names each line's module with its value at the latest step.
    last = frame[(frame["step"] == 3) & frame["grad"] & (frame["kind"] == "output")]
    rms = last.groupby("name")["rms"].mean()
    spec = ".3e" if any(abs(rms[n]) < 1e-3 for n in fc) else ".4g"  # one format a table
    for name in fc:
        assert f"<td>{name}</td><td style='text-align:right'>{rms[name]:{spec}}</td>" in (
            view.readout.value
        )
    # The y axis fits the data: no format limit lines until asked for.
    gids = [line.get_gid() or "" for line in view.figure.axes[0].get_lines()]
    assert not any(g.startswith("limit:") for g in gids)
    c["limits"].value = True
    gids = [line.get_gid() or "" for line in view.figure.axes[0].get_lines()]
    assert any(g.startswith("limit:") for g in gids)
    # The extremes: the 3 leaf modules with the largest gradient rms, and the 3 smallest.
    c["show"].value = "extremes"
    leaves = ["embed", *fc, *[f"layers.{i}.norm" for i in range(8)], "head"]
    ranked = list(rms[leaves].abs().sort_values(ascending=False).index)
    assert view.shown == ranked[:3] + ranked[-3:]
    assert set(_lines(view)) == set(view.shown)
    c["grad"].value = False
    assert view.figure is not None and "of each output at step 3" in view.readout.value
    # names= opens on those modules, read out too.
    chosen = widgets.live_view(tmp_path / "run", names=r"layers\.[0-3]\.fc$", start=False)
    assert chosen.controls["show"].value == "names" and _lines(chosen) == fc[:4]
    assert all(f"<td>{name}</td>" in chosen.readout.value for name in fc[:4])


def test_controls_with_nothing_to_choose_are_hidden(tmp_path: Path) -> None:
    model = _model()
    with track(model, stats=["rms"], stream_to=tmp_path / "run") as t:
        for _ in range(3):
            with torch.no_grad():
                model(torch.randn(3, 4))
            t.step()
    view = widgets.live_view(tmp_path / "run", start=False)
    c = view.controls
    assert c["stat"].layout.display == "none" and c["grad"].layout.display == "none"
    assert c["grad"].value is False  # forward values: the only ones recorded
    assert _lines(view) == ["0", "1", "2"]  # three modules: each drawn and named
    scale = widgets.live_view(tmp_path / "run", figure="scale", start=False)
    assert all(c.layout.display == "none" for c in scale.controls.values())
    assert scale.figure is not None


def test_the_readout_has_one_number_format() -> None:
    from tensor_tracker._data._live_view import readout_html as _readout

    text = _readout({"a": 0.5, "b": 1e-5}, ["b", "a"], "rms", True, 7)
    assert text.index("<td>a</td>") < text.index("<td>b</td>")  # largest first
    assert ">5.000e-01<" in text and ">1.000e-05<" in text
    assert ">0.5<" in _readout({"a": 0.5, "b": 2.0}, ["a", "b"], "rms", True, 7)
