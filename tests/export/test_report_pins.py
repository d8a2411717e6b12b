"""Pinned modules that compare: one y range for every pinned chart on request, a colour key
on each histogram strip, the values outside the histogram's range counted, and the "how
to record histograms" hint once per page; at desktop (1440x900) and phone (390x844)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import tensor_tracker
from tensor_tracker import track
from tests.browser import browser, console_errors  # noqa: F401  (the fixture)
from tests.export.test_report_pages import SIZES, _folder, _no_sideways_scroll, _open


def _page(folder: Path, spec: Any) -> Path:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.Linear(16, 1))
    with track(model, stats=spec) as t:
        for _ in range(4):
            (model(torch.randn(32, 8)) * 100).sum().backward()
            t.step()
    return tensor_tracker.report(t, folder / "pins.html")


def _pin(browser: Any, *names: str) -> None:  # noqa: F811
    for name in names:
        browser.execute_script(f"togglePin(DATA.modules.findIndex((m) => m.name === '{name}'))")


def _y_ranges(browser: Any) -> list[list[float]]:  # noqa: F811
    return browser.execute_script(
        "return [...charts].filter((u) => u.root.closest('#pins'))"
        ".map((u) => [u.scales.y.min, u.scales.y.max])"
    )


@pytest.mark.parametrize("size", list(SIZES), ids=list(SIZES))
def test_pins_share_a_y_range_and_their_strips_say_what_they_leave_out(
    tmp_path: Path,
    browser: Any,  # noqa: F811
    size: str,
) -> None:
    from selenium.webdriver.common.by import By

    # A narrow histogram: the gradients (x100) fall above it, the small values below.
    spec = ["rms", tensor_tracker.stats.histogram(bins=8, range=(-4.0, 4.0))]
    _open(browser, _page(tmp_path, spec), SIZES[size])
    _pin(browser, "0", "3")
    apart = _y_ranges(browser)
    assert len(apart) == 2 and apart[0] != apart[1]
    box = browser.find_element(By.ID, "shared-y")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", box)
    box.click()
    shared = _y_ranges(browser)
    assert shared[0] == shared[1]
    assert shared[0][0] <= min(r[0] for r in apart) and shared[0][1] >= max(r[1] for r in apart)
    card = browser.find_element(By.CSS_SELECTOR, '#pins .card[data-module="3"]')
    strips = card.find_elements(By.CSS_SELECTOR, ".strip")
    assert strips and all(s.find_elements(By.CSS_SELECTOR, ".ramp") for s in strips)
    readouts = [s.find_element(By.CSS_SELECTOR, ".readout").text for s in strips]
    assert any("not shown: " in r and " above 2^4" in r for r in readouts), readouts
    browser.execute_script("arguments[0].scrollIntoView()", card)
    browser.save_screenshot(str(_folder(tmp_path) / f"pins-shared-{size}.png"))
    assert console_errors(browser) == []
    _no_sideways_scroll(browser)


@pytest.mark.parametrize("size", list(SIZES), ids=list(SIZES))
def test_the_histogram_hint_shows_once_per_page(
    tmp_path: Path,
    browser: Any,  # noqa: F811
    size: str,
) -> None:
    from selenium.webdriver.common.by import By

    _open(browser, _page(tmp_path, ["rms", "abs_max"]), SIZES[size])
    _pin(browser, "0", "2", "3")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#pins .card")) == 3
    hints = browser.find_elements(By.CSS_SELECTOR, ".howto")
    assert len(hints) == 1 and hints[0].text.startswith("Histograms were not recorded")


@pytest.mark.parametrize("size", list(SIZES), ids=list(SIZES))
def test_full_copies_get_histogram_strips_over_their_own_range(
    tmp_path: Path,
    browser: Any,  # noqa: F811
    size: str,
) -> None:
    """A run that kept the tensors (no `stats=`) has no histogram statistics: the page
    counts the copies' values itself, over the powers of 2 they span."""
    from selenium.webdriver.common.by import By

    page = _page(tmp_path, None)
    _open(browser, page, SIZES[size])
    hist = browser.execute_script("return DATA.hist")
    # The inputs' gradients are x100 the loss's: the range reaches well above 2^4.
    assert hist["log2"] and hist["edges"][-1] >= 4 and hist["bins"] == 48
    _pin(browser, "3")
    card = browser.find_element(By.CSS_SELECTOR, '#pins .card[data-module="3"]')
    strips = card.find_elements(By.CSS_SELECTOR, ".strip")
    assert len(strips) == 2  # the output and its gradient
    assert not browser.find_elements(By.CSS_SELECTOR, ".howto")  # nothing to ask for
    totals = browser.execute_script(
        "return seriesOf[DATA.modules.findIndex((m) => m.name === '3')].map((s) => s.hist.totals)"
    )
    assert totals == [[32] * 4, [32] * 4]  # every value of the 32 x 1 output, every step
    assert console_errors(browser) == []
    _no_sideways_scroll(browser)
