"""The report's sample panel (full copies): a batch index and a position picked on the page
show that sample's values per channel at the picked module, and every sample's rms across
the batch with the outlier marked; checked against the recorded copies in headless
Chromium at desktop and phone sizes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import tensor_tracker
from tensor_tracker import track
from tensor_tracker.export import _samples
from tensor_tracker.export._report import page
from tests.browser import browser, console_errors, wait_for  # noqa: F401  (the fixture)
from tests.export.test_report_pages import (
    SIZES,
    _folder,
    _hover,
    _no_sideways_scroll,
    _nothing_cut,
    _open,
    _touch,
)
from tests.helpers import tiny_model

OUTLIER = 5
MODULE = "blocks.1.mlp.up"


def _run() -> tensor_tracker.Tracker:
    """Three SGD steps of a two-block transformer over 8 sequences of 12 tokens; sample 5's
    hidden state scaled 50x inside block 1's MLP (a forward hook)."""
    model = tiny_model()
    tokens = torch.randint(0, 16, (8, 12), generator=torch.Generator().manual_seed(0))
    scale = torch.ones(8, 1, 1)
    scale[OUTLIER] = 50.0
    handle = model.blocks[1].mlp.up.register_forward_hook(lambda m, a, out: out * scale)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        with track(model) as t:
            for _ in range(3):
                model(tokens).square().mean().backward()
                optimizer.step()
                optimizer.zero_grad()
                t.step()
    finally:
        handle.remove()
    return t


@pytest.fixture(scope="module")
def run() -> tensor_tracker.Tracker:
    return _run()


def _payload(recording: Any) -> Any:
    import json
    import re

    text = page(recording, None, "t")
    match = re.search(r'<script id="data" type="application/json">(.*?)</script>', text, re.S)
    assert match is not None
    return json.loads(match.group(1))


def _floats(b64: str) -> torch.Tensor:
    import base64

    return torch.frombuffer(bytearray(base64.b64decode(b64)), dtype=torch.float32)


def test_the_payload_holds_each_samples_values_and_rms(run: tensor_tracker.Tracker) -> None:
    samples = _payload(run)["samples"]
    assert sorted(samples["steps"]) == ["0", "1", "2"] and samples["omitted"] == []
    at = samples["steps"]["2"]
    assert at["batch"] == 8 and at["outlier"] == OUTLIER and at["score"] > 20
    assert at["flagged"] and at["threshold"] == 4.0
    modules = _payload(run)["modules"]
    entry = next(e for e in at["modules"] if modules[e["module"]]["name"] == MODULE)
    recorded = run[MODULE][-2].value  # step 2's output (then its gradient)
    assert run[MODULE][-2].step == 2 and not run[MODULE][-2].grad
    assert entry["channels"] == 64 and entry["positions"] == 12 and entry["stored"] == 12
    assert torch.equal(_floats(entry["values"]), recorded.reshape(-1))
    rms = recorded.double().reshape(8, -1).square().mean(1).sqrt()
    assert entry["rms"] == pytest.approx(rms.tolist(), rel=1e-12)
    assert max(range(8), key=lambda b: entry["ratio"][b]) == OUTLIER
    assert at["skipped"] == {"pos": "its dimension 0 holds 12, not the batch's 8"}


def test_a_batch_without_an_outlier_has_none_marked(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    """Random sequences, nothing planted: the sample that stands out most (about 1.2 times
    the batch median) is not marked as the outlier, and the page says none stands out."""
    from selenium.webdriver.common.by import By

    model = tiny_model()
    tokens = torch.randint(0, 16, (8, 12), generator=torch.Generator().manual_seed(0))
    with track(model) as t:
        model(tokens).square().mean().backward()
    (at,) = _payload(t)["samples"]["steps"].values()
    assert not at["flagged"] and 1 < at["score"] < 4
    path = tensor_tracker.report(t, tmp_path / "samples.html")
    browser.get(path.as_uri())
    wait_for(browser, "return document.body.dataset.ready === 'true'")
    browser.execute_script(f"select(DATA.modules.findIndex((m) => m.name === '{MODULE}'))")
    assert "none stands out" in browser.find_element(By.ID, "sample-rms-label").text
    assert "No sample stands out" in browser.find_element(By.ID, "sample-hint").text
    assert browser.execute_script("return sampleCharts.rms.data[2].every((v) => v === null)")


def test_over_the_budget_the_page_keeps_each_channels_largest_value_then_leaves_steps_out(
    run: tensor_tracker.Tracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    full = sum(
        r.numel()
        for r in tensor_tracker._data.samples.sample_rows(
            run, "t", 2, 0, False, None, 0, -1
        ).positions
    )
    # Room for one step's values at every position and one step's largest values.
    monkeypatch.setattr(_samples, "SAMPLE_FLOATS", full + full // 12)
    samples = _payload(run)["samples"]
    assert sorted(samples["steps"]) == ["1", "2"] and samples["omitted"] == [0]
    assert samples["steps"]["2"]["modules"][0]["stored"] > 1  # the last step whole
    entry = next(
        e
        for e in samples["steps"]["1"]["modules"]
        if e["module"] == samples["steps"]["2"]["modules"][3]["module"]
    )
    assert entry["stored"] == 1
    name = _payload(run)["modules"][entry["module"]]["name"]
    x = next(s for s in run[name] if s.step == 1 and not s.grad).value  # [8, 12, channels]
    largest = x.gather(1, x.abs().argmax(1, keepdim=True))
    assert torch.equal(_floats(entry["values"]), largest.reshape(-1))


def test_a_recording_of_statistics_has_no_sample_panel() -> None:
    model = nn.Sequential(nn.Linear(4, 4))
    with track(model, stats=True) as t:
        model(torch.randn(3, 4))
        t.step()
    assert _payload(t)["samples"] is None


def _set(browser: Any, element_id: str, value: str) -> None:  # noqa: F811
    browser.execute_script(
        "const e = document.getElementById(arguments[0]); e.value = arguments[1];"
        "e.dispatchEvent(new Event('input'))",
        element_id,
        value,
    )


def _text(browser: Any, element_id: str) -> str:  # noqa: F811
    return str(
        browser.execute_script(f"return document.getElementById('{element_id}').textContent")
    )


def _chart_values(browser: Any, which: str, series: int = 1) -> list[float | None]:  # noqa: F811
    return list(browser.execute_script(f"return Array.from(sampleCharts.{which}.data[{series}])"))


@pytest.mark.slow
@pytest.mark.parametrize("size", list(SIZES), ids=list(SIZES))
def test_the_sample_panel_in_a_browser(
    run: tensor_tracker.Tracker,
    browser: Any,  # noqa: F811
    size: str,
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By

    phone = size == "phone"
    path = tensor_tracker.report(run, tmp_path / "samples.html")
    _open(browser, path, SIZES[size])
    section = browser.find_element(By.ID, "sample-section")
    assert section.is_displayed()
    # The page opens on the outlier sample.
    assert browser.find_element(By.ID, "sample-index").get_attribute("value") == str(OUTLIER)
    assert f"stands out most: {OUTLIER}" in _text(browser, "sample-hint")

    # Pick the module in the list (a menu on a phone).
    if phone:
        browser.find_element(By.ID, "menu").click()
        wait_for(
            browser, "return getComputedStyle(document.querySelector('aside')).transform === 'none'"
        )
    item = browser.find_element(By.CSS_SELECTOR, f'#modules li[data-name="{MODULE}"] .name')
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", item)
    item.click()
    wait_for(browser, f"return document.getElementById('sample-module').textContent === '{MODULE}'")

    # Every sample's rms at the module: the outlier alone in the red series, the recorded values.
    step2 = next(s for s in run[MODULE] if s.step == 2 and not s.grad).value
    rms = step2.double().reshape(8, -1).square().mean(1).sqrt()
    others, outlier = _chart_values(browser, "rms", 1), _chart_values(browser, "rms", 2)
    assert [b for b, v in enumerate(outlier) if v is not None] == [OUTLIER]
    assert outlier[OUTLIER] == pytest.approx(float(rms[OUTLIER]), rel=1e-6)
    assert others[OUTLIER] is None
    assert [v for b, v in enumerate(others) if b != OUTLIER] == pytest.approx(
        [float(rms[b]) for b in range(8) if b != OUTLIER], rel=1e-6
    )
    assert browser.execute_script("return sampleCharts.rms.axes.map((a) => a.label)") == [
        "sample (batch index)",
        "rms",
    ]
    assert "orange, sample 5, stands out most" in _text(browser, "sample-rms-label")

    # No position: each channel's value of largest magnitude over the tokens.
    x = step2[OUTLIER].double()  # [tokens, channels]
    largest = x.gather(0, x.abs().argmax(0, keepdim=True))[0]
    assert _chart_values(browser, "values") == pytest.approx(largest.tolist(), rel=1e-6)
    # Its axis: asinh (signed, logarithmic beyond the small values), ticks at 0 and
    # powers of ten up to the largest magnitude.
    ticks = browser.execute_script("return sampleCharts.values.axes[1]._splits")
    peak = float(largest.abs().max())
    assert 0 in ticks and sorted(-t for t in ticks) == ticks and len(set(ticks)) == len(ticks)
    assert peak / 10 < max(ticks) <= peak
    labels = browser.execute_script("return sampleCharts.values.axes[1]._values")
    assert len(labels) == len(ticks) and all(labels), labels  # every tick labelled
    assert browser.execute_script("return sampleCharts.values.scales.y.distr") == 4
    section_top = (
        "arguments[0].scrollIntoView({block: 'start'});"
        "scrollBy(0, -document.querySelector('header').offsetHeight - 8)"
    )
    browser.execute_script(section_top, section)
    _no_sideways_scroll(browser)
    _nothing_cut(browser)
    folder = _folder(tmp_path)
    browser.save_screenshot(str(folder / f"report-samples-{size}.png"))

    # Sample 2 at token 7: its recorded values, read out on hover or tap.
    _set(browser, "sample-index", "2")
    _set(browser, "sample-position", "7")
    wait_for(
        browser,
        "return document.getElementById('sample-values-label').textContent.startsWith('sample 2, position 7 of 12')",
    )
    assert _chart_values(browser, "values") == pytest.approx(step2[2, 7].tolist(), rel=1e-6)
    assert _chart_values(browser, "rms", 3)[2] == pytest.approx(float(rms[2]), rel=1e-6)
    over = browser.find_element(By.CSS_SELECTOR, "#sample-values-plot .u-over")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", over)
    (_touch if phone else _hover)(browser, over, 0, 0)
    channel = int(
        wait_for(browser, "return document.getElementById('sample-values-readout').dataset.channel")
    )
    readout = _text(browser, "sample-values-readout")
    assert readout.startswith(f"{MODULE} \u00b7 sample 2 \u00b7 channel {channel} \u00b7 value ")
    value = float(readout.rsplit(" ", 1)[1])
    assert value == pytest.approx(float(step2[2, 7, channel]), rel=1e-3)
    browser.execute_script(section_top, section)
    _no_sideways_scroll(browser)
    _nothing_cut(browser)
    browser.save_screenshot(str(folder / f"report-samples-{size}-position.png"))

    # The step slider moves the panel to another step's copies.
    browser.execute_script(
        "const s = document.getElementById('step'); s.value = 0; s.dispatchEvent(new Event('input'))"
    )
    wait_for(browser, "return document.getElementById('step-value').textContent === '0'")
    step0 = next(s for s in run[MODULE] if s.step == 0 and not s.grad).value
    first = float(step0[2, 7, 0])
    assert first != pytest.approx(float(step2[2, 7, 0]), rel=1e-3)  # the steps differ
    wait_for(
        browser,
        f"return sampleCharts.values && Math.abs(sampleCharts.values.data[1][0] - ({first!r}))"
        f" <= 1e-6 * Math.abs({first!r})",
    )
    assert _chart_values(browser, "values") == pytest.approx(step0[2, 7].tolist(), rel=1e-6)

    # Out of range: said, nothing drawn for the values; the outlier button comes back.
    _set(browser, "sample-index", "8")
    wait_for(
        browser,
        "return document.getElementById('sample-values-label').textContent.startsWith('Sample 8 is out of range')",
    )
    assert "0 to 7" in _text(browser, "sample-values-label")
    _set(browser, "sample-index", "1")
    _set(browser, "sample-position", "12")
    wait_for(
        browser,
        "return document.getElementById('sample-values-label').textContent.startsWith('Position 12 is out of range')",
    )
    browser.execute_script("document.getElementById('sample-outlier').click()")
    wait_for(browser, f"return document.getElementById('sample-index').value === '{OUTLIER}'")
    _set(browser, "sample-position", "")
    wait_for(
        browser,
        f"return document.getElementById('sample-values-label').textContent.startsWith('sample {OUTLIER}, largest')",
    )
    _no_sideways_scroll(browser)
    # Every module's panel draws (each batch's rms range on the log axis, each channel count).
    browser.execute_script("DATA.modules.forEach((m, i) => select(i))")
    assert console_errors(browser) == []


@pytest.mark.slow
def test_the_rms_axis_of_every_module_draws(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    """Regression: a batch's rms from 0.199 to 0.366 (module "2" here) made uPlot's log
    axis count its ticks forever ("Invalid array length") when its range did not start at
    a power of ten."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 2)
    )
    x = torch.randn(4, 8)
    with track(model) as t:
        model(x).square().sum().backward()
    rms = tensor_tracker.sample_stats(t, names=["2"]).rms[0]
    assert float(rms.min()) > 0.19 and float(rms.max()) < 0.37
    path = tensor_tracker.report(t, tmp_path / "mlp.html")
    _open(browser, path, SIZES["desktop"])
    drawn = 0
    for i in range(browser.execute_script("return DATA.modules.length")):
        browser.execute_script("select(arguments[0])", i)
        # uPlot sets its scales in a microtask after it is made.
        low, high = wait_for(
            browser,
            "const u = sampleCharts.rms; return !u ? [1, 10]"
            " : u.scales.y.min !== null && [u.scales.y.min, u.scales.y.max]",
        )
        assert math.log10(low) == round(math.log10(low)) and high > low
        drawn += browser.execute_script("return sampleCharts.rms ? 1 : 0")
    assert drawn == 6  # the five layers and the model itself
    assert console_errors(browser) == []
