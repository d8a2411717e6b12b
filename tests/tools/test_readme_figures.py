"""`tools.readme_figures --check`: CI draws the README's figures and compares them with the
committed PNGs instead of rewriting them."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

import matplotlib

matplotlib.use("Agg")
from matplotlib import pyplot as plt

from tools import readme_figures


def _png(path: Path, y: list[float], size: tuple[float, float] = (4, 3)) -> Path:
    fig = plt.figure(figsize=size)
    fig.add_subplot().plot(y, linewidth=4)
    fig.savefig(path, dpi=readme_figures.DPI)
    plt.close(fig)
    return path


def test_the_same_figure_passes(tmp_path: Path) -> None:
    drawn = _png(tmp_path / "drawn.png", [0, 1, 0, 1])
    committed = _png(tmp_path / "committed.png", [0, 1, 0, 1])
    assert readme_figures.compare(drawn, committed) is None


def test_another_picture_size_or_a_missing_figure_fails(tmp_path: Path) -> None:
    drawn = _png(tmp_path / "drawn.png", [0, 1, 0, 1])
    committed = _png(tmp_path / "committed.png", [0, 1, 0, 1], size=(4, 2))
    assert readme_figures.compare(drawn, committed) == (
        "committed.png: 320x240 px drawn, 320x160 px committed"
    )
    assert "not committed" in str(readme_figures.compare(drawn, tmp_path / "missing.png"))


def test_a_figure_that_changed_or_is_blank_fails(tmp_path: Path) -> None:
    committed = _png(tmp_path / "committed.png", [0, 1, 0, 1])
    changed = _png(tmp_path / "changed.png", [1, 0, 1, 0])
    assert "of its pixels changed" in str(readme_figures.compare(changed, committed))
    blank = tmp_path / "blank.png"
    fig = plt.figure(figsize=(4, 3))
    fig.savefig(blank, dpi=readme_figures.DPI)
    plt.close(fig)
    assert readme_figures.compare(blank, committed) == "committed.png: the drawn figure is blank"
