"""`explain_spike`: planted instabilities on a small MLP trained on the CPU are found, with
the planted module first; a healthy run names nothing; a killed streamed run explains too."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_tracker
from tensor_tracker import (
    Cause,
    Explanation,
    Tracker,
    diagnose,
    explain_spike,
    load,
    stats,
    track,
)

PLANTED = {"lr": "2", "lr_once": "2", "batch": "0", "grow": "2", "dead": "2", "fp16": "2"}
"""The planted cases and the module each plants its instability in."""

AT = 22
"""The step each case plants its instability at (after 60 steps of training untracked)."""


class Plantable(nn.Linear):
    """A Linear layer whose output can be zeroed (`gain = 0`) or computed in float16, as
    autocast would (`half = True`)."""

    gain = 1.0
    half = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.half:
            y = F.linear(x.half(), self.weight.half(), self.bias.half()).float()
        else:
            y = super().forward(x)
        return y * self.gain


def planted_run(
    case: str,
    seed: int = 0,
    steps: int = 30,
    stream_to: Path | None = None,
    exit_after: int | None = None,
    sgd: float | None = None,
    norm: bool = False,
    **options: Any,
) -> tuple[Tracker, list[float]]:
    """Train a 4-layer MLP on a regression task with Adam (one parameter group per layer;
    `sgd=lr`: SGD with momentum 0.9 instead), 60 steps untracked and `steps` tracked
    (`stats=True` unless `options` say otherwise; `capture="updates"` gets `optimizer=`),
    planting `case` at step `AT` in module "2" (`"batch"`: in the batch, so module "0"):

    - `"lr"`: the learning rate of module 2's parameter group x1000 from step AT on;
    - `"lr_once"`: the same for the optimizer step of step AT only;
    - `"batch"`: the batch x1000 at step AT;
    - `"grow"`: module 2's weights x1.3 after every optimizer step from step AT on;
    - `"dead"`: module 2's output zeroed from step AT on;
    - `"fp16"`: module 2 computes in float16 and its weights jump x1e5 at step AT
      (its output overflows to inf);
    - anything else (`"healthy"`): nothing.

    Returns the tracker and the loss per step. `exit_after`: end the process after that
    step (a killed run: the recording is never closed)."""
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(16, 32),
        nn.ReLU(),
        Plantable(32, 32),
        nn.LayerNorm(32) if norm else nn.ReLU(),
        nn.Linear(32, 32),
        nn.ReLU(),
        nn.Linear(32, 1),
    )
    model[2].half = case == "fp16"
    layers = [m for m in model if isinstance(m, nn.Linear)]
    groups = [{"params": list(m.parameters())} for m in layers]
    opt: torch.optim.Optimizer = (
        torch.optim.Adam(groups, lr=1e-2)
        if sgd is None
        else torch.optim.SGD(groups, lr=sgd, momentum=0.9)
    )
    data = torch.Generator().manual_seed(1)
    target = torch.randn(16, 1, generator=data)

    def train_step(step: int | None) -> float:
        x = torch.randn(64, 16, generator=data)
        y = x @ target
        if step == AT:
            if case == "batch":
                x = x * 1000
            elif case == "dead":
                model[2].gain = 0.0
            elif case in ("lr", "lr_once"):
                opt.param_groups[1]["lr"] *= 1000
            elif case == "fp16":
                with torch.no_grad():
                    model[2].weight.mul_(1e5)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if case == "lr_once" and step == AT:
            opt.param_groups[1]["lr"] /= 1000
        if case == "grow" and step is not None and step >= AT:
            with torch.no_grad():
                model[2].weight.mul_(1.3)
        return loss.item()

    for _ in range(60):
        train_step(None)
    options = options or {"stats": True}
    if "updates" in options.get("capture", ()):
        options["optimizer"] = opt
    losses = []
    with track(model, stream_to=stream_to, **options) as t:
        for step in range(steps):
            losses.append(train_step(step))
            t.log("loss", losses[-1])
            t.step()
            if step == exit_after:
                os._exit(0)
    return t, losses


@pytest.mark.parametrize("case", list(PLANTED))
def test_the_planted_module_is_the_first_cause(case: str) -> None:
    t, losses = planted_run(case)
    explanation = explain_spike(t, losses)
    assert explanation.step is not None and explanation.step >= AT
    first = explanation.causes[0]
    assert first.module == PLANTED[case], explanation
    assert first.quantity in ("output_rms", "output_abs_max"), explanation
    # Lead: the steps from where the planted change first shows in a value to the spike.
    shows = AT + 1 if case in ("lr", "lr_once", "grow") else AT
    assert first.step >= shows and first.lead == explanation.step - first.step, explanation
    if case == "grow":  # the loss spikes at every step from AT + 1; the largest is later
        assert explanation.step > AT + 1
        assert f"at every step since step {AT + 1} (step={AT + 1} explains" in repr(explanation)
    assert [c.score for c in explanation.causes] == sorted(
        (c.score for c in explanation.causes), reverse=True
    )


@pytest.mark.parametrize("case", ["lr", "lr_once"])
def test_updates_from_parameter_copies_move_first_when_a_learning_rate_jumps(case: str) -> None:
    t, losses = planted_run(case, capture=("outputs", "params"))
    explanation = explain_spike(t, losses)
    first = explanation.causes[0]
    # Module 2's update at step AT (its optimizer step) moved 1000x, a step before any value.
    assert (first.module, first.quantity, first.step) == ("2", "update_rms", AT), explanation
    assert first.lead == explanation.step - AT
    trace = explanation.traces[("2", "update_rms")]
    assert trace.values[trace.steps.index(AT)] > 300 * trace.centre


@pytest.mark.parametrize(
    ("seed", "options"),
    [
        # A LayerNorm after the planted layer: its gradient does not grow with its weights.
        (seed, {"norm": True})
        for seed in range(3)
    ]
    # SGD with momentum, not yet settled: every gradient drifts from step 8 on, by a little.
    + [(0, {"sgd": 1e-3})],
)
def test_a_learning_rate_wrong_for_one_step_is_found_in_its_update(
    seed: int, options: dict[str, Any]
) -> None:
    t, losses = planted_run(
        "lr_once", seed, stats=stats.health, capture=("outputs", "updates"), **options
    )
    explanation = explain_spike(t, losses)
    assert explanation.step == AT + 1
    top = [(c.module, c.quantity, c.step, c.lead) for c in explanation.causes[:3]]
    # The update moved at the optimizer step of step AT and was back a step later.
    assert ("2", "update_rms", AT, 1) in top, explanation
    assert explanation.causes[0].module == "2", explanation
    trace = explanation.traces[("2", "update_rms")]
    assert trace.values[trace.steps.index(AT)] > 300 * trace.centre


def test_a_departure_that_came_back_before_the_spike_still_counts() -> None:
    t, losses = planted_run("batch")  # the batch x1000 at step AT only
    explanation = explain_spike(t, losses, step=AT + 2)
    first = explanation.causes[0]
    assert (first.module, first.quantity, first.step, first.lead) == (
        "0",
        "output_rms",
        AT,
        2,
    ), explanation
    trace = explanation.traces[("0", "output_rms")]
    assert trace.values[-1] < 2 * trace.centre < trace.values[trace.steps.index(AT)] / 100


def test_a_healthy_run_names_no_cause() -> None:
    t, losses = planted_run("healthy")
    explanation = explain_spike(t, losses)
    assert explanation.step is None and explanation.causes == []
    assert explanation.message.startswith("No loss spike in 30 loss value(s)")
    assert repr(explanation) == explanation.message
    assert explanation.to_frame().columns.tolist() == [
        "module",
        "quantity",
        "step",
        "lead",
        "score",
    ]
    for step in (10, 20, 29):  # asked about a step where nothing happened: nothing moved
        assert explain_spike(t, losses, step=step).causes == []
    assert not [f for f in diagnose(t, loss=losses) if f.check == "loss_spike"]


def test_what_moves_after_the_step_asked_about_is_no_cause() -> None:
    t, losses = planted_run("dead")
    assert explain_spike(t, losses, step=AT - 1).causes == []
    after = explain_spike(t, losses, step=AT + 3)
    assert after.causes[0].module == "2" and after.causes[0].lead == 3


def test_the_loss_can_be_a_tensor_an_array_or_a_dict() -> None:
    t, losses = planted_run("batch", steps=25)
    expected = explain_spike(t, losses).to_frame()
    for loss in (torch.tensor(losses), np.array(losses), dict(enumerate(losses))):
        assert explain_spike(t, loss).to_frame().equals(expected)  # type: ignore[arg-type]
    assert explain_spike(t, [torch.tensor(v) for v in losses]).to_frame().equals(expected)


def test_the_summary_and_the_table_name_the_causes() -> None:
    t, losses = planted_run("dead", steps=25)
    explanation = explain_spike(t, losses)
    assert isinstance(explanation, Explanation)
    text = repr(explanation)
    assert text.startswith(f"Loss spike at step {AT}: ")
    assert "first: 2 output_rms at step 22." in text.splitlines()[0]
    assert "  1. 2 output_rms: from step 22 (at the spike), 0 = 0x its baseline" in text
    frame = explanation.to_frame()
    assert frame.iloc[0].tolist()[:4] == ["2", "output_rms", AT, 0]
    assert all(isinstance(c, Cause) for c in explanation.causes)


def test_diagnose_names_the_top_causes_of_the_worst_spike() -> None:
    t, losses = planted_run("lr")
    spike = next(f for f in diagnose(t, loss=losses) if f.check == "loss_spike")
    assert spike.modules[0] == "2"
    causes = str(spike.evidence["causes"]).split("; ")
    assert len(causes) == 3 and causes[0].startswith("2 output_"), causes
    assert causes[0].endswith(" from step 23 (lead 1)"), causes
    assert "first to move before the worst one: 2 output_" in spike.explanation


def test_a_streamed_run_read_back_explains_as_the_run_in_memory(tmp_path: Path) -> None:
    streamed, losses = planted_run("dead", steps=25, stream_to=tmp_path / "run")
    assert len(streamed) == 0  # everything went to disk
    expected = explain_spike(planted_run("dead", steps=25)[0], losses)
    assert explain_spike(load(tmp_path / "run"), losses).to_frame().equals(expected.to_frame())


_KILLED = textwrap.dedent(
    """
    import sys
    from tests.data.test_spike import planted_run
    planted_run("fp16", steps=30, stream_to=sys.argv[1], exit_after=24)
    """
)


@pytest.mark.slow  # a Python process that imports torch: 3-6 s
def test_a_killed_streamed_run_is_explained_from_what_it_wrote(tmp_path: Path) -> None:
    path = tmp_path / "run"
    subprocess.run(
        [sys.executable, "-c", _KILLED, str(path)],
        check=True,
        timeout=120,
        cwd=Path(__file__).parents[2],
    )
    with pytest.warns(RuntimeWarning, match="incomplete recording"):
        run = load(path)
    assert run.complete is False
    logged = run.log_frame()
    loss = dict(zip(logged["step"].tolist(), logged["value"].tolist(), strict=True))
    assert max(loss) == 24 and math.isnan(loss[AT])
    explanation = explain_spike(run, loss)
    assert explanation.step == AT
    assert explanation.causes[0].module == "2", explanation


def test_spike_plot_draws_the_loss_and_the_top_causes() -> None:
    t, losses = planted_run("dead", steps=25)
    explanation = explain_spike(t, losses)
    fig = tensor_tracker.plot.spike_plot(explanation, top=2)
    assert len(fig.axes) == 3
    assert fig.axes[1].get_title() == "2 output_rms: moved at step 22, 0 step(s) before the spike"
    gids = [line.get_gid() for ax in fig.axes for line in ax.get_lines()]
    assert gids.count("spike") == 3 and "departure:2:output_rms" in gids
    steps = fig.axes[0].get_lines()[0].get_xdata()
    assert max(steps) == AT  # nothing after the spike
    healthy = explain_spike(*planted_run("healthy", steps=25))
    fig = tensor_tracker.plot.spike_plot(healthy)
    assert len(fig.axes) == 1 and fig.axes[0].get_title().startswith("No loss spike")
