"""`to_tensorboard`: what TensorBoard's own reader finds in the event files is what was
recorded (scalars per statistic, histograms, logged scalars, notes), for statistics and for
full copies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tensor_tracker import load, stats, track
from tensor_tracker.export import tensorboard_tag, to_tensorboard
from tensor_tracker.export._tensorboard import _safe
from tests.export.bert import bert_run

pytest.importorskip("tensorboard")


def _events(path: Path) -> Any:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(
        str(path), size_guidance={"scalars": 0, "histograms": 0, "tensors": 0}
    )
    events.Reload()
    return events


def _train(**options: Any) -> Any:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh())
    with track(model, **options) as t:
        for step in range(3):
            model(torch.randn(5, 3)).sum().backward()
            t.log("loss", 1.0 + step)
            t.step()
        t.note("finished")
    return t


def _run(logdir: Path, row: Any) -> tuple[Any, str]:
    """The event files of `row`'s run under `logdir`, and the tag prefix of its side: run and
    tag together are `tensorboard_tag`."""
    tag = tensorboard_tag(row["name"], row["kind"], row["attr"], bool(row["grad"]), "")
    module, part, side, _ = tag.rsplit("/", 3)
    return _events(logdir / _safe(module) / _safe(part)), side


def _histogram(events: Any, tag: str, step: int) -> list[list[float]]:
    """The `[k, 3]` rows (left edge, right edge, count) of `tag`'s histogram at `step`."""
    from tensorboard.util import tensor_util

    (event,) = [e for e in events.Tensors(tag) if e.step == step]
    return tensor_util.make_ndarray(event.tensor_proto).tolist()  # type: ignore[no-any-return]


def test_statistics_histograms_scalars_and_notes_read_back(tmp_path: Path) -> None:
    t = _train(stats=["rms", "abs_max", stats.histogram(bins=8, range=(-8.0, 8.0))])
    to_tensorboard(t, tmp_path, stats="all", histogram_every=1)
    frame = t.to_frame()
    for _, row in frame.iterrows():
        events, side = _run(tmp_path, row)
        for stat in ("rms", "abs_max"):
            (event,) = [e for e in events.Scalars(f"{side}/{stat}") if e.step == row["step"]]
            assert event.value == pytest.approx(row[stat], rel=1e-6)  # stored as float32
        # The bins from the first filled one to the last (TensorBoard would draw the empty
        # ones around them too): left edge, right edge, count.
        counts = list(row["hist"])
        filled = [k for k, c in enumerate(counts) if c]
        edges = [-8.0 + 2.0 * k for k in range(9)]
        assert _histogram(events, f"{side}/hist", row["step"]) == [
            [edges[k], edges[k + 1], counts[k]] for k in range(filled[0], filled[-1] + 1)
        ]
    events = _events(tmp_path)
    assert [(e.step, e.value) for e in events.Scalars("log/loss")] == [(0, 1.0), (1, 2.0), (2, 3.0)]
    (note,) = events.Tensors("notes/text_summary")
    assert note.step == 3 and note.tensor_proto.string_val == [b"finished"]


def test_by_default_the_key_statistics_and_every_third_steps_histograms(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh())
    spec = ["mean", "rms", "abs_max", "fp16_overflow", "fp16_underflow", stats.histogram()]
    with track(model, stats=spec) as t:
        for step in range(7):
            scale = 1e-9 if step == 5 else 1.0  # fp16 underflows at step 5 only
            (model(torch.randn(5, 3)) * scale).sum().backward()
            t.step()
    to_tensorboard(t, tmp_path)
    events, _ = _run(tmp_path, t.to_frame().iloc[0])  # the Linear's output
    tags = events.Tags()
    # fp16_overflow is 0 at every step, and so is the values' fp16_underflow: their flat
    # lines are left out; the gradient's fp16_underflow, 0 but at step 5, is written whole.
    assert sorted(tags["scalars"]) == [
        "grad/abs_max",
        "grad/fp16_underflow",
        "grad/rms",
        "value/abs_max",
        "value/rms",
    ]
    underflow = [(e.step, e.value) for e in events.Scalars("grad/fp16_underflow")]
    assert underflow == [(step, 1.0 if step == 5 else 0.0) for step in range(7)]
    assert sorted(tags["tensors"]) == ["grad/hist", "value/hist"]
    assert [e.step for e in events.Tensors("value/hist")] == [0, 3, 6]
    with pytest.raises(ValueError, match=r"to_tensorboard\(stats=...\).*unknown: \['kurtosis'\]"):
        to_tensorboard(t, tmp_path / "b", stats=["rms", "kurtosis"])
    with pytest.raises(TypeError, match=r"to_tensorboard\(stats=...\) must be"):
        to_tensorboard(t, tmp_path / "b", stats="rms")
    with pytest.raises(ValueError, match="histogram_every"):
        to_tensorboard(t, tmp_path / "b", histogram_every=0)
    assert not (tmp_path / "b").exists()  # checked before anything is written


def test_a_module_name_stays_inside_logdir(tmp_path: Path) -> None:
    model = nn.Sequential()
    model.add_module("a/:b", nn.Linear(3, 3))
    with track(model, stats=["rms"]) as t:
        model(torch.randn(2, 3))
        t.step()
    to_tensorboard(t, tmp_path / "tb")
    assert [p.name for p in tmp_path.iterdir()] == ["tb"]
    runs = {p.parent.relative_to(tmp_path / "tb") for p in (tmp_path / "tb").rglob("events*")}
    assert runs == {Path("."), Path("%3Croot%3E", "output"), Path("a%2F%3Ab", "output")}
    assert _safe("..") == "%2E%2E" and _safe(".") == "%2E"


def test_full_copies_become_histograms_of_their_values(tmp_path: Path) -> None:
    t = _train()
    to_tensorboard(t, tmp_path, histogram_every=1)
    first = t[0]
    events, side = _run(
        tmp_path, {"name": first.name, "kind": first.kind, "attr": first.attr, "grad": first.grad}
    )
    rows = _histogram(events, f"{side}/values", 0)
    assert len(rows) == 64 and sum(r[2] for r in rows) == first.value.numel()
    assert rows[-1][1] == pytest.approx(first.value.max().item())
    assert rows[0][0] == pytest.approx(first.value.min().item())


def test_a_loaded_recording_exports_the_same(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    t = _train(stats=True)
    t.save(tmp_path / "run")
    to_tensorboard(t, tmp_path / "live")
    to_tensorboard(load(tmp_path / "run"), tmp_path / "loaded")
    live, loaded = _events(tmp_path / "live/0/output"), _events(tmp_path / "loaded/0/output")
    assert live.Tags()["scalars"] == loaded.Tags()["scalars"]
    assert [e.value for e in live.Scalars("grad/rms")] == [
        e.value for e in loaded.Scalars("grad/rms")
    ]


@pytest.mark.slow  # trains a BERT
def test_the_files_stay_within_3_times_the_recording(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    t, _ = bert_run(layers=2)
    t.save(tmp_path / "run")
    to_tensorboard(t, tmp_path / "tb")
    recording, files = (_size(tmp_path / name) for name in ("run", "tb"))
    assert files <= 3 * recording
    to_tensorboard(t, tmp_path / "all", stats="all", histogram_every=1)  # a user may ask
    assert _size(tmp_path / "all") > 3 * recording


def _size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def test_the_recording_is_checked(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="pass a Tracker"):
        to_tensorboard([1, 2], tmp_path)
