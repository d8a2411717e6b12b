"""`sample_values` and `sample_stats`: one batch item's values per channel at every module,
and every sample's statistics across the batch, checked against the recorded copies."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import tensor_tracker
from tensor_tracker import sample_stats, sample_values, track
from tensor_tracker.errors import ArgumentValueError, NotRecordedError
from tests.helpers import tiny_model


def _mlp_run(
    outlier: int | None = None, scale: float = 50.0
) -> tuple[nn.Module, tensor_tracker.Tracker]:
    """An MLP over `[batch 8, tokens 6, features 12]`, one step of copies; the sample
    `outlier` of the input scaled by `scale`."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 24), nn.GELU(), nn.Linear(24, 12), nn.LayerNorm(12))
    x = torch.randn(8, 6, 12)
    if outlier is not None:
        x[outlier] *= scale
    with track(model) as t:
        model(x).square().mean().backward()
    return model, t


def test_values_are_the_recorded_ones_at_a_position() -> None:
    _, t = _mlp_run()
    for sample, position in ((0, 0), (5, 3), (7, 5), (-1, -1)):
        v = sample_values(t, sample, position=position)
        assert v.names == ["0", "1", "2", "3", ""]
        assert v.sample == sample % 8 and v.position == position
        for name in v.names:
            recorded = t[name][0].value  # [8, 6, channels]
            expected = recorded[sample, position].to(torch.float64)
            assert torch.equal(v.value(name), expected), name
        assert v.shapes[0] == (8, 6, 24)


def test_without_a_position_each_channel_keeps_its_largest_magnitude_with_its_sign() -> None:
    _, t = _mlp_run()
    v = sample_values(t, 2)
    assert v.position is None
    for name in ("0", "2"):
        x = t[name][0].value[2].to(torch.float64)  # [positions, channels]
        for c in range(x.shape[1]):
            column = x[:, c].tolist()
            assert v.value(name)[c].item() == max(column, key=abs)


def test_gradients_per_sample_are_the_recorded_gradients() -> None:
    _, t = _mlp_run()
    v = sample_values(t, 4, position=1, grad=True)
    for name in v.names:
        (grad,) = next(s for s in t[name] if s.grad).value
        assert torch.equal(v.value(name), grad[4, 1].to(torch.float64)), name
    assert v.stats.grad


def test_per_sample_statistics_against_torch() -> None:
    _, t = _mlp_run(outlier=3)
    s = sample_stats(t)
    assert s.batch_size == 8 and s.rms.shape == (5, 8) and s.abs_max.shape == (5, 8)
    for i, name in enumerate(s.names):
        x = t[name][0].value.to(torch.float64)
        for b in range(8):
            assert s.rms[i, b].item() == pytest.approx(
                x[b].square().mean().sqrt().item(), rel=1e-12
            )
            assert s.abs_max[i, b].item() == x[b].abs().max().item()
    ratio = s.ratio("abs_max")
    median = s.abs_max.median(dim=1, keepdim=True).values
    assert torch.allclose(ratio, s.abs_max / median)
    frame = s.to_frame()
    assert list(frame.columns) == ["name", "sample", "rms", "abs_max", "rms_ratio", "abs_max_ratio"]
    assert len(frame) == 5 * 8
    row = frame[(frame["name"] == "2") & (frame["sample"] == 3)].iloc[0]
    assert row["rms"] == s.rms[2, 3].item()


@pytest.mark.parametrize("outlier", [0, 3, 7])
def test_a_planted_outlier_sample_is_found(outlier: int) -> None:
    """One batch item scaled 50x: the largest score, by rms and by abs_max, and the sample
    `sample_values` shows when none is given. The LayerNorm at the end hides it (its ratio
    there is about 1): the score is the largest ratio over the modules."""
    _, t = _mlp_run(outlier=outlier)
    s = sample_stats(t)
    for stat in ("rms", "abs_max"):
        assert s.outlier(stat) == outlier
        score = s.score(stat)
        assert score[outlier] > 20
        others = torch.cat([score[:outlier], score[outlier + 1 :]])
        assert others.max() < 3
    layer_norm = s.names.index("3")
    assert s.ratio("rms")[layer_norm, outlier] == pytest.approx(1.0, rel=0.1)
    assert sample_values(t).sample == outlier


@pytest.mark.parametrize("batch", [3, 8, 32])
def test_batches_without_an_outlier_name_none(batch: int) -> None:
    """20 random batches through an MLP: every sample within `OUTLIER_RATIO` of the batch
    median, by rms and by abs_max, at every module, although one of them is always the
    largest (`outlier()`, about 1.2 to 2 times the median)."""
    mlp = nn.Sequential(nn.Linear(12, 24), nn.GELU(), nn.Linear(24, 12), nn.LayerNorm(12))
    generator = torch.Generator().manual_seed(batch)
    with track(mlp) as t:
        for _ in range(20):  # a batch a step
            mlp(torch.randn(batch, 6, 12, generator=generator)).square().mean().backward()
            t.step()
    for step in range(20):
        s = sample_stats(t, step=step)
        for stat in ("rms", "abs_max"):
            assert s.outliers(stat) == [], (step, stat, s.score(stat).max())
        assert s.score().max() > 1


@pytest.mark.parametrize("scale", [8.0, 50.0])
def test_a_planted_outlier_is_the_one_outlier_named(scale: float) -> None:
    _, t = _mlp_run(outlier=3, scale=scale)
    assert sample_stats(t).outliers() == [3]
    assert sample_stats(t).outliers("abs_max") == [3]


def test_an_outlier_inside_the_model_is_found_on_a_transformer() -> None:
    """The hidden state of one sequence scaled 50x inside block 1 (a forward hook): found,
    and the modules before the block do not show it."""
    model = tiny_model()
    tokens = torch.randint(0, 16, (6, 10), generator=torch.Generator().manual_seed(1))

    def scale(module: nn.Module, args: object, out: torch.Tensor) -> torch.Tensor:
        out = out.clone()
        out[4] *= 50
        return out

    handle = model.blocks[1].mlp.up.register_forward_hook(scale)
    try:
        with track(model) as t:
            model(tokens).sum().backward()
    finally:
        handle.remove()
    s = sample_stats(t)
    assert "pos" in s.skipped  # [tokens, d]: no batch dimension
    assert s.outlier() == 4
    ratio = s.ratio("rms")[:, 4]
    before = [i for i, n in enumerate(s.names) if n.startswith("blocks.0")]
    assert ratio[before].max() < 3
    assert ratio[s.names.index("blocks.1.mlp.up")] > 20
    v = sample_values(t, position=9)
    assert v.sample == 4
    assert torch.equal(
        v.value("blocks.1.mlp.up"), t["blocks.1.mlp.up"][0].value[4, 9].to(torch.float64)
    )


def test_a_cnn_with_channels_in_dimension_1() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 5, 3, padding=1), nn.ReLU())
    x = torch.randn(4, 3, 6, 7)
    with track(model, grad=False) as t:
        model(x)
    v = sample_values(t, 2, position=3 * 7 + 4, channel_dim=1)  # row 3, column 4
    out = t["0"][0].value
    assert v.value("0").shape == (5,)
    assert torch.equal(v.value("0"), out[2, :, 3, 4].to(torch.float64))
    with pytest.raises(ArgumentValueError, match=r"position=42.*0 to 41"):
        sample_values(t, 2, position=42, channel_dim=1)
    # The default reads each output's own layout: dimension 1 of these 4-D outputs.
    default = sample_values(t, 2, position=3 * 7 + 4)
    assert torch.equal(default.value("0"), v.value("0"))


def test_copies_in_bfloat16_and_a_loaded_recording(tmp_path: Path) -> None:
    pytest.importorskip("safetensors")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU())
    x = torch.randn(5, 4)
    x[1] *= 50
    with track(model, dtype=torch.bfloat16) as t:
        model(x).sum().backward()
        t.step()
        model(x).sum().backward()
    assert sample_stats(t, step=0).outlier() == 1
    v = sample_values(t, 1, step=0)
    assert torch.equal(v.value("0"), t["0"][0].value[1].to(torch.float64))
    t.save(tmp_path / "run")
    run = tensor_tracker.load(tmp_path / "run")
    loaded = sample_values(run, 1, step=1)
    assert loaded.step == 1
    assert torch.equal(loaded.value("0"), sample_values(t, 1, step=1).value("0"))


def test_errors_name_the_argument_and_what_to_do() -> None:
    _, t = _mlp_run()
    with pytest.raises(ArgumentValueError, match=r"sample=8\).*holds 8 samples: pass 0 to 7"):
        sample_values(t, 8)
    with pytest.raises(ArgumentValueError, match=r"sample=-9"):
        sample_values(t, -9)
    with pytest.raises(ArgumentValueError, match=r"position=6\).*0 to 5"):
        sample_values(t, 0, position=6)
    with pytest.raises(ArgumentValueError, match=r"step=3\).*recorded steps: \[0\]"):
        sample_stats(t, step=3)
    with pytest.raises(ArgumentValueError, match="channel_dim=0"):
        sample_values(t, 0, channel_dim=0)
    with pytest.raises(ArgumentValueError, match="no module outputs at step 0, call 1"):
        sample_stats(t, call=1)
    with pytest.raises(ArgumentValueError, match=r"value\(name=.nope.\)"):
        sample_values(t, 0).value("nope")
    with pytest.raises(ArgumentValueError, match="holds no stashes"):
        sample_stats(tensor_tracker.Tracker())

    model = nn.Sequential(nn.Linear(4, 4))
    with track(model, stats=True) as with_stats:
        model(torch.randn(3, 4))
    with pytest.raises(
        NotRecordedError, match=r"statistics \(stats=\), not full copies.*keep_steps"
    ):
        sample_values(with_stats, 0)
    with track(model, sample=5) as sampled:  # random elements: no batch dimension left
        model(torch.randn(3, 4))
    with pytest.raises(NotRecordedError, match="sample= copies keep random elements"):
        sample_stats(sampled)


def test_frame_of_values() -> None:
    _, t = _mlp_run()
    v = sample_values(t, 1, position=2, names=["0", "2"])
    frame = v.to_frame()
    assert v.names == ["0", "2"]
    assert list(frame.columns) == ["name", "channel", "value"]
    assert len(frame) == 24 + 12
    assert frame[frame["name"] == "2"]["value"].tolist() == v.value("2").tolist()
    assert frame[frame["name"] == "0"]["channel"].tolist() == list(range(24))


def test_empty_outputs_and_mixed_positions_are_left_out_by_name() -> None:
    """A module with no channels is skipped, not an error; a position beyond a module's
    positions (fewer tokens) leaves that module out, naming why."""

    class Cut(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[..., :0]

    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.long = nn.Linear(4, 4)
            self.short = nn.Linear(4, 4)
            self.empty = Cut()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.long(x).sum() + self.short(x[:, :2]).sum() + self.empty(x).sum()

    torch.manual_seed(0)
    model = Two()
    with track(model, grad=False) as t:
        model(torch.randn(3, 5, 4))
    s = sample_stats(t)
    assert s.names == ["long", "short"]
    assert s.skipped["empty"] == "its output (3, 5, 0) is empty"
    v = sample_values(t, 1, position=4)
    assert v.names == ["long"]
    assert v.stats.skipped["short"] == "its output has 2 positions per sample, not 4"
    assert torch.equal(v.value("long"), t["long"][0].value[1, 4].to(torch.float64))
    with pytest.raises(ArgumentValueError, match="position=5"):
        sample_values(t, 1, position=5)
