"""`plot.channel_map`: channels x modules on a log colour scale, the planted outlier channel
circled, the data behind the image that of `channel_table`."""

from __future__ import annotations

import numpy as np
import pytest

import tensor_tracker as tt
from tensor_tracker import plot
from tensor_tracker._data.channels import channel_table
from tensor_tracker.errors import ArgumentTypeError, ArgumentValueError, NotRecordedError
from tests.data.test_channels import CHANNEL, _model, _plant, _record

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def planted() -> tt.Tracker:
    model = _model()
    _plant(model)
    return _record(model)


def test_the_image_is_the_table_on_a_log_scale(planted: tt.Tracker) -> None:
    from matplotlib.colors import LogNorm

    fig = plot.channel_map(planted)
    ax = fig.axes[0]
    image = ax.images[0]
    assert isinstance(image.norm, LogNorm)
    table = channel_table(planted)
    rows = [m for m, w in enumerate(table.widths) if w >= 2]
    shown = np.ma.getdata(image.get_array())
    # Each row the module's channels, stretched over the widest module's 128 (32 -> 4 each).
    over = table.over_steps()
    expected = np.stack([over[r, np.arange(128) * table.widths[r] // 128] for r in rows])
    finite = np.isfinite(expected) & (expected > 0)
    np.testing.assert_array_equal(shown[finite], expected[finite])
    assert np.ma.getmaskarray(image.get_array())[~finite].all()
    assert ax.get_xlabel().startswith("channel (of 128") and ax.get_ylabel() == "module"
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert [display for display in labels if not display] == []
    if "" in table.modules:  # the model itself, named as in every other figure
        assert "<model> [32]" in labels and not any("<root>" in label for label in labels)
    assert "1.fc1 [128]" in labels
    assert "largest over the steps" in ax.get_title()


def test_every_module_fills_its_row(planted: tt.Tracker) -> None:
    # 32-channel modules beside a 128-channel one: as wide, not a quarter of the row.
    image = plot.channel_map(planted).axes[0].images[0].get_array()
    table = channel_table(planted)
    rows = [m for m, w in enumerate(table.widths) if w >= 2]
    narrow = [i for i, r in enumerate(rows) if table.widths[r] == 32]
    assert narrow and not np.ma.getmaskarray(image)[narrow].any()
    # One width: the channels as they are, labelled plainly.
    fig = plot.channel_map(planted, modules=["3", "2.fc2"])
    assert fig.axes[0].images[0].get_array().shape == (2, 32)
    assert fig.axes[0].get_xlabel() == "channel"


def test_the_outlier_channel_is_circled_where_it_is(planted: tt.Tracker) -> None:
    fig = plot.channel_map(planted)
    ax = fig.axes[0]
    marks = ax.collections[0].get_offsets()
    table = channel_table(planted)
    rows = [table.modules[m] for m, w in enumerate(table.widths) if w >= 2]
    widths = {table.modules[m]: w for m, w in enumerate(table.widths)}
    # At the middle of the channel's cell, stretched over the widest module's 128 channels.
    circled = {(rows[int(y)], int((x + 0.5) * widths[rows[int(y)]] / 128)) for x, y in marks}
    assert ("2.fc2", CHANNEL) in circled
    assert {x for _, x in circled} == {CHANNEL}
    assert not any(name.startswith("1") for name, _ in circled)
    assert "10x" in fig.legends[0].get_texts()[0].get_text()
    unmarked = plot.channel_map(planted, mark=None)
    assert not unmarked.axes[0].collections and not unmarked.legends


def test_the_legend_and_title_leave_the_image_whole(planted: tt.Tracker) -> None:
    # A narrow figure (32 channels: 4.5 inches): the title in two lines within the figure,
    # the legend below the axes instead of over the first modules' rows.
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = plot.channel_map(planted)
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    ax = fig.axes[0]
    axes_box = ax.get_window_extent(renderer)
    assert fig.legends[0].get_window_extent(renderer).y1 <= axes_box.y0
    title = ax.title.get_window_extent(renderer)
    assert title.x0 >= 0 and title.x1 <= fig.bbox.width
    # In the caller's own axes (a figure that may hold others) the legend stays in them.
    import matplotlib.figure

    own = matplotlib.figure.Figure()
    theirs = own.subplots(1, 2)[1]
    plot.channel_map(planted, ax=theirs)
    assert not own.legends and theirs.get_legend() is not None


def test_one_step_and_chosen_modules(planted: tt.Tracker) -> None:
    fig = plot.channel_map(planted, step=1, modules=["3", "1"])
    ax = fig.axes[0]
    table = channel_table(planted)
    expected = table.values[[table.modules.index("3"), table.modules.index("1")], 1, :32]
    np.testing.assert_array_equal(np.ma.getdata(ax.images[0].get_array()), expected)
    assert "step 1" in ax.get_title()


def test_argument_errors(planted: tt.Tracker) -> None:
    with pytest.raises(ArgumentValueError, match=r"channel_map\(step="):
        plot.channel_map(planted, step=99)
    with pytest.raises(ArgumentValueError, match=r"channel_map\(modules="):
        plot.channel_map(planted, modules=["nowhere"])
    with pytest.raises(ArgumentTypeError, match=r"channel_map\(modules="):
        plot.channel_map(planted, modules="3")  # type: ignore[arg-type]
    with pytest.raises(ArgumentValueError, match=r"channel_map\(mark="):
        plot.channel_map(planted, mark=0.5)
    with pytest.raises(ArgumentTypeError, match=r"channel_map\(grad="):
        plot.channel_map(planted, grad=1)  # type: ignore[arg-type]
    with pytest.raises(NotRecordedError):
        plot.channel_map(_record(_model(), steps=1, stats=True))
