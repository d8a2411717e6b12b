"""`plot.compare`: a comparison's errors, forward and backward, with both runs' scales and
the first divergence marked."""

from __future__ import annotations

import copy

import matplotlib
import pytest
import torch
from torch import nn

import tensor_tracker
from tensor_tracker import plot
from tensor_tracker.errors import ArgumentTypeError, ArgumentValueError

matplotlib.use("Agg")


def _cmp(**kw: object) -> tensor_tracker.Comparison:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))
    other = copy.deepcopy(model)
    with torch.no_grad():
        other[2].weight.mul_(1 + 1e-3)
    x = torch.randn(3, 4)
    return tensor_tracker.compare_models(
        model,
        other,
        x,
        loss_fn=lambda out: out.square().sum(),
        **kw,  # type: ignore[arg-type]
    )


def test_the_figure_marks_the_first_divergence_in_each_direction() -> None:
    cmp = _cmp()
    fig = plot.compare(cmp)
    forward, gradient = (ax for ax in fig.axes if ax.get_gid() in ("forward", "gradient"))
    assert forward.get_yscale() == "log"
    frame = cmp.to_frame()
    for ax, grad in ((forward, False), (gradient, True)):
        rows = frame[frame["grad"] == grad]
        # One marker per record, in the order they were computed.
        offsets = ax.collections[0].get_offsets()
        assert len(offsets) == len(rows)
        first = cmp.first_divergence(grad=grad)
        assert first is not None
        line = [a for a in ax.lines if a.get_gid() == "first-divergence"]
        assert len(line) == 1
        assert line[0].get_xdata()[0] == list(rows.index).index(first.row)
        assert (first.name or "<model>") in ax.get_title(loc="left")
    # Bitwise equal records sit on the bottom edge, below every error.
    equal = frame[~frame["grad"]]["equal"].to_numpy()
    ys = forward.collections[0].get_offsets()[:, 1]
    assert ys[equal].max() < ys[~equal].min()
    # Both runs' scales on the twin axes.
    twins = [ax for ax in fig.axes if ax.get_gid() not in ("forward", "gradient")]
    assert len(twins) == 2 and all(len(t.lines) == 2 for t in twins)


def test_a_step_an_error_column_and_bad_arguments() -> None:
    cmp = _cmp()
    fig = plot.compare(cmp, error="max_ulp")
    assert fig.axes[0].get_ylabel() == "max_ulp"
    with pytest.raises(ArgumentValueError, match="step=3"):
        plot.compare(cmp, step=3)
    with pytest.raises(ArgumentValueError, match="error="):
        plot.compare(cmp, error="nope")
    with pytest.raises(ArgumentTypeError):
        plot.compare(cmp.a)  # type: ignore[arg-type]
