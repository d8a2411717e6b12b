"""Statistics per channel / per sample in recordings: saved, streamed and loaded exactly
(widths per record included), gathered across ranks, and a hostile `vectors` column or spec
refused with `RecordingError` before anything is sized by it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from tensor_tracker import load, stats, track
from tensor_tracker._persist.ranks import merge, part_of
from tensor_tracker._persist.recording_codec import spec_from_json
from tensor_tracker.errors import RecordingError
from tests.persist.recording_files import craft, replace_column, rewrite_meta, signature

pytest.importorskip("pyarrow")

SPEC = [*stats.DEFAULT, stats.per_channel("abs_max"), stats.per_sample("rms")]
VECTORS = ("abs_max_per_channel", "rms_per_sample")


class _Pair(nn.Module):
    """A module with a dict output: its statistics are kept as objects, not store rows."""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"twice": 2 * x, "same": x}


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.ReLU(), _Pair())


def _train(t: Any, model: nn.Module) -> Any:
    with t:
        for step in range(3):
            # Batches of 3, 4, 5: the per-sample vectors change width.
            out = model(torch.randn(3 + step, 4))
            out["twice"].sum().backward()
            t.step()
    return t


def _same_vectors(a: Any, b: Any) -> None:
    assert len(a) == len(b)
    for name in VECTORS:
        for x, y in zip(a[name], b[name], strict=True):
            if isinstance(x, float):
                assert isinstance(y, float)
            else:
                np.testing.assert_array_equal(x, y)


def test_save_and_load_keep_every_vector(tmp_path: Path) -> None:
    model = _model()
    t = _train(track(model, stats=SPEC), model)
    t.save(tmp_path / "run")
    loaded = load(tmp_path / "run")
    _same_vectors(t.to_frame(), loaded.to_frame())
    assert signature(loaded) == signature(t)
    widths = loaded.to_frame().query("name == '0' and not grad")["rms_per_sample"].map(len)
    assert widths.tolist() == [3, 4, 5]


def test_streaming_writes_what_save_writes(tmp_path: Path) -> None:
    model = _model()
    saved = _train(track(model, stats=SPEC), model)
    saved.save(tmp_path / "saved")
    model = _model()
    _train(track(model, stats=SPEC, stream_to=tmp_path / "streamed"), model)
    assert signature(load(tmp_path / "streamed")) == signature(load(tmp_path / "saved"))
    _same_vectors(load(tmp_path / "streamed").to_frame(), saved.to_frame())


def test_ranks_gathered_keep_their_vectors() -> None:
    model = _model()
    t = _train(track(model, stats=SPEC), model)
    into = track(nn.Linear(1, 1), stats=SPEC)
    merge([part_of(t.stashes, 0, 2), part_of(t.stashes, 1, 2)], into.stashes)
    frame, own = into.to_frame(), t.to_frame()
    assert len(frame) == 2 * len(own)
    _same_vectors(frame.iloc[len(own) :].reset_index(drop=True), own)


def _first_stats_row(table: Any) -> int:
    return int(np.flatnonzero(table.column("value").is_null().to_numpy(zero_copy_only=False))[0])


def _hostile(path: Path, change: Any) -> None:
    def edit(index: int, table: Any) -> Any:
        if index:
            return table
        values = table.column("vectors").to_pylist()
        change(values, _first_stats_row(table), table)
        return replace_column(table, "vectors", values)

    craft(path, "records.blocks", edit)


def _longer(values: list[Any], row: int, table: Any) -> None:
    numel = table.column("numel")[row].as_py()
    values[row][0] = [1.0] * (numel + 1)


def _missing(values: list[Any], row: int, table: Any) -> None:
    values[row] = values[row][:1]


def _null(values: list[Any], row: int, table: Any) -> None:
    values[row] = None


def _null_value(values: list[Any], row: int, table: Any) -> None:
    values[row][0] = [None, 1.0]


def _on_object_row(values: list[Any], row: int, table: Any) -> None:
    others = np.flatnonzero(~table.column("value").is_null().to_numpy(zero_copy_only=False))
    values[int(others[0])] = [[1.0], [1.0]]


@pytest.mark.parametrize(
    "change",
    [_longer, _missing, _null, _null_value, _on_object_row],
    ids=["longer than numel", "one vector short", "null", "null value", "on an object row"],
)
def test_a_hostile_vectors_column_is_refused(tmp_path: Path, change: Any) -> None:
    model = _model()
    _train(track(model, stats=SPEC), model).save(tmp_path / "run")
    _hostile(tmp_path / "run", change)
    with pytest.raises(RecordingError, match=r"records\.blocks"):
        load(tmp_path / "run")


def test_a_hostile_vectors_value_in_json_is_refused(tmp_path: Path) -> None:
    model = _model()
    _train(track(model, stats=SPEC), model).save(tmp_path / "run")

    edited: list[int] = []

    def edit(index: int, table: Any) -> Any:
        values = table.column("value").to_pylist()
        for i, value in enumerate(values):
            if value and value.startswith('{"$dict"') and '"vectors"' in value:
                plain = json.loads(value)
                plain["$dict"][0][1]["vectors"][0] = [1.0] * 10_000  # longer than numel
                values[i] = json.dumps(plain)
                edited.append(i)
        return replace_column(table, "value", values)

    craft(tmp_path / "run", "records.blocks", edit)
    assert edited
    with pytest.raises(RecordingError, match="vectors"):
        load(tmp_path / "run")


@pytest.mark.parametrize(
    "item",
    [
        {"per_axis": {"stat": "std", "dim": -1, "axis": "channel"}},
        {"per_axis": {"stat": "rms", "dim": "x", "axis": "channel"}},
        {"per_axis": {"stat": "rms", "dim": -1, "axis": "pixel"}},
        {"per_axis": {"stat": "rms", "dim": -1, "axis": "channel", "extra": 1}},
        {"per_axis": {"stat": "rms"}},
    ],
)
def test_a_malformed_per_axis_spec_is_a_recording_error(tmp_path: Path, item: Any) -> None:
    with pytest.raises(RecordingError, match="statistics spec"):
        spec_from_json(["rms", item])
    model = _model()
    _train(track(model, stats=SPEC), model).save(tmp_path / "run")
    rewrite_meta(tmp_path / "run", stats=["mean", item])
    with pytest.raises(RecordingError):
        load(tmp_path / "run")


def test_recordings_without_vectors_keep_their_columns(tmp_path: Path) -> None:
    model = _model()
    _train(track(model, stats=True), model).save(tmp_path / "run")
    from tests.persist.recording_files import tables

    names = tables(tmp_path / "run", "records.blocks")[0].schema.names
    assert "vectors" not in names  # byte for byte the format of before
