"""Op and tap records (`track(..., ops=...)`, `tap`) in the figures of module outputs:
`scale_plot` and `history` show each as a child of its module, where it ran, with the
statistic of the value computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("matplotlib")

from matplotlib.figure import Figure

from tensor_tracker import plot, track
from tests.core.test_ops import _gpt, _input, _reference

_OPS = ["softmax", "matmul", "mul", "add"]


def _ticks(fig: Figure) -> list[str]:
    return [label.get_text() for label in fig.axes[0].get_xticklabels()]


def _rms_log2(value: torch.Tensor) -> float:
    return math.log2(value.double().pow(2).mean().sqrt().item())


def test_scale_plot_shows_ops_as_children_of_their_module_where_they_ran() -> None:
    x = _input()
    reference = _reference(_gpt(), x)
    model = _gpt()
    with track(model, ops=_OPS, stats=True) as t:
        model(x).sum().backward()
    fig = plot.scale_plot(t)
    ticks = _ticks(fig)
    block = ["0.ln", "0.attn.qkv", "0.attn.matmul#0", "0.attn.mul#0", "0.attn.softmax#0"]
    block += ["0.attn.matmul#1", "0.attn.proj", "0.attn", "0.add#0", "0.add#1", "0"]
    assert ticks[: len(block)] == block
    assert ticks[len(block) :] == [n.replace("0", "1", 1) for n in block] + ["2", "<model>"]
    forward, gradient = fig.axes[0].get_lines()[:2]
    for (name, attr), (value, grad) in reference.items():
        i = ticks.index(f"{name}.{attr}")
        assert forward.get_ydata()[i] == pytest.approx(_rms_log2(value), abs=1e-5)
        assert gradient.get_ydata()[i] == pytest.approx(_rms_log2(grad), abs=1e-5)
    # A selection by module name keeps the ops inside the modules it selects.
    selected = _ticks(plot.scale_plot(t, names=r"^1\.attn"))
    assert selected == [n.replace("0", "1", 1) for n in block[1:8]]
    # Grouped by block: each op is a role inside the block.
    grouped = plot.scale_plot(t, group=True)
    roles = [str(line.get_label()) for line in grouped.axes[0].get_lines()]
    assert roles[:10] == [n.removeprefix("0.") for n in block[:10]]


def test_history_draws_an_op_as_a_series_of_its_own() -> None:
    x = _input()
    reference = _reference(_gpt(), x)
    model = _gpt()
    with track(model, ops=_OPS, stats=True) as t:
        for _ in range(2):
            model(x).sum().backward()
            t.step()
    for source in (t, list(t)):  # through the frame, and from the stashes
        fig = plot.history(source, names=["1.attn.softmax#0", "1.attn"])
        lines = {str(line.get_label()): line for line in fig.axes[0].get_lines()}
        value = reference[("1.attn", "softmax#0")][0]
        assert list(lines["1.attn.softmax#0"].get_ydata()) == pytest.approx(
            [_rms_log2(value)] * 2, abs=1e-5
        )
        assert "1.attn" in lines


def test_the_histogram_heatmap_of_an_op_named_as_a_child() -> None:
    from matplotlib.collections import QuadMesh

    from tensor_tracker import stats

    model = _gpt()
    with track(model, ops="softmax", stats=["rms", stats.histogram()]) as t:
        for _ in range(2):
            model(_input()).sum().backward()
            t.step()
    fig = plot.histogram_heatmap(t, "1.attn.softmax#0")
    (mesh,) = [c for c in fig.axes[0].collections if isinstance(c, QuadMesh)]
    softmax = [s for s in t if (s.name, s.attr, s.grad) == ("1.attn", "softmax#0", False)]
    want = [s.value["hist"].tolist() for s in softmax]  # its recorded counts, by step
    counts = mesh.get_array()
    assert [list(counts[:, i].filled(0)) for i in range(2)] == want
