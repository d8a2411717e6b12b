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


def test_statistics_histograms_scalars_and_notes_read_back(tmp_path: Path) -> None:
    t = _train(stats=["rms", "abs_max", stats.histogram(bins=8, range=(-8.0, 8.0))])
    to_tensorboard(t, tmp_path)
    events = _events(tmp_path)
    frame = t.to_frame()
    for _, row in frame.iterrows():
        for stat in ("rms", "abs_max"):
            tag = tensorboard_tag(row["name"], row["kind"], row["attr"], row["grad"], stat)
            (event,) = [e for e in events.Scalars(tag) if e.step == row["step"]]
            assert event.value == pytest.approx(row[stat], rel=1e-6)  # stored as float32
        tag = tensorboard_tag(row["name"], row["kind"], row["attr"], row["grad"], "hist")
        (hist,) = [h for h in events.Histograms(tag) if h.step == row["step"]]
        # The bins from the first filled one to the last (TensorBoard would draw the empty
        # ones around them too), their right edges as the bucket limits.
        counts = list(row["hist"])
        filled = [k for k, c in enumerate(counts) if c]
        first, last = filled[0], filled[-1]
        assert list(hist.histogram_value.bucket) == counts[first : last + 1]
        edges = [-8.0 + 2.0 * k for k in range(9)]
        assert list(hist.histogram_value.bucket_limit) == edges[first + 1 : last + 2]
        assert (hist.histogram_value.min, hist.histogram_value.max) == (
            edges[first],
            edges[last + 1],
        )
    assert [(e.step, e.value) for e in events.Scalars("log/loss")] == [(0, 1.0), (1, 2.0), (2, 3.0)]
    (note,) = events.Tensors("notes/text_summary")
    assert note.step == 3 and note.tensor_proto.string_val == [b"finished"]


def test_full_copies_become_histograms_of_their_values(tmp_path: Path) -> None:
    t = _train()
    to_tensorboard(t, tmp_path)
    events = _events(tmp_path)
    first = t[0]
    tag = tensorboard_tag(first.name, first.kind, first.attr, first.grad, "values")
    (hist,) = [h for h in events.Histograms(tag) if h.step == 0]
    assert hist.histogram_value.num == first.value.numel()
    assert hist.histogram_value.max == pytest.approx(first.value.max().item())


def test_a_loaded_recording_exports_the_same(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    t = _train(stats=True)
    t.save(tmp_path / "run")
    to_tensorboard(t, tmp_path / "live")
    to_tensorboard(load(tmp_path / "run"), tmp_path / "loaded")
    live, loaded = _events(tmp_path / "live"), _events(tmp_path / "loaded")
    assert live.Tags()["scalars"] == loaded.Tags()["scalars"]
    tag = tensorboard_tag("0", "output", "", True, "rms")
    assert [e.value for e in live.Scalars(tag)] == [e.value for e in loaded.Scalars(tag)]


def test_the_recording_is_checked(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="pass a Tracker"):
        to_tensorboard([1, 2], tmp_path)
