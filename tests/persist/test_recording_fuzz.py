"""Issue 26: a damaged recording loads as what was recorded, or raises `RecordingError`:
never other data, never another exception. Each file of three small recordings (statistics
with a histogram; full copies in tensors files; statistics per channel and per sample) is cut at many offsets, has bytes flipped,
and is swapped with the same file of another run of the same model. Deterministic (fixed
seed), bounded in time (a fixed number of small loads) and memory (checked)."""

from __future__ import annotations

import os
import random
import resource
import shutil
import signal
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tensor_tracker import load, stats, track
from tensor_tracker.errors import RecordingError, TensorTrackerError
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


# -- issue 35: symbolic links and FIFOs planted where a recording is read or written -----


@pytest.mark.parametrize("inside", [False, True])
def test_a_run_directory_whose_rank_is_a_symbolic_link_is_refused(
    tmp_path: Path, inside: bool
) -> None:
    run = tmp_path / "run"
    _record(run / "rank-0", "statistics")
    _record(tmp_path / "outside", "statistics")
    (run / "rank-1").symlink_to(run / "rank-0" if inside else tmp_path / "outside")
    with pytest.raises(RecordingError, match="rank-1 is a symbolic link"):
        load(run)


# Every name a writer creates in its directory (the tensors file of the first commit too).
PLANTED = [
    "writer.lock",
    "recording.json",
    ".recording.json.tmp",
    "journal",
    "sites.blocks",
    "records.blocks",
    "log.blocks",
    "tensors",
    "tensors/000000.safetensors",
]


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
@pytest.mark.parametrize("name", PLANTED)
def test_links_and_fifos_planted_in_the_output_directory_are_refused(
    tmp_path: Path, name: str, kind: str
) -> None:
    run = tmp_path / "run"
    (run / name).parent.mkdir(parents=True)
    victim = tmp_path / "victim"
    if name == "tensors":
        victim.mkdir()
    else:
        victim.write_text("precious")
    if kind == "symlink":
        (run / name).symlink_to(victim)
    else:
        os.mkfifo(run / name)

    def blocked(signum: int, frame: object) -> None:
        raise TimeoutError(f"the writer blocked on the FIFO {name}")

    previous = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(30)
    try:
        with pytest.raises(TensorTrackerError, match=rf"{name}|recording"):
            _record(run, "copies")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    if name == "tensors":
        assert list(victim.iterdir()) == []
    else:
        assert victim.read_text() == "precious"
