"""Issue 26: a damaged recording loads as what was recorded, or raises `RecordingError`:
never other data, never another exception. Each file of three small recordings (statistics
with a histogram; full copies in tensors files; statistics per channel and per sample) is cut at many offsets, has bytes flipped,
and is swapped with the same file of another run of the same model. Deterministic (fixed
seed), bounded in time (a fixed number of small loads) and memory (checked)."""

from __future__ import annotations

import random
import resource
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tensor_tracker import load, stats, track
from tensor_tracker.errors import RecordingError
from tests.persist.recording_files import journal, signature

pytest.importorskip("pyarrow")

CUTS = 24  # offsets per file (and the file's first and last bytes)
FLIPS = 60  # single-byte changes per recording


def _record(path: Path, kind: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    options: dict[str, Any] = {
        "copies": {},
        "statistics": {"stats": [*stats.DEFAULT, stats.histogram(4)]},
        # Vectors per channel and per sample, of a width that changes with the batch.
        "vectors": {"stats": ["rms", stats.per_channel("abs_max"), stats.per_sample("mean")]},
    }[kind]
    with track(model, stream_to=path, **options) as t:
        for step in range(3):
            model(torch.randn(3 + step, 4)).sum().backward()
            t.log("loss", float(step))
            t.step()
        t.note("done")


def _outcome(path: Path) -> Any:
    """The loaded signature, or "error" for a RecordingError (any other exception fails)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return signature(load(path))
    except RecordingError:
        return "error"


def _files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file() and p.name != "writer.lock")


@pytest.mark.parametrize("kind", ["statistics", "copies", "vectors"])
def test_damaged_recordings_load_whole_or_raise_recording_error(tmp_path: Path, kind: str) -> None:
    original, other = tmp_path / "original", tmp_path / "other"
    _record(original, kind)
    _record(other, kind)  # the same data, another run id
    expected = _outcome(original)
    assert expected != "error" and expected == _outcome(other)
    rng = random.Random(26)
    work = tmp_path / "work"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcomes = {"same": 0, "error": 0}

    def check(what: str) -> None:
        found = _outcome(work)
        assert found in ("error", expected), f"{what}: loaded other data"
        outcomes["same" if found == expected else "error"] += 1

    files = _files(original)
    assert {f.name for f in files} >= {"recording.json", "journal", "records.blocks"}
    for file in files:
        name = file.relative_to(original)
        data = file.read_bytes()
        # Random offsets, and the edges where a cut leaves whole lines or blocks.
        edges = {i + 1 for i, byte in enumerate(data) if byte == ord("\n")}
        edges |= {b["at"] for c in journal(original) for b in c["blocks"] if b["file"] == name.name}
        randoms = (rng.randrange(len(data)) for _ in range(CUTS))
        offsets = sorted({0, len(data) - 1, *edges, *randoms} - {len(data)})
        for cut in offsets:
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(original, work)
            (work / name).write_bytes(data[:cut])
            check(f"{name} cut at {cut} of {len(data)}")
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(original, work)
        (work / name).write_bytes((other / name).read_bytes())
        check(f"{name} swapped with another run's")
    for _ in range(FLIPS):
        file = rng.choice(files)
        name = file.relative_to(original)
        data = bytearray(file.read_bytes())
        at = rng.randrange(len(data))
        data[at] ^= rng.randrange(1, 256)
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(original, work)
        (work / name).write_bytes(bytes(data))
        check(f"{name} byte {at} changed")
    # Most damage is an error; a few changes leave the data as it was (JSON whitespace).
    assert outcomes["error"] > 10 * outcomes["same"]
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 512 * 1024, f"peak memory grew by {grown_kib} KiB"
