"""`plot.sample_plot`: one sample's values per channel at every module, and the outlier sample."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("matplotlib")

from matplotlib.colors import SymLogNorm, to_rgba
from matplotlib.image import AxesImage

from tensor_tracker import plot, sample_stats, track
from tensor_tracker.errors import NotRecordedError


def _run(outlier: int = 5) -> object:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 12))
    x = torch.randn(8, 6, 12)
    x[outlier] *= 50
    with track(model) as t:
        model(x).sum().backward()
    return t


def test_the_figure_shows_the_outlier_samples_values_and_marks_it() -> None:
    t = _run(outlier=5)
    fig = plot.sample_plot(t, position=2)
    heat, bars, colour_bar = fig.axes
    assert heat.get_xlabel() == "channel"
    assert heat.get_ylabel() == "module (in the order they ran)"
    assert heat.get_title() == "sample 5: output values per channel (position 2), step 0"
    assert bars.get_xlabel() == "sample (batch index)"
    assert bars.get_ylabel() == "rms / batch median"
    assert "outlier: sample 5" in bars.get_title()
    assert colour_bar.get_ylabel() == "value (symmetric log scale)"

    # The heat map: one row per module, as many columns as the widest module has channels;
    # each row the sample's recorded values, grey (NaN) beyond a module's channels.
    (image,) = [a for a in heat.get_images() if isinstance(a, AxesImage)]
    grid = np.asarray(image.get_array().filled(np.nan))
    names = ["0", "1", "2", ""]
    assert grid.shape == (4, 24)
    for row, name in zip(grid, names, strict=True):
        value = t[name][0].value[5, 2].to(torch.float64).numpy()
        np.testing.assert_array_equal(row[: len(value)], value)
        assert np.isnan(row[len(value) :]).all()
    assert image.get_extent() == [-0.5, 23.5, 3.5, -0.5]
    norm = image.norm
    assert isinstance(norm, SymLogNorm)
    assert norm.vmin == -norm.vmax and norm.vmax >= np.nanmax(np.abs(grid))
    fig.canvas.draw()
    labels = [tick.get_text() for tick in heat.get_yticklabels()]
    assert labels == ["0", "1", "2", "<model>"]

    # The bars: each sample's score, the outlier red and the sample shown outlined.
    score = sample_stats(t).score("rms").numpy()
    patches = bars.patches
    assert [p.get_gid() for p in patches] == [f"sample:{i}" for i in range(8)]
    np.testing.assert_allclose([p.get_height() for p in patches], score)
    red = [i for i, p in enumerate(patches) if p.get_facecolor() == to_rgba("tab:red")]
    assert red == [5]
    assert bars.get_yscale() == "log"
    assert bars.get_ylim()[1] > 20 > 3 > max(np.delete(score, 5))
    assert patches[5].get_linewidth() == 1.5


def test_another_sample_gradients_and_abs_max() -> None:
    t = _run(outlier=1)
    fig = plot.sample_plot(t, 6, grad=True, stat="abs_max")
    heat, bars, _ = fig.axes
    assert heat.get_title() == (
        "sample 6: gradient values per channel (largest |value| over positions), step 0"
    )
    assert bars.get_ylabel() == "abs_max / batch median"
    assert bars.patches[6].get_linewidth() == 1.5 and bars.patches[1].get_linewidth() != 1.5
    grid = np.asarray(heat.get_images()[0].get_array().filled(np.nan))
    (grad,) = next(s for s in t["2"] if s.grad).value
    x = grad[6].to(torch.float64)  # [positions, channels]: the largest |value| per channel
    expected = x.gather(0, x.abs().argmax(0, keepdim=True))[0].numpy()
    np.testing.assert_array_equal(grid[2, :12], expected)
    # sum() as the loss: every sample's output gradient is 1, no sample stands out.
    score = sample_stats(t, grad=True).score("abs_max").numpy()
    np.testing.assert_allclose([p.get_height() for p in bars.patches], score)
    assert score.max() < 3


def test_a_recording_of_statistics_is_refused() -> None:
    model = nn.Sequential(nn.Linear(4, 4))
    with track(model, stats=True) as t:
        model(torch.randn(3, 4))
    with pytest.raises(NotRecordedError, match="not full copies"):
        plot.sample_plot(t)
