"""`channel_table`, `outlier_channels` and `diagnose`'s `outlier_channels` check: a planted
outlier channel is found in the module that writes it, with its index and steps; Gaussian
channels are not reported."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import tensor_tracker as tt
from tensor_tracker import stats
from tensor_tracker._data.channels import (
    DEFAULT_OUTLIER_RATIO,
    ChannelTable,
    channel_table,
    outlier_channels,
)
from tensor_tracker.errors import ArgumentTypeError, ArgumentValueError, NotRecordedError

SPEC = [*stats.DEFAULT, stats.per_channel("abs_max")]
CHANNEL = 13


class Block(nn.Module):
    """A pre-norm residual MLP block: an outlier channel written by `fc2` stays in the
    residual stream of every later block, as in a transformer."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


def _model(width: int = 32) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, width), Block(width), Block(width), Block(width))


def _plant(model: nn.Sequential) -> None:
    with torch.no_grad():
        fc2 = model[2].fc2
        fc2.weight[CHANNEL] *= 100
        fc2.bias[CHANNEL] = 5.0


def _record(model: nn.Module, steps: int = 3, **options: object) -> tt.Tracker:
    torch.manual_seed(1)
    options.setdefault("stats", SPEC)
    with tt.track(model, **options) as t:  # type: ignore[arg-type]
        for _ in range(steps):
            model(torch.randn(4, 6, 8)).square().mean().backward()
            t.step()
    return t


def test_channel_table_holds_each_module_and_step() -> None:
    model = _model()
    t = _record(model)
    table = channel_table(t)
    assert table.steps == (0, 1, 2)
    assert table.modules[:3] == ("0", "1.norm", "1.fc1")
    assert table.widths[table.modules.index("1.fc1")] == 128
    frame = t.to_frame()
    row = frame[(frame["name"] == "1.fc1") & ~frame["grad"] & (frame["step"] == 1)].iloc[0]
    m = table.modules.index("1.fc1")
    np.testing.assert_array_equal(table.values[m, 1, :128], row["abs_max_per_channel"])
    # Narrower modules are padded with NaN.
    assert np.isnan(table.values[table.modules.index("0"), 0, 32:]).all()
    grads = channel_table(t, grad=True)
    assert grads.grad and "1.fc2" in grads.modules


def test_a_planted_outlier_channel_is_found_where_it_is_written() -> None:
    model = _model()
    _plant(model)
    t = _record(model)
    found = outlier_channels(channel_table(t))
    assert found[0].module == "2.fc2"  # forward order: the writer first
    assert found[0].channels == (CHANNEL,) and found[0].steps == (0, 1, 2)
    assert found[0].ratio > 50
    # The residual stream carries it on; modules before the writer do not have it.
    names = [o.module for o in found]
    assert "3" in names and not any(n.startswith("1") for n in names)

    diagnosis = tt.diagnose(t)
    findings = [f for f in diagnosis if f.check == "outlier_channels"]
    assert findings[0].modules == ("2.fc2",)
    assert findings[0].steps == (0, 2)
    assert findings[0].evidence["channels"] == str(CHANNEL)
    assert findings[0].evidence["steps"] == "0, 1, 2"
    assert "outlier_channels" in diagnosis.checked


def test_the_same_model_without_the_outlier_has_no_finding() -> None:
    t = _record(_model())
    assert not [f for f in tt.diagnose(t) if f.check == "outlier_channels"]
    assert "abs_max per channel" in tt.diagnose(t).checked["outlier_channels"]


@pytest.mark.parametrize("values_per_channel", [1, 16, 4096])
@pytest.mark.parametrize("channels", [64, 3072])
def test_gaussian_channels_stay_below_the_default_ratio(
    values_per_channel: int, channels: int
) -> None:
    torch.manual_seed(values_per_channel + channels)
    for _ in range(5):
        x = torch.randn(values_per_channel, channels, dtype=torch.float64)
        v = x.abs().amax(0).numpy()[None, None, :]
        table = ChannelTable("abs_max_per_channel", False, ("m",), (0,), v, (channels,))
        assert outlier_channels(table) == []
        # ...while one channel at 20 times the others is caught.
        v = v.copy()
        v[0, 0, 7] = 20 * np.median(v)
        table = ChannelTable("abs_max_per_channel", False, ("m",), (0,), v, (channels,))
        assert [o.channels for o in outlier_channels(table)] == [(7,)]
    assert DEFAULT_OUTLIER_RATIO == 10.0


def test_silent_and_narrow_modules_are_left_out() -> None:
    values = np.zeros((2, 1, 8))
    values[0, 0, 3] = 1.0  # a median channel of 0: any ratio is meaningless
    values[1, 0, :3] = [1.0, 1.0, 100.0]  # 3 channels
    table = ChannelTable("abs_max_per_channel", False, ("relu", "tiny"), (0,), values, (8, 3))
    assert outlier_channels(table) == []


def test_full_copies_give_the_same_table() -> None:
    model = _model()
    _plant(model)
    from_stats = channel_table(_record(model))
    from_copies = channel_table(_record(model, stats=False))
    assert from_copies.modules == from_stats.modules
    np.testing.assert_allclose(from_copies.values, from_stats.values, rtol=1e-6)
    assert tt.diagnose(_record(model, stats=False)).findings[0].modules == ("2.fc2",)


def _cnn() -> nn.Sequential:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1),
        nn.ReLU(),
    )
    with torch.no_grad():
        model[3].weight[CHANNEL] *= 100  # output channel 13 of the second convolution
    return model


@pytest.mark.parametrize("copies", [False, True])
def test_a_cnn_outlier_channel_is_found_in_its_channel_dimension(copies: bool) -> None:
    # A CNN's channels are dimension 1 of its [batch, channels, height, width] outputs,
    # convolutions and activations alike; the feature maps' 12 columns are not channels.
    model = _cnn()
    with tt.track(model, stats=False if copies else tt.diagnosis_stats) as t:
        model(torch.randn(2, 3, 10, 12)).square().mean().backward()
    table = channel_table(t)
    assert table.widths[table.modules.index("3")] == 16
    found = outlier_channels(table)
    assert [o.module for o in found][:2] == ["3", "4"]
    assert all(o.channels == (CHANNEL,) for o in found[:2])
    findings = [f for f in tt.diagnose(t) if f.check == "outlier_channels"]
    assert findings[0].modules == ("3",) and findings[0].evidence["channels"] == str(CHANNEL)


class _BasicBlock(nn.Module):
    """torchvision's `BasicBlock`: one ReLU module called twice, before and after `bn2`."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(width, width, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(width, width, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + x)


@pytest.mark.parametrize("copies", [False, True])
def test_a_module_called_twice_is_placed_at_the_call_showing_the_outlier(copies: bool) -> None:
    torch.manual_seed(0)
    model = _BasicBlock()
    with torch.no_grad():
        model.bn2.weight[CHANNEL] = 100.0  # bn2 writes the outlier; relu's second call shows it
    with tt.track(model, stats=False if copies else tt.diagnosis_stats) as t:
        model(torch.randn(2, 16, 6, 6)).square().mean().backward()
    table = channel_table(t)
    assert table.modules.index("relu") < table.modules.index("bn2")  # by first call
    found = outlier_channels(table)
    assert [o.module for o in found][:2] == ["bn2", "relu"]
    findings = [f for f in tt.diagnose(t) if f.check == "outlier_channels"]
    assert findings[0].modules == ("bn2",)


def test_a_loaded_recording_diagnoses_alike(tmp_path: object) -> None:
    pytest.importorskip("pyarrow")
    from pathlib import Path

    model = _model()
    _plant(model)
    t = _record(model)
    path = Path(str(tmp_path)) / "run"
    t.save(path)
    loaded = tt.diagnose(tt.load(path))
    assert [f.modules for f in loaded] == [f.modules for f in tt.diagnose(t)]


def test_argument_errors_name_the_argument() -> None:
    t = _record(_model(), steps=1)
    with pytest.raises(ArgumentValueError, match=r"channel_table\(column="):
        channel_table(t, "abs_max")
    with pytest.raises(ArgumentValueError, match=r"channel_table\(column="):
        channel_table(t, "std_per_channel")
    with pytest.raises(ArgumentTypeError, match=r"channel_table\(grad="):
        channel_table(t, grad="yes")  # type: ignore[arg-type]
    with pytest.raises(ArgumentValueError, match=r"channel_table\(kind="):
        channel_table(t, kind="weights")
    with pytest.raises(NotRecordedError, match="per_channel"):
        channel_table(t, "rms_per_channel")
    with pytest.raises(ArgumentValueError, match=r"outlier_channels\(k="):
        outlier_channels(channel_table(t), k=0.5)
    with pytest.raises(ArgumentTypeError, match=r"outlier_channels\(table\)"):
        outlier_channels(t)  # type: ignore[arg-type]
    with pytest.raises(ArgumentValueError, match=r"diagnose\(outlier_ratio="):
        tt.diagnose(t, outlier_ratio=1.0)
    with pytest.raises(ArgumentTypeError, match=r"diagnose\(outlier_ratio="):
        tt.diagnose(t, outlier_ratio="10")  # type: ignore[arg-type]


def test_a_recording_without_per_channel_statistics_says_so() -> None:
    t = _record(_model(), steps=1, stats=True)
    assert tt.diagnose(t).checked["outlier_channels"].startswith("skipped")


def test_a_step_without_a_module_warns_nothing() -> None:
    # Regression: numpy's "All-NaN slice encountered" came out of diagnose for a module
    # missing at a step (a NaN row of the table).
    import warnings

    values = np.full((1, 2, 8), np.nan)
    values[0, 1] = 1.0
    values[0, 1, 5] = 40.0
    table = ChannelTable("abs_max_per_channel", False, ("fc",), (0, 1), values, (8,))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = outlier_channels(table)
    assert [(o.channels, o.steps) for o in found] == [((5,), (1,))]
