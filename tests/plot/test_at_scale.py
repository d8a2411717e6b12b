"""Every figure on real-size models: bounded size, tick labels that never overlap, short
legends, and no matplotlib warning (they are errors here)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pytest
import torch

pytest.importorskip("matplotlib")
pytest.importorskip("transformers")

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

import tensor_tracker
from examples import zoo
from examples.zoo import ResNet18, bert, encoder
from tensor_tracker import Tracker, plot
from tensor_tracker import stats as tt_stats

pytestmark = [pytest.mark.filterwarnings("error"), pytest.mark.slow]  # real-size models

# A range that holds BERT's small gradients (the default leaves half of them below 2^-32).
RECORDED = [*tt_stats.DEFAULT, tt_stats.histogram(bins=64, range=(-48.0, 16.0))]


@pytest.fixture(scope="module")
def bert_run() -> Tracker:
    """BERT (220 modules) with statistics and histograms over 3 training steps."""
    return zoo.bert_run(RECORDED)


@pytest.fixture(scope="module")
def bert_blocks() -> Tracker:
    """Full tensors of BERT's 12 block outputs and their gradients (for umap_plot)."""
    model = bert()
    ids = torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(0))
    with tensor_tracker.track(model, include=r"encoder\.layer\.\d+$") as t:
        model(ids).last_hidden_state.pow(2).mean().backward()
    return t


@pytest.fixture(scope="module")
def encoder_run() -> Tracker:
    """A 3-layer TransformerEncoder trained for 200 steps, with statistics and histograms."""
    model = encoder()
    x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(0))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    with tensor_tracker.track(model, stats=RECORDED) as t:
        for _ in range(200):
            model(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            t.step()
    return t


@pytest.fixture(scope="module")
def resnet_run() -> Tracker:
    """A ResNet-18-like CNN (68 modules, ReLUs called twice per block), full tensors."""
    model = ResNet18()
    with tensor_tracker.track(model) as t:
        model(
            torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
        ).sum().backward()
    return t


def check_readable(fig: Figure) -> None:
    """Bounded size, axes not collapsed, no overlapping tick labels, legends of <= 12 entries."""
    width, height = fig.get_size_inches()
    assert 6.0 <= width <= 14.0 and 3.0 <= height <= 10.0, (width, height)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    for ax in fig.axes:
        box = ax.get_window_extent()
        if ax.get_label() != "<colorbar>":
            assert box.width >= fig.dpi * 2 and box.height >= fig.dpi * 1.5, ax
        for axis in (ax.xaxis, ax.yaxis):
            labels: list[Text] = [
                t for t in axis.get_ticklabels() if t.get_visible() and t.get_text()
            ]
            extents = [t.get_window_extent(renderer) for t in labels]
            for (a, ta), (b, tb) in itertools.combinations(zip(extents, labels, strict=True), 2):
                assert not a.overlaps(b), (ta.get_text(), tb.get_text())
        legend = ax.get_legend()
        if legend is not None:
            assert len(legend.get_texts()) <= 12
    for legend in fig.legends:
        assert len(legend.get_texts()) <= 12
    drawn = fig.get_tightbbox(renderer)  # inches, of everything drawn
    slack = 1 / fig.dpi
    assert drawn.x0 >= -slack and drawn.y0 >= -slack, ("cut off left/below", drawn)
    assert drawn.x1 <= width + slack and drawn.y1 <= height + slack, ("cut off", drawn)


Figures = dict[str, Callable[[], Figure]]


def bert_figures(t: Tracker, blocks: Tracker) -> Figures:
    leaves = [s for s in t if s.step == 2 and s.kind == "output" and "layer" in s.name]
    return {
        "scale_plot": lambda: plot.scale_plot(t),
        "scale_plot per module": lambda: plot.scale_plot(t, group=False),
        "history": lambda: plot.history(t, grad=True),
        "history of parents": lambda: plot.history(t, leaves=False),
        "histogram": lambda: plot.histogram(leaves),
        "histogram_heatmap": lambda: plot.histogram_heatmap(t, "encoder.layer.5.output.dense"),
        "umap_plot": lambda: plot.umap_plot(blocks, method="pca", grad="both"),
    }


def test_figures_of_a_12_layer_bert(bert_run: Tracker, bert_blocks: Tracker) -> None:
    for name, make in bert_figures(bert_run, bert_blocks).items():
        try:
            check_readable(make())
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from e


def test_figures_of_an_encoder_over_200_steps(encoder_run: Tracker) -> None:
    frame = encoder_run.to_frame()
    figures: Figures = {
        "history": lambda: plot.history(frame, stat="rms", grad=True),
        "history, one block": lambda: plot.history(encoder_run, names=r"layers\.1\."),
        "scale_plot": lambda: plot.scale_plot(encoder_run),
        "histogram_heatmap": lambda: plot.histogram_heatmap(encoder_run, "layers.2.linear2"),
        "histogram": lambda: plot.histogram([s for s in encoder_run if s.step == 199]),
    }
    for name, make in figures.items():
        try:
            check_readable(make())
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from e


def test_figures_of_a_resnet(resnet_run: Tracker) -> None:
    outputs = [s for s in resnet_run if s.kind == "output" and not s.grad]
    figures: Figures = {
        "scale_plot": lambda: plot.scale_plot(resnet_run),
        "histogram": lambda: plot.histogram(outputs, log2=True),
        "histogram, 3": lambda: plot.histogram(outputs[:3], log2=True),
        "umap_plot": lambda: plot.umap_plot(resnet_run, layers=r"^layer4\.\d$", method="pca"),
    }
    for name, make in figures.items():
        try:
            check_readable(make())
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from e


def x_labels(fig: Figure) -> list[str]:
    """The x tick labels as drawn on the bottom panel (the panels share their x axis)."""
    FigureCanvasAgg(fig).draw()
    bottom = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"][-1]
    return [t.get_text() for t in bottom.get_xticklabels()]


def test_bert_scale_plot_groups_blocks_and_roles(bert_run: Tracker) -> None:
    fig = plot.scale_plot(bert_run)
    forward, gradient = fig.axes[:2]
    ticks = [t for t in x_labels(fig) if t]
    assert ticks[0].startswith("embeddings.") and ticks[-1].startswith("pooler.")
    assert [t for t in ticks if t.startswith("encoder.layer.")] == [
        f"encoder.layer.{i}" for i in range(12)
    ]
    roles = [line.get_label() for line in forward.get_lines() if not line.get_gid()]
    assert "attention.self.query" in roles and "intermediate.dense" in roles
    query = next(line for line in forward.get_lines() if line.get_label() == "attention.self.query")
    block = ticks.index("encoder.layer.3")
    stash = next(
        s
        for s in bert_run
        if s.name == "encoder.layer.3.attention.self.query" and s.step == 2 and not s.grad
    )
    assert query.get_ydata()[block] == pytest.approx(math.log2(stash.first_value["rms"]))
    assert any(line.get_label() == "attention.self.query" for line in gradient.get_lines())


def test_resnet_scale_plot_averages_a_module_called_twice(resnet_run: Tracker) -> None:
    fig = plot.scale_plot(resnet_run)
    relu = next(line for line in fig.axes[0].get_lines() if line.get_label() == "relu")
    slots = x_labels(fig)
    calls = [
        s.first_value.double().pow(2).mean().sqrt().item()
        for s in resnet_run
        if s.name == "layer2.1.relu" and not s.grad and s.kind == "output"
    ]
    assert len(calls) == 2
    # The statistics of float32 tensors are float32-exact: on a log2 axis that is an absolute
    # error of about 1e-7 (a relative tolerance fails for a value near log2(1) = 0).
    assert relu.get_ydata()[slots.index("layer2.1")] == pytest.approx(
        math.log2(sum(calls) / 2), rel=0, abs=1e-6
    )


def test_history_of_many_modules_has_a_colour_bar_naming_them(encoder_run: Tracker) -> None:
    fig = plot.history(encoder_run, grad=True, leaves=True)
    ax, bar = fig.axes
    assert ax.get_legend() is None and bar.get_label() == "<colorbar>"
    lines = [line for line in ax.get_lines() if not line.get_gid()]
    assert len(lines) == 24  # 8 leaves per layer
    FigureCanvasAgg(fig).draw()
    names = [t.get_text() for t in bar.get_yticklabels() if t.get_text()]
    assert names[0] == "layers.0.self_attn" and set(names) <= {line.get_label() for line in lines}


def test_a_long_history_is_drawn_downsampled_with_its_spikes() -> None:
    model = torch.nn.Linear(4, 4)
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    with tensor_tracker.track(model, stats=["rms"]) as t:
        for step in range(1000):
            scale = 1024.0 if step == 637 else 1.0
            model(x * scale).sum().backward()
            t.step()
    fig = plot.history(t, max_points=100, formats=())
    line = next(line for line in fig.axes[0].get_lines() if line.get_label() == "<model>")
    assert len(line.get_xdata()) == 100
    band = fig.axes[0].collections[0].get_paths()[0].vertices[:, 1]
    rms = [s.first_value["rms"] for s in t if not s.grad]
    assert band.max() == pytest.approx(math.log2(max(rms)))
    assert "100 bucket means" in fig.axes[0].get_title()


def test_history_marks_the_first_nonfinite_step() -> None:
    model = torch.nn.Linear(4, 4)
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    with tensor_tracker.track(model, stats=["rms"]) as t:
        for step in range(12):
            model(x / (0.0 if step in (7, 9) else 1.0)).sum().backward()
            t.step()
    ax = plot.history(t).axes[0]
    marks = [line for line in ax.get_lines() if line.get_gid() == "first-nonfinite"]
    assert len(marks) == 1 and list(marks[0].get_xdata()) == [7, 7]
    assert any(text.get_text() == "first non-finite: step 7" for text in ax.texts)
    before = plot.history([s for s in t if s.step < 7]).axes[0]
    assert not [line for line in before.get_lines() if line.get_gid() == "first-nonfinite"]


def test_grouped_scale_plot_into_a_users_axes(resnet_run: Tracker) -> None:
    fig = Figure(figsize=(10, 5))
    ax = fig.add_subplot()
    assert plot.scale_plot(resnet_run, ax=ax) is fig
    limits = [line for line in ax.get_lines() if (line.get_gid() or "").startswith("limit:")]
    assert len(limits) == 12  # 4 formats x 3 limits, once for both series
    labels = [line.get_label() for line in ax.get_lines()]
    assert "conv1" in labels and "conv1 (grad)" in labels
    grad = next(line for line in ax.get_lines() if line.get_label() == "conv1 (grad)")
    assert grad.get_linestyle() == "--"


def test_figures_of_a_small_lstm_fit_their_legends() -> None:
    """A narrow figure (few modules): the format legend below must still fit its width."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.LSTM(16, 32, batch_first=True))
    with tensor_tracker.track(model, stats=True, capture=("outputs", "inputs", "params")) as t:
        for _ in range(3):
            model(torch.randint(0, 50, (2, 10)))[0].sum().backward()
            t.step()
    for make in (lambda: plot.scale_plot(t), lambda: plot.history(t, grad=True)):
        check_readable(make())
