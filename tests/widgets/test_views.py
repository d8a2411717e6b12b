"""The viewers' logic, without ipywidgets or a display: from controls' values and the
recording to what each control offers and which figure is drawn with which arguments
(`tensor_tracker._data._*_view`). The widgets' own tests (test_widgets.py and the others)
check the shell around it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from tensor_tracker import Tracker, track
from tensor_tracker._data._histogram_view import (
    NO_HISTOGRAM,
    HistogramState,
    filter_modules,
    histogram_choices,
    histogram_drawing,
    histogram_source,
)
from tensor_tracker._data._history_view import (
    NO_HISTOGRAMS,
    HistoryState,
    heatmap_drawing,
    history_drawing,
    history_source,
    role_modules,
    search_modules,
)
from tensor_tracker._data._live_view import (
    ALL,
    NAMES,
    LiveRead,
    LiveState,
    Mark,
    extremes,
    latest_values,
    live_choices,
    live_drawing,
    live_frame,
    live_shown,
    read_failure,
    read_result,
    shown_modules,
)
from tensor_tracker._data._scale_view import ScaleState, scale_choices, scale_drawing, scale_steps
from tensor_tracker._data._umap_view import (
    LIST_ROWS,
    UmapState,
    layer_rows,
    layers_of_shape,
    selection_text,
    token_range,
    umap_drawing,
    umap_source,
)
from tensor_tracker._data._views import EMPTY, Choice, Note, choose
from tensor_tracker.errors import ArgumentValueError
from tests.helpers import stash
from tests.test_layers import PACKAGE, imports, module_name

BLOCKS = [f"blocks.{i}" for i in range(2)]


def values(choice: Choice) -> list[object]:
    return [o[1] if isinstance(o, tuple) else o for o in choice.options]


def test_only_the_shell_of_the_viewers_imports_plot() -> None:
    # A viewer module holds controls and callbacks; the figure is drawn in one place.
    importing = {
        module_name(path)
        for path in sorted((PACKAGE / "widgets").glob("*.py"))
        if any(t.startswith("tensor_tracker.plot") for t in imports(path))
    }
    assert importing == {"tensor_tracker.widgets._base"}


def test_a_choice_keeps_the_value_else_the_default_else_the_first() -> None:
    assert choose([1, 2, 3], keep=2, default=3).value == 2
    assert choose([1, 2, 3], keep=5, default=3).value == 3
    assert choose([("one", 1), ("two", 2)], keep=5, default=7).value == 1
    assert choose([], keep=1) == Choice((), None)


# -- histogram_viewer --------------------------------------------------------------------


def test_histogram_says_why_there_is_nothing_to_show(with_stats_steps: Tracker) -> None:
    assert histogram_source(Tracker()) is EMPTY
    assert histogram_source(with_stats_steps) == Note(NO_HISTOGRAM, error=False)
    custom = histogram_source([stash("text")])
    assert isinstance(custom, Note) and custom.error and "stash_value" in custom.text


def test_histogram_filter_prefers_the_exact_name_and_remembers_the_choice(full: Tracker) -> None:
    source = histogram_source(full)
    assert not isinstance(source, Note)
    choice, chosen = filter_modules(source.names, r"mlp\.down", "embed")
    assert values(choice) == ["blocks.0.mlp.down", "blocks.1.mlp.down"]
    assert (choice.value, chosen) == ("blocks.0.mlp.down", "embed")
    choice, chosen = filter_modules(source.names, "blocks.1", "embed")
    assert choice.value == chosen == "blocks.1"
    choice, chosen = filter_modules(source.names, "no such module", "blocks.1.attn.out")
    assert choice == Choice((), None) and chosen == "blocks.1.attn.out"
    choice, _ = filter_modules(source.names, "", chosen)
    assert choice.value == "blocks.1.attn.out" and values(choice) == source.names


def test_histogram_choices_follow_the_recording(full_steps: Tracker) -> None:
    source = histogram_source(full_steps)
    assert not isinstance(source, Note)
    recorded = [s for s in full_steps if s.name == "blocks.0" and s.grad]
    choices = histogram_choices(source.stashes("blocks.0"), HistogramState(grad=True, step=1))
    assert choices["what"].value == ("output", "")
    assert values(choices["step"]) == sorted({s.step for s in recorded}) == [0, 1, 2]
    assert choices["step"].value == 1  # kept
    assert values(choices["call"]) == [0]


def test_histogram_offers_what_a_module_has_in_that_direction() -> None:
    stashes = [stash(torch.ones(2), "m", grad=True, kind="input", attr="0")]
    choices = histogram_choices(stashes, HistogramState(grad=False))
    assert values(choices["what"]) == [("input", "0")]  # the only thing it has
    assert choices["step"] == Choice((), None)  # nothing forward of that kind


def test_histogram_draws_the_chosen_stash(full: Tracker, hist_steps: Tracker) -> None:
    source = histogram_source(full)
    assert not isinstance(source, Note)
    state = HistogramState(module="blocks.0", grad=True, step=0, call=0, log2=True, bins=16)
    drawing = histogram_drawing(source, state)
    expected = next(s for s in full if s.name == "blocks.0" and s.grad)
    assert drawing.figure == "histogram" and drawing.source.value is expected.value
    assert drawing.options["bins"] == 16 and drawing.options["log2"] is True
    assert drawing.options["labels"] == ["blocks.0 (grad, step 0, call 0)"]
    assert drawing.hidden == frozenset()
    # Recorded bins are fixed: log2 and bins cannot change them.
    recorded = histogram_source(hist_steps)
    assert not isinstance(recorded, Note)
    drawing = histogram_drawing(recorded, HistogramState(module="blocks.0", step=2, call=0))
    assert drawing.options["log2"] is None and drawing.hidden == {"log2", "bins"}


def test_histogram_says_what_is_missing(full: Tracker) -> None:
    source = histogram_source(full)
    assert not isinstance(source, Note)
    with pytest.raises(ArgumentValueError, match="No module matches the filter 'zz'"):
        histogram_drawing(source, HistogramState(filter="zz"))
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    with track(model, grad=False) as no_grads:
        model(torch.ones(1, 2))
    source = histogram_source(no_grads)
    assert not isinstance(source, Note)
    state = HistogramState(module="0", grad=True, step=0, call=0)
    with pytest.raises(ArgumentValueError, match="track with grad=True"):
        histogram_drawing(source, state)


# -- scale_viewer --------------------------------------------------------------------------


def test_scale_offers_the_recorded_statistics_at_the_last_step(with_stats_steps: Tracker) -> None:
    choices = scale_choices(with_stats_steps)
    assert not isinstance(choices, Note)
    recorded = next(iter(with_stats_steps)).value.names
    assert values(choices["stat"]) == list(recorded) and choices["stat"].value == "rms"
    assert choices["kind"].value == "output"
    assert values(choices["step"]) == [0, 1] and choices["step"].value == 1
    assert scale_steps(with_stats_steps, "output", keep=0).value == 0
    assert scale_choices(Tracker()) is EMPTY


def test_scale_draws_the_chosen_statistic(with_stats_steps: Tracker) -> None:
    state = ScaleState(stat="abs_max", kind="output", step=0, limits=True)
    drawing = scale_drawing(with_stats_steps, state)
    assert (drawing.figure, drawing.source) == ("scale_plot", with_stats_steps)
    assert drawing.options == {"stat": "abs_max", "kind": "output", "step": 0}
    assert drawing.margins == {}  # fixed margins: a redraw on every click
    no_limits = scale_drawing(with_stats_steps, ScaleState("rms", "output", 0, limits=False))
    assert no_limits.options["formats"] == ()


# -- history_viewer ------------------------------------------------------------------------


def test_history_opens_on_one_role_across_the_blocks(hist_steps: Tracker) -> None:
    source = history_source(hist_steps)
    assert not isinstance(source, Note)
    # The first learned projection of every block, its gradients.
    assert source.start.modules == ("blocks.0.attn.qkv", "blocks.1.attn.qkv")
    assert source.start.grad and source.start.stat == "rms"
    assert source.heatmap_stat == "hist" and source.binnable
    assert search_modules(source.names, "attn.out", ["embed"]) == [
        "embed",
        "blocks.0.attn.out",
        "blocks.1.attn.out",
    ]
    # Picking a role selects it in every block; "(choose)" keeps the selection.
    assert role_modules(source, "attn.out") == ("blocks.0.attn.out", "blocks.1.attn.out")
    assert role_modules(source, "") is None
    assert history_source(Tracker()) is EMPTY


def test_history_draws_only_the_selected_modules_rows(hist_steps: Tracker) -> None:
    source = history_source(hist_steps)
    assert not isinstance(source, Note)
    drawing = history_drawing(source, HistoryState("abs_max", ("blocks.1", "embed"), True))
    assert drawing.figure == "history" and drawing.options["formats"] == ()
    expected = {(s.name, s.step, s.grad) for s in hist_steps if s.name in {"blocks.1", "embed"}}
    rows = drawing.source
    assert set(zip(rows["name"], rows["step"], rows["grad"], strict=True)) == expected
    with pytest.raises(ArgumentValueError, match="Select one or more modules"):
        history_drawing(source, HistoryState("rms", ()))
    heatmap = heatmap_drawing(source, HistoryState(grad=True, heatmap_module="blocks.0"))
    assert not isinstance(heatmap, Note)
    assert heatmap.options == {"name": "blocks.0", "grad": True, "stat": "hist"}


def test_history_offers_ops_as_series_inside_their_module() -> None:
    from tests.core.test_ops import _gpt, _input

    model = _gpt()
    with track(model, ops=["softmax", "add"], stats=True) as t:
        for _ in range(2):
            model(_input()).sum().backward()
            t.step()
    source = history_source(t)
    assert not isinstance(source, Note)
    assert source.names[:8] == [
        "0.ln",
        "0.attn.qkv",
        "0.attn.softmax#0",
        "0.attn.proj",
        "0.attn",
        "0.add#0",
        "0.add#1",
        "0",
    ]
    drawing = history_drawing(source, HistoryState("rms", ("1.attn.softmax#0",), False))
    rows = drawing.source[~drawing.source["grad"]]  # the figure draws one direction
    softmax = [s for s in t if (s.name, s.attr, s.grad) == ("1.attn", "softmax#0", False)]
    assert list(rows["name"]) == ["1.attn.softmax#0"] * 2
    assert list(rows["rms"]) == pytest.approx([s.value["rms"].item() for s in softmax])


def test_history_without_histograms_has_no_heatmap(with_stats_steps: Tracker) -> None:
    source = history_source(with_stats_steps)
    assert not isinstance(source, Note)
    assert "heatmap_module" in source.hidden
    assert heatmap_drawing(source, source.start) is NO_HISTOGRAMS


# -- umap_viewer ---------------------------------------------------------------------------


def test_umap_opens_on_the_numbered_layers_and_their_tokens(full: Tracker) -> None:
    source = umap_source(full)
    assert not isinstance(source, Note)
    output = next(s.value for s in full if s.name == "blocks.0" and not s.grad)
    rows = output.numel() // output.shape[-1]
    assert source.start.layers == tuple(BLOCKS) and source.start.tokens == (0, rows - 1)
    layers = layers_of_shape(source, (rows, output.shape[-1]))
    assert layers.value == tuple(BLOCKS)
    assert len(layers.options) > LIST_ROWS and layer_rows(layers) == LIST_ROWS
    assert layer_rows(Choice(tuple(range(3)), None)) == 3  # as tall as it is long
    # A layer with fewer rows narrows the tokens range to fit.
    assert token_range(source, UmapState(layers=("blocks.0",), tokens=(3, 500))) == (
        rows - 1,
        (3, rows - 1),
    )
    drawing = umap_drawing(source, UmapState(layers=tuple(BLOCKS), tokens=(2, 5), step=0))
    assert drawing.figure == "umap_plot" and drawing.options["tokens"] == range(2, 6)
    with pytest.raises(ArgumentValueError, match="at least 2 layers"):
        umap_drawing(source, UmapState(layers=("blocks.0",)))


def test_umap_draws_paths_through_op_and_tap_records() -> None:
    """The residual stream after each add (`ops="add"`) and a tapped value are layers to
    draw like module outputs, named as children of their module."""
    from tensor_tracker._data.embedding import layer_rows, with_children
    from tests.core.test_ops import _gpt, _input

    model = _gpt()
    with track(model, ops="add") as t:
        model(_input()).sum().backward()
    source = umap_source(t)
    assert not isinstance(source, Note)
    adds = ("0.add#0", "0.add#1", "1.add#0", "1.add#1")
    block = ["ln", "attn.proj", "attn", "add#0", "add#1", ""]
    assert source.shapes[(10, 8)] == [f"{b}.{n}".rstrip(".") for b in "01" for n in block]
    drawing = umap_drawing(source, UmapState(layers=adds, tokens=(0, 9), step=0))
    assert drawing.options["layers"] == list(adds)
    for grad in (False, True):
        rows = layer_rows(with_children(list(t)), list(adds), grad, 0, 0)
        kept = {
            f"{s.name}.{s.attr}": s.first_value.reshape(-1, 8)
            for s in t
            if s.kind == "op" and s.grad == grad
        }
        for name, row in zip(adds, rows, strict=True):
            assert torch.equal(row, kept[name].double())


def test_umap_names_the_selection_in_one_line() -> None:
    assert selection_text(["a", "b"]) == "<small>2 selected: a, b</small>"
    many = selection_text([f"l{i}" for i in range(8)])
    assert many == "<small>8 selected: l0, l1, l2, …, l6, l7</small>"


def test_umap_needs_full_tensors(with_stats_steps: Tracker) -> None:
    note = umap_source(with_stats_steps)
    assert isinstance(note, Note) and "needs full tensors" in note.text


# -- live_view -----------------------------------------------------------------------------


def test_live_extremes_are_the_largest_and_smallest_magnitudes() -> None:
    values = {f"m{i}": float(v) for i, v in enumerate([5, -9, 0, 1, 2, 3, -4, 0.5])}
    assert extremes(values, log=True) == ["m1", "m0", "m6", "m4", "m3", "m7"]  # 0 left out


def test_live_shows_ops_as_lines_inside_their_module() -> None:
    from tests.core.test_ops import _gpt, _input

    model = _gpt()
    with track(model, ops="softmax", stats=True) as t:
        model(_input()).sum().backward()
    frame = live_frame(t.stashes)
    order = shown_modules(frame, LiveState(show=ALL), None)
    assert order[:5] == ["0.ln", "0.attn.qkv", "0.attn.softmax#0", "0.attn.proj", "0.attn"]
    softmax = next(s for s in t if (s.name, s.attr, s.grad) == ("1.attn", "softmax#0", False))
    latest = latest_values(frame, "rms", False, ["1.attn.softmax#0"])
    assert latest == {"1.attn.softmax#0": pytest.approx(softmax.value["rms"].item())}


def test_live_offers_what_the_recording_holds(with_stats_steps: Tracker) -> None:
    frame = with_stats_steps.to_frame()
    choices = live_choices(frame, None, LiveState(show=""), None, "history", "rms")
    assert choices["stat"].value == "rms" and choices["stat"].shown
    assert choices["grad"].shown  # both directions recorded
    assert choices["show"].value == "role:attn.qkv"  # the first projection of every block
    named = live_choices(frame, None, LiveState(), r"blocks\.\d$", "history", "rms")
    assert named["show"].value == NAMES
    assert shown_modules(frame, LiveState(show=NAMES), r"blocks\.\d$") == BLOCKS
    scale = live_choices(frame, None, LiveState(), None, "scale", "rms")
    assert list(scale) == ["stat"]
    drawing = live_drawing(frame, None, LiveState(show=NAMES), "history", BLOCKS, r"blocks")
    assert drawing.options["names"] == r"blocks" and drawing.margins == {"right": 3.1}


def test_live_reads_again_when_the_journal_grows_or_its_writer_stops() -> None:
    assert LiveRead().stale(-1, None)  # never read: read now
    running = LiveRead(mark=Mark(10, writing=True), complete=False)
    assert running.watching  # only a lock shows a kill
    assert not running.stale(10, True) and running.stale(10, False) and running.stale(11, None)
    # Closed, paused or dead: its lock is not asked (a probe could race a new claim).
    for done in (LiveRead(mark=Mark(10, True), complete=True), LiveRead(mark=Mark(10, False))):
        assert not done.watching and not done.stale(10, None) and done.stale(12, None)


def test_live_read_says_what_it_shows_and_keeps_it_when_a_read_fails(tmp_path: Path) -> None:
    from tensor_tracker._persist.recording import read_recording, spec_of

    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    with track(model, stats=True, stream_to=tmp_path / "run") as t:
        for _ in range(3):
            model(torch.randn(2, 4)).sum().backward()
            t.step()
    records = read_recording(tmp_path / "run").columns
    path, spec = tmp_path / "run", spec_of(records)
    read = read_result(LiveRead(), path, Mark(9, True), records, spec, False, "12:00:00")
    assert read.new and read.steps == (0, 1, 2) and read.spec == spec
    assert read.status == "run: steps 0-2 (3 recorded), read at 12:00:00"  # still running
    assert sorted(set(read.frame["name"])) == ["", "0", "1"]  # "" is the model
    killed = read_result(read, path, Mark(9, False), records, spec, False, "12:00:02")
    assert killed.status.endswith(
        "; incomplete recording: its writer stopped without closing it (killed or crashed)"
    )
    failed = read_failure(read, path, Mark(12, True), ValueError("cut short"))
    assert failed.frame is read.frame and failed.steps == read.steps and not failed.new
    assert failed.status == f"waiting for {path} (ValueError: cut short)"
    hostile = read_failure(read, path, Mark(12, True), ValueError("<b>"))
    assert hostile.status.endswith("(ValueError: &lt;b&gt;)")  # the status is HTML
    history = live_shown(read, LiveState(show=ALL, grad=False), "history", None)
    assert history.shown == ["0", "1", ""] and history.drawing.options["names"] == history.shown
    assert "rms of each output at step 2" in history.readout and not history.drawing.hidden
    scale = live_shown(read, LiveState(), "scale", None)
    assert scale.shown == [] and scale.readout == "" and scale.drawing.hidden == {"limits"}
    assert scale.drawing.source is records
