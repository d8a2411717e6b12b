"""`to_wandb` in wandb's offline mode: what the run file holds, read back record by record,
is what was recorded, and calling it again logs only the new steps."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tensor_tracker import stats, track
from tensor_tracker.export import tensorboard_tag, to_wandb

wandb = pytest.importorskip("wandb")


def _records(path: Path) -> list[Any]:
    """The records of a `.wandb` file: a 7-byte header (":W&B", 0xBEE1, version), then
    32 KiB blocks of (crc32c, length, type, data) chunks, as in LevelDB's log format."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    position, pending, records = 7, b"", []
    while position + 7 <= len(data):
        left = 32768 - position % 32768
        if left < 7:  # the end of a block is padding
            position += left
            continue
        length = int.from_bytes(data[position + 4 : position + 6], "little")
        kind = data[position + 6]
        if position + 7 + length > len(data):
            break  # still being written
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def _history(run_dir: Path) -> list[tuple[int, dict[str, Any]]]:
    (file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    # wandb's core process may still be writing when finish() returns: wait for the exit
    # record, which it writes last.
    deadline = time.monotonic() + 60
    records = _records(file)
    while not any(r.WhichOneof("record_type") == "exit" for r in records):
        assert time.monotonic() < deadline, "wandb never finished writing its run file"
        time.sleep(0.1)
        records = _records(file)
    out = []
    for record in records:
        if record.WhichOneof("record_type") == "history":
            items = {
                (i.key or "/".join(i.nested_key)): json.loads(i.value_json)
                for i in record.history.item
            }
            out.append((record.history.step.num, items))
    return out


@pytest.mark.slow
def test_offline_run_holds_each_step_once_with_the_recorded_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh())
    run = wandb.init(mode="offline", dir=str(tmp_path), project="tensor-tracker-test")
    try:
        with track(model, stats=["rms", stats.histogram(bins=4)]) as t:
            for step in range(4):
                model(torch.randn(5, 3)).sum().backward()
                t.log("loss", 1.0 + step)
                t.step()
                if step in (1, 3):
                    logged = to_wandb(t, run)  # as a training loop would, now and then
                    assert logged == step
            t.note("done")
        assert to_wandb(t, run) == 3  # no new step: nothing logged but the note
        assert run.notes == "step 4: done"
    finally:
        run.finish()
    history = _history(tmp_path)
    assert [step for step, _ in history] == [0, 1, 2, 3]  # each step once, in order
    frame = t.to_frame()
    for step, items in history:
        assert items["log/loss"] == 1.0 + step
        for _, row in frame[frame["step"] == step].iterrows():
            tag = tensorboard_tag(row["name"], row["kind"], row["attr"], row["grad"], "rms")
            assert items[tag] == pytest.approx(row["rms"])
            hist = tensorboard_tag(row["name"], row["kind"], row["attr"], row["grad"], "hist")
            assert items[f"{hist}/_type"] == "histogram"  # a wandb.Histogram, stored nested
            assert items[f"{hist}/values"] == list(row["hist"])
            assert items[f"{hist}/bins"] == [-32.0, -20.0, -8.0, 4.0, 16.0]
    assert os.path.isdir(tmp_path / "wandb")


def test_to_wandb_checks_its_recording() -> None:
    with pytest.raises(TypeError, match="pass a Tracker"):
        to_wandb([1], object())
