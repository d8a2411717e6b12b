"""Recording policies: `every=` per kind of step (`step(kind=...)`) and `step(keep=False)`,
which drops the step just recorded (statistics rows, copies, streamed steps alike)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tensor_tracker import load, stats, track


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))


def test_each_kind_of_step_is_recorded_at_its_own_pace() -> None:
    model = _model()
    kinds = ["default"] * 10
    kinds[2] = kinds[5] = kinds[7] = "long"
    with track(model, stats=True, every={"default": 3, "long": 2}) as t:
        for step in range(10):
            model(torch.ones(2, 3)).sum().backward()
            t.step(kind=kinds[step])  # the kind of the *next* step
    # Next-step kinds: steps 3, 6, 8 are "long" (their 1st, 2nd, 3rd: the 1st and 3rd
    # recorded); default steps 0, 1, 2, 4, 5, 7, 9, 10 (every 3rd: 0, 4, 9).
    assert sorted(set(t.to_frame()["step"])) == [0, 3, 4, 8, 9]
    assert t.step_kinds == {3: "long", 6: "long", 8: "long"}
    assert t.step_kind == "default"


@pytest.mark.parametrize("options", [{"stats": True}, {}, {"stats": [stats.histogram(bins=4)]}])
def test_keep_false_drops_the_step_just_recorded(options: dict[str, Any]) -> None:
    model = _model()
    with track(model, **options) as t:
        model(torch.ones(2, 3)).sum().backward()
        t.step()
        held = (len(t), t.nbytes)
        model(torch.full((2, 3), 5.0)).sum().backward()  # a step we decide not to keep
        t.step(keep=False)
        assert (len(t), t.nbytes) == held
        x = torch.full((2, 3), 2.0)
        model(x).sum().backward()
        t.step()
    assert sorted({s.step for s in t}) == [0, 2]
    # The rows recorded after the drop hold their own values.
    with track(model, **options) as fresh:
        model(x).sum().backward()
    assert (
        t.to_frame()
        .query("step == 2")
        .drop(columns="step")
        .reset_index(drop=True)
        .equals(fresh.to_frame().drop(columns="step"))
    )


def test_a_dropped_step_is_not_streamed(tmp_path: Path) -> None:
    model = _model()
    with track(model, stats=True, stream_to=tmp_path / "run") as t:
        for step in range(4):
            model(torch.ones(2, 3)).sum().backward()
            t.log("loss", float(step))
            t.step(keep=step != 1)
    loaded = load(tmp_path / "run")
    assert sorted(set(loaded.to_frame()["step"])) == [0, 2, 3]
    assert loaded.log_frame()["step"].tolist() == [0, 1, 2, 3]  # scalars are kept


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda m: track(m, every={"long": 0}), ValueError, r"every\['long'\]"),
        (lambda m: track(m, every={1: 2}), TypeError, "every= keys"),
        (lambda m: track(m).step(kind=3), TypeError, "kind"),
        (lambda m: track(m).step(keep="no"), TypeError, "keep"),
    ],
)
def test_bad_policies_are_named(call: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        call(_model())
