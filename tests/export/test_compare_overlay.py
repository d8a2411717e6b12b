"""The page of a comparison for a precision study, in headless Chromium at desktop
(1440x900) and phone (390x844) sizes: fp32 against bf16 autocast of the same model is not
all red at the default tolerance, which is shown and adjustable; both runs' curves and
losses are overlaid; a module that run b did not record says so."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import tensor_tracker
from tests.browser import browser, console_errors  # noqa: F401  (the fixture)
from tests.export.test_report_pages import SIZES, _folder, _open

pytestmark = pytest.mark.slow


def _run(model: nn.Module, x: torch.Tensor, bf16: bool, **options: Any) -> tensor_tracker.Tracker:
    with tensor_tracker.track(model, **options) as t:
        for _ in range(3):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = model(x).float().square().mean()
            loss.backward()
            t.log("loss", loss)
            t.step()
    return t


@pytest.mark.parametrize("size", list(SIZES), ids=list(SIZES))
def test_fp32_against_bf16_autocast_is_not_all_red_and_overlays_both_runs(
    browser: Any,  # noqa: F811
    size: str,
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.LayerNorm(64), nn.Linear(64, 8)
    )
    x = torch.randn(16, 32)
    a = _run(model, x, bf16=False)
    # Run b leaves the LayerNorm out: its records are in run a only.
    b = _run(copy.deepcopy(model), x, bf16=True, exclude="^3$")
    cmp = tensor_tracker.compare(a, b)
    page = tensor_tracker.report(cmp, tmp_path / "bf16.html")
    _open(browser, page, SIZES[size])
    assert console_errors(browser) == []
    statuses = browser.execute_script("return comparePoints.map((p) => p.status)")
    # bf16 rounding (16 bf16 eps by default) is within the tolerance: nothing is red.
    assert statuses.count(1) > len(statuses) / 2 and statuses.count(2) == 0, statuses
    # The tolerance: shown in eps of bf16, and adjustable.
    rtol = browser.find_element(By.ID, "compare-rtol")
    assert float(rtol.get_attribute("value")) == pytest.approx(cmp.rtol, rel=1e-3)
    eps = browser.find_element(By.ID, "compare-tolerance").text
    assert "= 16 eps of the coarsest dtype compared (7.81e-3)" in eps
    browser.execute_script(
        "const i = document.getElementById('compare-rtol'); i.value = '0';"
        "i.dispatchEvent(new Event('input'))"
    )
    tighter = browser.execute_script("return comparePoints.map((p) => p.status)")
    assert tighter.count(2) == len([s for s in statuses if s > 0])  # all that differ: red
    # Module 2's chart: run a and run b, the latter dashed.
    browser.execute_script("document.querySelector('#modules li[data-name=\"2\"]').click()")
    chart = browser.find_element(By.CSS_SELECTOR, "#panel .strip-label").text
    assert "output value (run a)" in chart and "output value (run b)" in chart
    lines = browser.execute_script(
        "const u = [...charts].find((u) => document.getElementById('panel').contains(u.root));"
        "return u.series.slice(1).map((s) => [s.label, !!s.dash])"
    )
    assert ["output value (run b)", True] in lines and ["output value (run a)", False] in lines
    # The loss of both runs.
    kpi = browser.execute_script(
        "const u = [...charts].find((u) => u.root.closest('.kpi'));"
        "return u.series.slice(1).map((s) => s.label)"
    )
    assert kpi == ["loss", "loss (run b)"]
    # The LayerNorm: not recorded in run b (not a NaN error).
    browser.execute_script("document.querySelector('#modules li[data-name=\"3\"]').click()")
    cells = browser.find_elements(By.CSS_SELECTOR, "#panel table.compare-values td.status")
    assert cells and all(c.text == "not recorded in run b" for c in cells)
    assert "nan" not in browser.find_element(By.CSS_SELECTOR, "#panel table.compare-values").text
    assert console_errors(browser) == []
    browser.save_screenshot(str(_folder(tmp_path) / f"compare_bf16_{size}.png"))
    browser.execute_script("document.getElementById('compare-section').scrollIntoView()")
    browser.save_screenshot(str(_folder(tmp_path) / f"compare_bf16_{size}_chart.png"))
