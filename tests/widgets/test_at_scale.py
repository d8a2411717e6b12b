"""Viewers on real-size models and long runs: picking a role across BERT's 12 blocks,
searching modules, figures sent as SVG at their own size with nothing cut off."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("ipywidgets")
pytest.importorskip("matplotlib")
pytest.importorskip("transformers")

import tensor_tracker
from examples.zoo import bert_run
from tensor_tracker import Tracker, stats, widgets
from tests.plot.test_at_scale import check_readable

pytestmark = pytest.mark.slow  # records real-size models


@pytest.fixture(scope="module")
def bert_steps() -> Tracker:
    return bert_run(["rms", "abs_max"])


def drawn(viewer: object) -> list[str]:
    fig = viewer.figure  # type: ignore[attr-defined]
    assert fig is not None, viewer.message.value  # type: ignore[attr-defined]
    return [line.get_label() for line in fig.axes[0].get_lines() if not line.get_gid()]


def test_history_viewer_role_selects_it_in_every_block(bert_steps: Tracker) -> None:
    v = widgets.history_viewer(bert_steps)
    assert v.controls["role"].layout.display != "none"
    assert "intermediate.dense" in [value for _, value in v.controls["role"].options]
    v.controls["role"].value = "intermediate.dense"
    expected = [f"encoder.layer.{i}.intermediate.dense" for i in range(12)]
    assert list(v.controls["modules"].value) == expected
    assert drawn(v) == expected
    v.controls["grad"].value = True
    assert drawn(v) == expected and "gradients" in v.figure.axes[0].get_title()


def test_history_viewer_search_narrows_the_list_and_keeps_the_selection(
    bert_steps: Tracker,
) -> None:
    v = widgets.history_viewer(bert_steps)
    v.controls["modules"].value = ("encoder.layer.3",)
    before = v.figure
    v.controls["search"].value = r"pooler"
    offered = [value for _, value in v.controls["modules"].options]
    assert offered == ["encoder.layer.3", "pooler.dense", "pooler.activation", "pooler"]
    assert v.controls["modules"].value == ("encoder.layer.3",)
    assert v.figure is before  # nothing to redraw
    v.controls["search"].value = ""
    assert len(v.controls["modules"].options) == len({s.name for s in bert_steps})


def test_history_viewer_hides_what_there_is_nothing_to_choose() -> None:
    model = torch.nn.Linear(2, 2)
    with tensor_tracker.track(model, stats=["rms"]) as t:
        for _ in range(2):
            model(torch.ones(2)).sum().backward()
            t.step()
    v = widgets.history_viewer(t)
    assert v.figure is not None
    for key in ("modules", "search", "role", "heatmap_module"):
        assert v.controls[key].layout.display == "none", key


@pytest.fixture(scope="module")
def long_run() -> Tracker:
    """14 blocks (29 modules) over 420 steps: more than a legend's worth of modules, and
    more steps than a line draws points."""
    torch.manual_seed(0)  # its weights keep block 3's values inside the histogram's range
    model = torch.nn.Sequential(
        *[torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()) for _ in range(14)]
    )
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    with tensor_tracker.track(model, stats=["rms", stats.histogram()]) as t:
        for _ in range(420):
            model(x).sum().backward()
            t.step()
    return t


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("blocks", [range(0, 14, 2), range(14)])
def test_history_viewer_sends_svg_at_the_figure_size_with_nothing_cut_off(
    long_run: Tracker, blocks: range
) -> None:
    v = widgets.history_viewer(long_run)
    v.controls["modules"].value = tuple(f"{i}.0" for i in blocks)
    assert v.figure is not None, v.message.value
    assert v.image.format == "svg+xml" and b"<svg" in bytes(v.image.value)[:1000]
    width = v.figure.get_size_inches()[0]
    assert width <= 9.6 and v.image.layout.max_width == f"{round(width * 100)}px"
    assert v.image.layout.width == "100%"
    # Fixed margins (no constrained layout, for speed) must still hold every label.
    check_readable(v.figure)
    lines = [line for line in v.figure.axes[0].get_lines() if line.get_label() in blocks_of(blocks)]
    assert len(lines) == len(blocks)
    assert all(len(line.get_xdata()) <= 400 for line in lines)  # drawn as bucket means


def blocks_of(blocks: range) -> set[str]:
    return {f"{i}.0" for i in blocks}


def test_history_viewer_heatmap_is_pixels_inside_the_svg(long_run: Tracker) -> None:
    v = widgets.history_viewer(long_run)
    v.controls["heatmap_module"].value = "3.0"
    assert v.heatmap_figure is not None, v.heatmap_message.value
    # One vector cell per bin and step would be megabytes: the mesh is an embedded image.
    assert b"<image" in bytes(v.heatmap_image.value) and len(v.heatmap_image.value) < 300_000


class _LongNames(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding_projection_of_the_inputs = torch.nn.Linear(4, 8)
        self.first_hidden_layer_with_a_long_name = torch.nn.Linear(8, 8)
        self.output_projection_back_to_four = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embedding_projection_of_the_inputs(x)
        return self.output_projection_back_to_four(self.first_hidden_layer_with_a_long_name(h))


@pytest.mark.filterwarnings("error")
def test_scale_viewer_draws_with_fixed_margins_and_nothing_cut_off(
    bert_steps: Tracker, long_run: Tracker
) -> None:
    """Fixed margins (constrained layout took most of a redraw's time) still hold the
    rotated module names of a small model and the grouped figure of a large one."""
    model = _LongNames()
    with tensor_tracker.track(model, stats=True) as small:
        model(torch.randn(2, 4)).sum().backward()
    for tracker in (small, bert_steps, long_run):
        v = widgets.scale_viewer(tracker)
        assert v.figure is not None, v.message.value
        assert v.figure.get_layout_engine() is None
        check_readable(v.figure)
        v.controls["step"].value = v.controls["step"].options[0]
        check_readable(v.figure)
