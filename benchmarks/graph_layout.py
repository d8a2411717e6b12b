"""The module graph as the page draws it, measured in headless Chromium: edge crossings,
edges through boxes (other than their own ends), the drawing's width and height, with the
edges that skip over repeated blocks hidden and shown; on GPT-2 (12 layers: the
transformer's level and a block's), BERT (4 layers), a ResNet-like CNN and an LSTM, at
1440x900 and 390x844. Read from the drawn SVG (boxes' rects, edges' paths sampled every
4 pixels), so it measures any layout the page draws.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/graph_layout.py [screenshot folder]
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

import tensor_tracker as tt
from tests import graph_models
from tests.browser import wait_for
from tools.chromium import offline_chromium

SIZES = {"desktop": (1440, 900), "phone": (390, 844)}


def _gpt2() -> tt.ModuleGraph:
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=12, n_head=2, n_embd=32, vocab_size=100, n_positions=64
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 100, (2, 12))
    return tt.module_graph(model, ids, attention_mask=torch.ones(2, 12, dtype=torch.long))


def _bert() -> tt.ModuleGraph:
    from tests.export.bert import bert_model

    model, ids = bert_model(4)
    return tt.module_graph(model, ids)


def _zoo(name: str) -> Callable[[], tt.ModuleGraph]:
    def build() -> tt.ModuleGraph:
        model, args, kwargs = graph_models.MODELS[name]()
        return tt.module_graph(model, *args, **kwargs)

    return build


CASES: dict[str, tuple[Callable[[], tt.ModuleGraph], list[str]]] = {
    "gpt2": (_gpt2, ["transformer#0", "transformer.h.0#0"]),
    "bert": (_bert, ["<model>#0", "encoder#0", "encoder.layer.0#0"]),
    "resnet": (_zoo("resnet"), ["<model>#0", "1#0"]),
    "lstm": (_zoo("lstm"), ["<model>#0"]),
    "transformer": (_zoo("transformer"), ["layers.0#0"]),
}


def main(shots: Path | None) -> None:
    folder = Path(tempfile.mkdtemp())
    browser = offline_chromium(1280, 900)
    try:
        for name, (build, levels) in CASES.items():
            page = tt.report(None, folder / f"{name}.html", graph=build())
            for size, (w, h) in SIZES.items():
                browser.set_window_size(w, h)
                browser.get(page.as_uri())
                wait_for(browser, "return document.body.dataset.ready === 'true'")
                for level in levels:
                    for shown in (False, True):
                        browser.execute_script(
                            "graphState.level = arguments[0]; graphState.reused = arguments[1];"
                            "document.getElementById('graph-reused-box').checked = arguments[1];"
                            "drawGraph();",
                            level,
                            shown,
                        )
                        row = {"graph": name, "level": level, "size": size, "skip_edges": shown}
                        print(
                            json.dumps(
                                row
                                | graph_models.measure(browser.execute_script(graph_models.DRAWN))
                            )
                        )
                        if shots is not None:
                            tag = f"{name}-{level.replace('#', '_').replace('<', '').replace('>', '')}"
                            browser.save_screenshot(
                                str(shots / f"{tag}-{size}-{'all' if shown else 'hidden'}.png")
                            )
    finally:
        browser.quit()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
