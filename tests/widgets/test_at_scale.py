"""Viewers on a real-size model: picking a role across BERT's 12 blocks, searching modules."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("ipywidgets")
pytest.importorskip("matplotlib")
pytest.importorskip("transformers")

import tensor_tracker
from examples.zoo import bert
from tensor_tracker import Tracker, widgets


@pytest.fixture(scope="module")
def bert_steps() -> Tracker:
    model = bert()
    ids = torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(0))
    with tensor_tracker.track(model, stats=["rms", "abs_max"]) as t:
        for _ in range(3):
            model(ids).last_hidden_state.pow(2).mean().backward()
            t.step()
    return t


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
