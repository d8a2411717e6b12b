"""Issue #26 item 12: what a new user tripped on, each now said plainly."""

from __future__ import annotations

import gc
import re
import sys
import tracemalloc
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import tensor_tracker
from tensor_tracker import track
from tensor_tracker._optional import require
from tensor_tracker.errors import MissingExtraError, NotRecordedError, RecordingError
from tests.helpers import mlp

ROOT = Path(__file__).resolve().parent.parent


def test_an_include_pattern_matching_no_module_warns_naming_it_and_some_names() -> None:
    model = mlp()
    with pytest.warns(UserWarning, match=r"include='\^lin' matches no module") as caught:
        t = track(model, include="^lin")
    assert "'0'" in str(caught[0].message) and caught[0].filename == __file__
    with t:
        model(torch.randn(2, 4))
    assert len(t) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        track(model, include="^0$", exclude="0")  # matched, then excluded: no warning


def test_indexing_by_an_unknown_module_name_says_which_names_are_close() -> None:
    model = nn.Sequential()
    model.add_module("encoder", nn.Linear(4, 4))
    model.add_module("decoder", nn.Linear(4, 4))
    with track(model) as t:
        model(torch.randn(2, 4)).sum().backward()
    with pytest.raises(NotRecordedError, match=r"'encodr'.*close matches: \['encoder'"):
        t["encodr"]
    with pytest.raises(KeyError):  # a KeyError too
        t["no_such.module"]
    assert [(s.name, s.grad) for s in t["decoder"]] == [("decoder", False), ("decoder", True)]
    assert t[0].name == "encoder" and [s.name for s in t[0:1]] == ["encoder"]
    with pytest.raises(TypeError, match=r"tracker\[index\] must be an int, a slice or a module"):
        t[1.5]  # type: ignore[call-overload]


def test_a_summary_of_statistics_says_shapes_were_not_recorded() -> None:
    model = mlp()
    with track(model, stats=True) as t:
        model(torch.randn(2, 4)).sum().backward()
    summary = t.summary()
    assert summary.not_recorded is not None and "statistics" in summary.not_recorded
    assert "not recorded" in str(summary) and "not recorded" in summary._repr_html_()
    with track(model) as copies:
        model(torch.randn(2, 4))
    assert copies.summary().not_recorded is None and "not recorded" not in str(copies.summary())


def test_a_missing_extra_names_the_package_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(MissingExtraError) as info:
        require("matplotlib.figure", "plot")
    message = str(info.value)
    assert "pip install matplotlib`" in message and "tensor-tracker[plot]" in message
    assert "matplotlib.figure" not in message
    monkeypatch.setitem(sys.modules, "umap", None)
    with pytest.raises(MissingExtraError, match="pip install umap-learn`"):
        require("umap", "umap")


def test_loading_a_file_says_it_is_not_a_recording(tmp_path: Path) -> None:
    page = tmp_path / "run.html"
    page.write_text("<html></html>")
    with pytest.raises(RecordingError, match=r"run\.html is a file, not a recording directory"):
        tensor_tracker.load(page)
    with pytest.raises(RecordingError, match="no such directory"):
        tensor_tracker.load(tmp_path / "missing")


def test_view_without_a_browser_says_where_the_page_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("pyarrow")
    import webbrowser

    from tensor_tracker.__main__ import main

    model = mlp()
    with track(model, stats=True) as t:
        model(torch.randn(2, 4))
    t.save(tmp_path / "run")
    monkeypatch.setattr(webbrowser, "open", lambda url: False)
    assert main(["view", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "run" / "report.html") in out and "no web browser" in out


def _held_and_built_bytes() -> tuple[float, float]:
    """Host bytes a `stats=True` tracker holds per record, and per `Stash` built from it."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(16, 16) for _ in range(20)])
    x = torch.randn(4, 16)

    def run(steps: int) -> tensor_tracker.Tracker:
        with track(model, stats=True) as t:
            for _ in range(steps):
                model(x).sum().backward()
                t.step()
        return t

    run(2)  # caches and lazily built objects, not counted
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        t = run(100)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - start
        start = tracemalloc.get_traced_memory()[0]
        built = list(t)
        gc.collect()
        per_stash = (tracemalloc.get_traced_memory()[0] - start) / len(built)
    finally:
        tracemalloc.stop()
    return held / len(t), per_stash


@pytest.mark.slow  # a fresh Python interpreter importing torch: 2-6 s of CPU
def test_the_readme_states_the_memory_a_record_costs() -> None:
    readme = (ROOT / "README.md").read_text()
    held = re.search(r"about (\d+) bytes\s+of host memory per recorded tensor", readme)
    built = re.search(r"costs about (\d+) bytes\s+while you keep it", readme)
    assert held and built, "the README's sentence on memory per record changed"
    measured_held, measured_built = _held_and_built_bytes()
    # Stated round numbers: within a third of what tracemalloc measures here.
    assert abs(int(held.group(1)) - measured_held) < measured_held / 3, measured_held
    assert abs(int(built.group(1)) - measured_built) < measured_built / 3, measured_built
