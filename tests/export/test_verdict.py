"""The verdict at the top of the report and the graph view, in headless Chromium at desktop
(1440x900) and phone (390x844) sizes: a problem planted in a model the page has not seen
is named in the first screen, and its link opens the module at its step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import tensor_tracker
from tests.browser import browser, console_errors  # noqa: F401  (the fixture)
from tests.export.test_report_pages import SIZES, _folder, _no_sideways_scroll, _open

pytestmark = pytest.mark.slow


class Amplifier(nn.Module):
    """The planted problem: outputs a million times too large (past float16's range)."""

    def forward(self, x: Tensor) -> Tensor:
        return x * 1e6


class Mixer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(32, 32)
        self.amplifier = Amplifier()
        self.norm = nn.LayerNorm(32)  # back to scale: nothing after it overflows

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.amplifier(self.proj(x)))


def _planted(steps: int = 4) -> tuple[tensor_tracker.Tracker, tensor_tracker.ModuleGraph]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.GELU())
    model.add_module("mixer", Mixer())
    model.add_module("head", nn.Linear(32, 4))
    x = torch.randn(8, 16)
    with tensor_tracker.track(model, stats=tensor_tracker.diagnosis_stats) as t:
        for _ in range(steps):
            loss = model(x).square().mean()
            loss.backward()
            t.log("loss", loss)
            t.step()
    return t, tensor_tracker.module_graph(model, x)


# The text of the page's visible elements inside the first `arguments[0]` pixels.
_FIRST_SCREEN = """
const out = [];
for (const node of document.querySelectorAll('#verdict li, #verdict h2')) {
  const r = node.getBoundingClientRect();
  if (r.width && r.bottom <= arguments[0] && node.offsetParent) out.push(node.textContent);
}
return out.join('\\n');
"""


@pytest.mark.parametrize("view", ["report", "graph"])
@pytest.mark.parametrize("size", list(SIZES), ids=list(SIZES))
def test_the_first_screen_names_a_planted_problem_and_opens_it(
    browser: Any,  # noqa: F811
    size: str,
    view: str,
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By

    t, graph = _planted()
    path = tmp_path / f"{view}.html"
    if view == "report":
        tensor_tracker.report(t, path, graph=graph)
    else:
        tensor_tracker.graph_view(graph, t).save(path)
    _open(browser, path, SIZES[size])
    height = min(900, SIZES[size][1])
    first = browser.execute_script(_FIRST_SCREEN, height)
    assert "mixer.amplifier, steps 0-3: values of 1 module(s) exceed the largest float16" in first
    link = browser.find_element(By.CSS_SELECTOR, '#verdict li[data-module="mixer.amplifier"] a')
    assert link.text == "mixer.amplifier, steps 0-3"
    browser.save_screenshot(str(_folder(tmp_path) / f"verdict_{view}_{size}.png"))
    link.click()
    assert browser.find_element(By.ID, "panel-title").text.startswith("mixer.amplifier (Amplifier)")
    assert browser.find_element(By.ID, "step-value").text == "0"
    # The graph opens the level that holds the module, its node picked.
    assert browser.execute_script("return graphState.level") == "mixer#0"
    node = browser.find_element(By.CSS_SELECTOR, "#graph-svg g.node.selected")
    assert node.get_attribute("data-id") == "mixer.amplifier#0"
    if view == "report":
        selected = browser.find_element(By.CSS_SELECTOR, "#modules li.selected")
        assert selected.get_attribute("data-name") == "mixer.amplifier"
    _no_sideways_scroll(browser)
    assert console_errors(browser) == []
    browser.save_screenshot(str(_folder(tmp_path) / f"verdict_{view}_{size}_opened.png"))


@pytest.mark.parametrize("size", list(SIZES), ids=list(SIZES))
def test_a_run_without_problems_says_how_many_checks_found_none(
    browser: Any,  # noqa: F811
    size: str,
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    with tensor_tracker.track(model, stats=tensor_tracker.diagnosis_stats) as t:
        for _ in range(3):
            model(torch.randn(64, 16)).square().mean().backward()
            t.step()
    checks = tensor_tracker.diagnose(t).verdict()[0]
    assert checks.startswith("No problems found by ")
    path = tensor_tracker.report(t, tmp_path / "clean.html")
    _open(browser, path, SIZES[size])
    verdict = browser.find_element(By.ID, "verdict")
    assert verdict.text == checks
    assert verdict.rect["y"] + verdict.rect["height"] <= SIZES[size][1]
    assert console_errors(browser) == []
