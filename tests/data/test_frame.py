"""`to_frame`: one row per stash, plain statistics and recorded statistics side by side."""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor, nn

import tensor_tracker
from tensor_tracker import Stash, Tracker, first_nonfinite, track
from tests.helpers import mlp


def test_to_frame_columns_and_default_stat() -> None:
    model = mlp()
    x = torch.randn(5, 4)
    with track(model) as t:
        model(x).sum().backward()
    df = t.to_frame()
    assert list(df.columns)[:3] == ["name", "type", "grad"]
    assert {"call", "step", "kind", "training", "std"} <= set(df.columns)
    assert df.type[0] == "torch.nn.modules.linear.Linear"
    assert df["std"].tolist() == pytest.approx([s.first_value.std().item() for s in t])


def test_to_frame_stat_naming() -> None:
    # One Linear(1, 2) with weights worked by hand: on the batch [[1], [2]] the output is
    # [[1 - 1, 2 * 1 + 1], [1 * 2 - 1, 2 * 2 + 1]] = [[0, 3], [1, 5]].
    model = nn.Linear(1, 2)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0], [2.0]]))
        model.bias.copy_(torch.tensor([-1.0, 1.0]))
    with track(model, grad=False) as t:
        model(torch.tensor([[1.0], [2.0]]))
    # A function is named by its __name__, a lambda "<lambda>", a partial (no __name__)
    # "value"; stat_name overrides; each column holds the function of the output.
    assert t.to_frame(torch.max)[["name", "max"]].values.tolist() == [["", 5.0]]
    assert t.to_frame(torch.max, stat_name="m")["m"].tolist() == [5.0]
    assert t.to_frame(lambda v: v.min())["<lambda>"].tolist() == [0.0]
    assert t.to_frame(functools.partial(torch.sum))["value"].tolist() == [9.0]
    assert t.to_frame("rms")["rms"].tolist() == pytest.approx([(35 / 4) ** 0.5])
    assert "std" not in t.to_frame(torch.max).columns  # the given statistic replaces std


def test_to_frame_never_crashes_on_odd_values() -> None:
    stashes = [
        Stash("int", nn.Linear, False, torch.arange(4)),
        Stash("empty", nn.Linear, False, torch.empty(0)),
        Stash("none", nn.Linear, False, None),
        Stash("dict", nn.Linear, False, {"a": torch.ones(2)}),
        Stash("float", nn.Linear, False, torch.tensor([1.0, 3.0])),
    ]
    tracker = Tracker()
    tracker.stashes.extend(stashes)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df = tracker.to_frame()
    values = df["std"].tolist()
    assert all(v != v for v in values[:4])  # NaN
    assert values[4] == pytest.approx(2**0.5)


def test_to_frame_of_empty_tracker() -> None:
    df = Tracker().to_frame()
    assert len(df) == 0 and "std" in df.columns


class DictAndNone(nn.Module):
    """Returns a dict; its child returns None: neither is a plain tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.nothing = Nothing()

    def forward(self, x: Tensor) -> dict[str, Any]:
        self.nothing(x)
        return {"hidden": self.lin(x), "note": "text"}


class Nothing(nn.Module):
    def forward(self, x: Tensor) -> None:
        return None


def test_statistics_columns_survive_stashes_without_statistics() -> None:
    torch.manual_seed(0)
    model = DictAndNone()
    x = torch.randn(6, 4)
    with track(model, stats=True) as t:
        model(x)["hidden"].sum().backward()
    df = t.to_frame()
    hidden = model.lin(x).detach()
    rows = df[(df["name"] == "") & ~df["grad"]]
    assert rows["std"].tolist() == pytest.approx([hidden.std().item()])  # the dict's tensor
    assert df.loc[df["name"] == "nothing", "std"].isna().all()
    assert df["std"].notna().sum() == 4  # lin and the root, forward and gradient
    with track(model, stats=["rms", "fp16_overflow"]) as t:
        model(x)
    df = t.to_frame()
    assert "std" not in df.columns and df["rms"].notna().sum() == 2


def test_an_empty_statistics_tracker_has_the_statistic_columns() -> None:
    t = track(mlp(), stats=True)
    t.unregister()
    df = t.to_frame()
    cols = ["mean", "std", "rms", "abs_max", "min", "max"]
    assert set(cols) <= set(df.columns)
    first_bad_step = df[~np.isfinite(df[cols]).all(axis=1)].step.min()  # pandas on it works
    assert first_bad_step != first_bad_step  # NaN: no bad step
    assert first_nonfinite(t) is None


def test_plain_and_statistics_stashes_share_a_frame_without_clobbering() -> None:
    model = mlp()
    x = torch.randn(5, 4)
    with track(model, stats=True, grad=False) as with_stats:
        model(x)
    with track(model, grad=False) as plain:
        model(x)
    df = tensor_tracker.to_frame([*with_stats, *plain])
    assert df["std"].notna().all()
    assert df["std"].tolist()[:4] == pytest.approx(df["std"].tolist()[4:], rel=1e-6)
    assert df["rms"][:4].notna().all() and df["rms"][4:].isna().all()


def test_to_frame_unknown_statistic_name_is_an_error() -> None:
    model = mlp()
    with track(model, grad=False) as t:
        model(torch.randn(2, 4))
    with pytest.raises(ValueError, match="rmss"):
        t.to_frame("rmss")
    with track(model, grad=False, stats=True) as s:
        model(torch.randn(2, 4))
    with pytest.raises(KeyError, match="rmss"):
        s.to_frame("rmss")
