"""The report's colours stay apart for readers with the common colour-vision deficiencies:
each group of colours that carries a meaning (a comparison's statuses, a chart's series,
the graph's highlights, the number formats' limits) is simulated under deuteranopia,
protanopia and tritanopia (Machado, Oliveira & Fernandes 2009, severity 1) and its closest
pair must still differ by a visible CIE76 distance."""

from __future__ import annotations

import itertools
import re
from importlib import resources

import numpy as np
import pytest

# Machado et al. 2009, severity 1.0: linear RGB to the linear RGB a dichromat sees.
MACHADO = {
    "deuteranopia": [
        [0.367322, 0.860646, -0.227968],
        [0.280085, 0.672501, 0.047413],
        [-0.011820, 0.042940, 0.968881],
    ],
    "protanopia": [
        [0.152286, 1.052583, -0.204868],
        [0.114503, 0.786281, 0.099216],
        [-0.003882, -0.048116, 1.051998],
    ],
    "tritanopia": [
        [1.255528, -0.076749, -0.178779],
        [-0.078411, 0.930809, 0.147602],
        [0.004733, 0.691367, 0.303900],
    ],
}
_SRGB_TO_XYZ = np.array(
    [[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]
)
_WHITE = np.array([0.95047, 1.0, 1.08883])  # D65


def _linear(colour: str) -> np.ndarray:
    srgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)]) / 255
    return np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)


def _lab(linear: np.ndarray) -> np.ndarray:
    xyz = _SRGB_TO_XYZ @ np.clip(linear, 0, 1) / _WHITE
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def closest(colours: list[str], deficiency: str | None) -> float:
    """The smallest CIE76 distance between two of `colours` as seen with `deficiency`."""
    seen = [
        _lab(_linear(c) if deficiency is None else np.array(MACHADO[deficiency]) @ _linear(c))
        for c in colours
    ]
    return min(float(np.linalg.norm(a - b)) for a, b in itertools.combinations(seen, 2))


_PAGE = resources.files("tensor_tracker.export").joinpath("report.html").read_text()


def _hex(pattern: str) -> list[str]:
    """The colours (#rrggbb) in the page's text that `pattern` matches (its group 1)."""
    found = re.search(pattern, _PAGE)
    assert found is not None, pattern
    return re.findall(r"#[0-9a-fA-F]{6}\b", found.group(1))


# Each group and the smallest distance its colours keep (about 2.3 is "just noticeable";
# the series and the graph's fills also differ by dash or outline, so need less).
GROUPS = {
    "comparison statuses": (_hex(r"const statusColours = (\[.*?\]);"), 20.0),
    "chart series": (_hex(r"const seriesColours = (\{.*?\});"), 12.0),
    "number formats": (_hex(r"const colours = (\{.*?\});"), 15.0),
    "graph highlights": (
        _hex(r"(?s)(g\.node\.selected rect \{[^}]*\}.*?g\.node\.descendant rect \{[^}]*\})"),
        12.0,
    ),
}


@pytest.mark.parametrize("deficiency", [None, *MACHADO])
@pytest.mark.parametrize("group", list(GROUPS))
def test_colours_that_carry_a_meaning_stay_apart(group: str, deficiency: str | None) -> None:
    colours, least = GROUPS[group]
    assert len(colours) >= 2, colours
    distance = closest(colours, deficiency)
    assert distance >= least, (group, deficiency, colours, round(distance, 1))


def test_the_simulation_merges_red_and_green_for_a_deuteranope() -> None:
    # The check itself: the pair the issue names (green "equal", red "beyond") is far apart
    # for a trichromat and nearly one colour under the deuteranopia matrix.
    assert closest(["#2ca02c", "#d62728"], None) > 60
    assert closest(["#2ca02c", "#d62728"], "deuteranopia") < 10
