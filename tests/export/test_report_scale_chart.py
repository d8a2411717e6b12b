"""The report's scale chart in headless Chromium at desktop (1440x900) and phone (390x844)
sizes: x labelled by block as `scale_plot` groups modules, gradients drawn as the squares
the hint names, points beyond float16's range ringed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import tensor_tracker
from examples.tiny_transformer import TinyTransformer
from tensor_tracker.stats.formats import FORMATS
from tests.browser import browser, console_errors  # noqa: F401  (the fixture)
from tests.export.test_report_pages import SIZES, _folder, _hover, _open, _scale_point
from tests.helpers import batch

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("size", list(SIZES), ids=list(SIZES))
def test_the_scale_chart_is_labelled_by_block_and_marks_the_format_limits(
    browser: Any,  # noqa: F811
    size: str,
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By

    torch.manual_seed(0)
    model = TinyTransformer(vocab=16, d_model=16, n_layers=4)
    with tensor_tracker.track(model, stats=["rms", "abs_max"]) as t:
        for _ in range(2):
            # A loss this small leaves gradients below float16's smallest subnormal.
            (model(batch()).square().mean() * 1e-9).backward()
            t.step()
    path = tensor_tracker.report(t, tmp_path / "scale.html")
    _open(browser, path, SIZES[size])
    labels = browser.execute_script("return scalePlot.axes[0]._values")
    assert {"blocks.0", "blocks.3"} <= set(labels) and not any("#" in x for x in labels), labels
    over, x, y = _scale_point(browser, "blocks.2.mlp.up")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", over)
    _hover(browser, over, x, y)
    readout = browser.find_element(By.ID, "scale-readout").text
    assert readout.startswith("blocks.2.mlp.up (Linear) · block blocks.2, role mlp.up · step 1")
    # Rings: every output and gradient rms at the step beyond float16's range.
    frame = t.to_frame()
    rms = frame[(frame["step"] == 1) & (frame["kind"] == "output")].groupby(["name", "grad"])
    values = rms["rms"].mean().abs()
    fp16 = FORMATS["fp16"]
    beyond = int(((values > fp16.max) | ((values > 0) & (values < fp16.min_subnormal))).sum())
    assert beyond > 0
    hint = browser.find_element(By.ID, "scale-hint").text
    assert f"Ringed in red: beyond float16's range ({beyond} points" in hint
    # A gradient is a square: the orange it paints covers its box of side 2r (a circle
    # of radius r would cover pi/4 of it, 79%).
    painted, side = browser.execute_script(
        "const u = scalePlot, i = DATA.modules.findIndex((m) => m.name === 'blocks.0.attn.out');"
        "const r = (innerWidth < 600 ? 2.5 : 3) * devicePixelRatio;"
        "const x = u.valToPos(i, 'x', true), y = u.valToPos(u.data[2][i], 'y', true);"
        "const d = u.ctx.getImageData(Math.floor(x - r) - 2, Math.floor(y - r) - 2, 2 * r + 5, 2 * r + 5).data;"
        "let sum = 0;"
        "for (let k = 0; k < d.length; k += 4) if (d[k] > 200 && d[k + 1] > 90 && d[k + 1] < 150 && d[k + 2] < 60) sum += d[k + 3] / 255;"
        "return [sum, 2 * r];"
    )
    assert painted > 0.93 * side**2, (painted, side)
    assert console_errors(browser) == []
    browser.save_screenshot(str(_folder(tmp_path) / f"scale_chart_{size}.png"))
