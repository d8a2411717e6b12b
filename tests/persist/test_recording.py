"""Recordings on disk: `Tracker.save` / `tensor_tracker.load` round-trip every recorded value
without pickle, `track(..., stream_to=...)` streams with flat memory, a reader process sees
a run grow, and a writer killed with SIGKILL leaves a recording that loads (or says what
was lost)."""

from __future__ import annotations

import json
import math
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import tensor_tracker
from tensor_tracker import LogEntry, Stash, load, track
from tensor_tracker._core.structure import iter_tensors
from tensor_tracker._data.frame import type_name
from tensor_tracker.errors import ArgumentValueError, RecordingError
from tensor_tracker.stats import Stats
from tests.persist.recording_files import craft, replace_column

pytest.importorskip("pyarrow")


class Pair(nn.Module):
    """Returns a dict and a tuple with a None: odd output structures."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> dict[str, Any]:
        h = self.linear(x)
        return {"h": h, "both": (h.relu(), None), "n": 3}


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(Pair(), _First(), nn.Linear(4, 2))


class _First(nn.Module):
    def forward(self, out: dict[str, Any]) -> Tensor:
        h: Tensor = out["h"]
        return h * 2


def _run(t: Any, model: nn.Module, steps: int = 3) -> None:
    for step in range(steps):
        model(torch.randn(3, 4)).sum().backward()
        t.log("loss", torch.tensor(0.5 * step))
        t.step()
    t.note("done")


def _bits(x: Tensor) -> Tensor:
    flat = x.detach().reshape(-1)
    return flat.view(torch.uint8) if flat.dtype.is_floating_point else flat


def _same(a: Any, b: Any) -> bool:
    """Equal values: tensors bitwise (dtype and shape too), statistics by raw vector."""
    if isinstance(a, Tensor):
        if not isinstance(b, Tensor) or a.dtype != b.dtype or a.shape != b.shape:
            return False
        return torch.equal(_bits(a), _bits(b))
    if isinstance(a, Stats):
        if not isinstance(b, Stats) or a.numel != b.numel or a.names != b.names:
            return False
        return all(
            x == y or (math.isnan(x) and math.isnan(y))
            for x, y in zip(a._host_values(), b._host_values(), strict=True)
        )
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"dtype": torch.bfloat16},
        {"stats": True},
        {"stats": ["rms", "nonfinite", tensor_tracker.stats.histogram(bins=4)]},
        {"stats": [("l1", lambda x: x.abs().sum())]},
        {"stash_value": lambda x: float(x.float().std())},
        {
            "stats": [
                "rms",
                "nvfp4_error",
                "block_dynamic_range",
                tensor_tracker.stats.blocks("mxfp4_e2m1_underflow", dim=0, suffix="_dim0"),
            ]
        },
    ],
    ids=["copies", "bf16", "stats", "histogram", "custom-stat", "floats", "block-formats"],
)
def test_save_and_load_round_trip_every_value(tmp_path: Path, options: dict[str, Any]) -> None:
    model = _model()
    with track(model, capture=("inputs", "outputs", "params"), **options) as t:
        _run(t, model)
    t.save(tmp_path / "run")
    loaded = load(tmp_path / "run")
    assert len(loaded) == len(t) > 0
    for mine, theirs in zip(t, loaded, strict=True):
        fields = ("name", "grad", "call", "step", "kind", "attr", "training")
        assert [getattr(mine, f) for f in fields] == [getattr(theirs, f) for f in fields]
        assert type_name(theirs.type) == type_name(mine.type)
        assert _same(mine.value, theirs.value), (mine.name, mine.kind, mine.grad)
    if "stash_value" not in options:
        import pandas as pd

        pd.testing.assert_frame_equal(t.to_frame(), loaded.to_frame())
    assert loaded.logged[:3] == [LogEntry(step, "loss", 0.5 * step, None) for step in range(3)]
    last = loaded.logged[3]
    assert (last.step, last.name, last.text) == (3, None, "done") and math.isnan(last.value)
    # Loaded module classes are the real ones when their module is imported.
    assert {s.type for s in loaded} >= {nn.Linear, Pair, nn.Sequential}


def test_loading_unpickles_and_imports_nothing(tmp_path: Path, monkeypatch: Any) -> None:
    class Hidden(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            return x + 1

    Hidden.__module__ = "some_package_that_is_not_installed"
    model = nn.Sequential(Hidden())
    with track(model) as t:
        model(torch.ones(2))
    t.save(tmp_path / "run")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("pickle was used")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    loaded = load(tmp_path / "run")
    stand_in = loaded[0].type
    assert stand_in is not Hidden and issubclass(stand_in, nn.Module)
    assert loaded.to_frame()["type"].tolist() == [
        "some_package_that_is_not_installed.test_loading_unpickles_and_imports_nothing."
        "<locals>.Hidden",
        "torch.nn.modules.container.Sequential",
    ]
    assert "some_package_that_is_not_installed" not in sys.modules


def test_stashes_built_by_hand_or_by_stash_fn_are_saved_too(tmp_path: Path) -> None:
    def shapes(event: tensor_tracker.Event) -> Stash:
        return Stash(event.name, event.type, event.grad, [list(event.args[0].shape)])

    model = nn.Sequential(nn.Linear(2, 2))
    with track(model, stash=shapes, grad=False) as t:
        model(torch.ones(5, 2))
    t.stashes.append(Stash("extra", nn.ReLU, True, {"a": torch.zeros(1)}, step=4))
    t.save(tmp_path / "run")
    loaded = load(tmp_path / "run")
    assert [(s.name, s.grad, s.step, s.value) for s in loaded][:2] == [
        ("0", False, 0, [[5, 2]]),
        ("", False, 0, [[5, 2]]),
    ]
    extra = loaded[2]
    assert (extra.name, extra.type, extra.grad, extra.step) == ("extra", nn.ReLU, True, 4)
    assert _same(extra.value, {"a": torch.zeros(1)})


def test_save_refuses_what_needs_pickle_and_existing_recordings(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    with track(model, stash_value=lambda x: object(), grad=False) as t:
        model(torch.ones(1, 2))
    with pytest.raises(ArgumentValueError, match=r"record 0 \(step 0\) holds a builtins.object"):
        t.save(tmp_path / "bad")
    assert not (tmp_path / "bad").exists()  # nothing half-written left behind
    with track(model) as t:
        model(torch.ones(1, 2))
    t.save(tmp_path / "run")
    with pytest.raises(ArgumentValueError, match="already holds a recording"):
        t.save(tmp_path / "run")
    with pytest.raises(RecordingError, match="not a tensor_tracker recording"):
        load(tmp_path)


def test_a_newer_format_and_a_truncated_file_are_reported(tmp_path: Path) -> None:
    model = _model()
    with track(model, stats=True, stream_to=tmp_path / "run") as t:
        _run(t, model, steps=4)
    meta_file = tmp_path / "run" / "recording.json"
    meta = json.loads(meta_file.read_text())
    assert meta["complete"] and meta["version"] == 2
    records = tmp_path / "run" / "records.blocks"
    whole = records.read_bytes()
    records.write_bytes(whole[:-100])  # the last step's block cut short
    with pytest.raises(RecordingError, match=r"records.blocks is truncated.*reads the 3 whole"):
        load(tmp_path / "run")
    with pytest.warns(RuntimeWarning, match="truncated.*read the first 3 commit"):
        recovered = load(tmp_path / "run", recover=True)
    assert sorted(set(recovered.to_frame()["step"])) == [0, 1, 2]
    meta_file.write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(RecordingError, match=r"version 99 recording.*upgrade"):
        load(tmp_path / "run")


def test_streaming_keeps_memory_flat(tmp_path: Path) -> None:
    model = _model()
    held = []
    with track(model, stats=True, stream_to=tmp_path / "run") as t:
        for _ in range(30):
            model(torch.randn(3, 4)).sum().backward()
            held.append(len(t))
            t.step()
    per_step = held[0]
    assert per_step > 0 and held == [per_step] * 30  # one step in memory, never more
    loaded = load(tmp_path / "run")
    assert len(loaded) == 30 * per_step
    assert sorted(set(loaded.to_frame()["step"])) == list(range(30))


def test_streaming_reads_the_statistics_in_one_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flush at `step()` reads a step's statistics with one transfer per device, not
    one per record: on a GPU each read of a row waited for the device (74 waits per step on
    the 4-layer encoder of `./dev gpu`, which checks the waits themselves)."""
    from tensor_tracker.stats import _store

    reads = {"rows": 0, "tables": 0}
    get, table = _store.StatsStore.get, _store.StatsStore.table

    def counted_get(self: _store.StatsStore, ref: int) -> Stats:
        reads["rows"] += 1
        return get(self, ref)

    def counted_table(self: _store.StatsStore, refs: Tensor) -> tuple[Tensor, Tensor]:
        reads["tables"] += 1
        return table(self, refs)

    monkeypatch.setattr(_store.StatsStore, "get", counted_get)
    monkeypatch.setattr(_store.StatsStore, "table", counted_table)
    torch.manual_seed(0)
    # Tensor outputs (a dict or tuple output, kept as one record, is still read per record).
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    with track(model, stats=True, stream_to=tmp_path / "run") as t:
        for _ in range(3):
            model(torch.randn(3, 4)).sum().backward()
            per_step = len(t)
            t.step()
    assert per_step > 2 and reads == {"rows": 0, "tables": 3}
    frame = load(tmp_path / "run").to_frame()
    assert len(frame) == 3 * per_step and frame["rms"].notna().all()


_WRITER = textwrap.dedent(
    """
    import sys, time, torch
    from torch import nn
    import tensor_tracker
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
    with tensor_tracker.track(model, stream_to=sys.argv[1]) as t:
        step = 0
        while True:
            model(torch.randn(256, 64)).sum().backward()
            t.log("step", step)
            t.step()
            step += 1
            if step == 3:
                print("ready", flush=True)
    """
)


@pytest.mark.slow
def test_a_reader_follows_a_running_writer_and_survives_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "run"
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None
        deadline = time.monotonic() + 60
        assert writer.stdout.readline().strip() == "ready"
        first = load(path)  # while the writer appends (a partial batch is not an error)
        seen = len(first.log_frame())
        assert seen >= 3
        while len(load(path).log_frame()) <= seen:
            assert time.monotonic() < deadline, "the reader saw no new step"
            time.sleep(0.05)
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(timeout=30)
    with pytest.warns(RuntimeWarning, match="incomplete recording: its writer stopped") as caught:
        after = load(path)
    assert len(caught) == 1 and after.complete is False
    steps = sorted(set(after.to_frame()["step"]))
    assert steps == list(range(len(steps))) and len(steps) > seen
    assert len(after.log_frame()) == len(steps)  # a step's scalars commit with its records
    assert all(len(s.value) == 1 or s.grad is False for s in after[:6])


def test_plots_and_summary_work_on_a_loaded_recording(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    model = _model()
    with track(model, stats=True) as t:
        _run(t, model)
    t.save(tmp_path / "run")
    loaded = load(tmp_path / "run")
    figure = tensor_tracker.plot.scale_plot(loaded)
    assert figure.axes
    assert [c.name for c in loaded.summary()] == ["", "0", "0.linear", "1", "2"]


def test_log_and_note_check_their_arguments() -> None:
    model = _model()
    with track(model, stats=True) as t:
        with pytest.raises(TypeError, match="name"):
            t.log(3, 1.0)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="one number"):
            t.log("x", torch.ones(2))
        with pytest.raises(TypeError, match="note"):
            t.note(1)  # type: ignore[arg-type]
        t.log("loss", torch.tensor(2.0))
        t.note("hello")
    frame = t.log_frame()
    assert frame["name"].tolist()[0] == "loss" and frame["value"].tolist()[0] == 2.0
    assert frame["text"].tolist()[1] == "hello"


def test_stream_to_is_checked_before_anything_is_attached(tmp_path: Path) -> None:
    model = _model()
    with pytest.raises(TypeError, match="stream_to="):
        track(model, stream_to=3)  # type: ignore[arg-type]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "recording.json").write_text("{}")
    with pytest.raises(ValueError, match="already holds a recording"):
        track(model, stream_to=tmp_path / "run")
    assert not any(m._forward_hooks for m in model.modules())


def test_os_path_types(tmp_path: Path) -> None:
    model = _model()
    with track(model, stats=True) as t:
        _run(t, model, steps=1)
    t.save(str(tmp_path / "as-str"))
    assert len(load(os.fspath(tmp_path / "as-str"))) == len(t)


@pytest.mark.slow  # builds and runs a GPT-2: 5 s quiet, 13 s in a loaded CI run
def test_a_hugging_face_model_with_its_cache_round_trips(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32)
    model = transformers.GPT2LMHeadModel(config)
    tokens = torch.randint(0, 100, (2, 8))
    for name, options in (("stats", {"stats": True}), ("copies", {})):
        with track(model, capture=("outputs", "inputs"), **options) as t:
            model(tokens, labels=tokens).loss.backward()
        # Outputs and the past_key_values input hold a DynamicCache (rebuilt, not pickled).
        assert any("Cache" in type(s.value).__name__ for s in t)
        t.save(tmp_path / name)
        loaded = load(tmp_path / name)
        assert len(loaded) == len(t)
        for mine, theirs in zip(t, loaded, strict=True):
            mine_tensors = [*iter_tensors(mine.value)]
            theirs_tensors = [*iter_tensors(theirs.value)]
            assert len(mine_tensors) == len(theirs_tensors)
            assert all(_same(a, b) for a, b in zip(mine_tensors, theirs_tensors, strict=True))
        if name == "stats":
            import pandas as pd

            pd.testing.assert_frame_equal(t.to_frame(), loaded.to_frame())


# -- issue 35 ----------------------------------------------------------------------------


def test_names_with_lone_surrogates_are_streamed_and_loaded(tmp_path: Path) -> None:
    model = nn.Sequential()
    model.add_module("layer\udcff", nn.Linear(2, 2))
    with track(model, stats=True, stream_to=tmp_path / "run") as t:
        model(torch.randn(3, 2)).sum().backward()
        t.log("loss\udcff", 1.0)
        t.note("note \ud800")
        t.step()
    run = load(tmp_path / "run")
    assert set(run.to_frame()["name"]) == {"", "layer\\udcff"}
    assert run.log_frame()[["name", "text"]].fillna("").values.tolist() == [
        ["loss\\udcff", ""],
        ["", "note \\ud800"],
    ]


@pytest.mark.slow  # a fresh Python interpreter importing torch: 2-6 s of CPU
def test_load_imports_no_module_a_recording_names(tmp_path: Path) -> None:
    # Issue 35, item 12: classes and torch values named after torch's lazily imported
    # submodules (seconds each to import) resolve only from what is imported already.
    class Lazy(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            return x.to(torch.float64)

    Lazy.__module__, Lazy.__qualname__ = "torch", "_dynamo"
    model = nn.Sequential(Lazy())
    with track(model) as t:
        model(torch.randn(2))
    t.save(tmp_path / "run")
    craft(
        tmp_path / "run",
        "records.blocks",
        lambda _, table: replace_column(table, "value", ['{"$torch": "torch.onnx"}'] * len(table)),
    )
    script = f"""
import sys, tensor_tracker
lazy = ("torch._dynamo", "torch.onnx", "torch._inductor", "sympy")
before = [m for m in lazy if m in sys.modules]
t = tensor_tracker.load({str(tmp_path / "run")!r})
print(before, [m for m in lazy if m in sys.modules], t[0].type.__qualname__, t[0].value)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "[]", "_dynamo", "torch.onnx"]
