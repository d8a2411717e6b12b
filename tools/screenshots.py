"""Screenshots of what a user sees on the 12-layer BERT run of issue #28, for any checkout.

Run it with `PYTHONPATH` pointing at the checkout to picture (its `tensor_tracker` is the
one imported, also by the notebook kernel)::

    PYTHONPATH=/path/to/checkout .venv/bin/python tools/screenshots.py --out shots/before

It records the run of `tests/export/bert.py` (a `BertModel` of 12 layers from a
`transformers.BertConfig`, hidden size 32, 215 recorded module names, 30 Adam steps, outputs and
parameters with the default statistics plus fractions, counts and a histogram, the loss
logged every step and a note at step 12). The builder is carried here, using only API that
older checkouts have too, so that every checkout is pictured on the same run. Then:

- `report.html` (`tensor_tracker.report`) and `graph_view.html` (`graph_view(...).save`)
  are opened in headless Chromium (Debian's chromium and chromedriver, via Selenium) at
  1440x900 and 390x844: a shot of the first screen, a shot of the whole page (the window
  grown to the page's height, up to `--max-height`), and, after picking a module
  (`encoder.layer.0.attention.self.query`), the first screen and the whole page again;
- the five notebook viewers (`histogram_viewer`, `scale_viewer`, `umap_viewer`,
  `history_viewer`, `live_view` of the same model streamed to disk) are run in a notebook in
  JupyterLab and each output is shot as it shows in the page, controls included (side
  panels collapsed, one document; the window grown to each viewer's height, as an element's
  shot holds only what is on the screen). Without JupyterLab (or with `--figures-only`) each viewer's figure is saved instead, and
  `viewers/NOTE.txt` says that the controls are not shown.

`shots.json` in `--out` lists every picture with the page's size (scroll width and height
against the window), the console errors, and each page's weight in bytes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SIZES = {"desktop": (1440, 900), "phone": (390, 844)}
STEPS = 30
NOTE_STEP = 12
VIEWERS = ("histogram_viewer", "scale_viewer", "umap_viewer", "history_viewer", "live_view")
# The module picked in the pages for the "selected" shots: deep in the model, with a long name.
PICK = "encoder.layer.0.attention.self.query"
TOKEN = "tensor-tracker-shots"


def bert_model() -> tuple[Any, Any]:
    """A `BertModel` of 12 layers (hidden size 32) and a batch of token ids, as in
    tests/export/bert.py (same configuration and seed)."""
    import torch
    import transformers

    torch.manual_seed(0)
    settings: dict[str, Any] = {
        "vocab_size": 512,
        "hidden_size": 32,
        "num_hidden_layers": 12,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        "attn_implementation": "eager",
    }
    config = transformers.BertConfig(**settings)
    return transformers.BertModel(config), torch.randint(0, 512, (4, 16))


def bert_spec() -> list[Any]:
    """tests/export/bert.py's statistics: the defaults, fractions and counts, a histogram."""
    from tensor_tracker import stats

    return [
        *stats.DEFAULT,
        "abs_mean",
        "nonfinite",
        "zero_frac",
        "fp16_overflow",
        "fp16_underflow",
        "bf16_underflow",
        stats.histogram(bins=48),
    ]


def bert_run(stream_to: str | None = None) -> tuple[Any, Any]:
    """30 Adam steps of the BERT under `track` (outputs and parameters), the loss logged
    every step and a note at step 12; returns the tracker and the module graph. With
    `stream_to`, the run is streamed there with `stats=True` (for `live_view`)."""
    import torch

    import tensor_tracker

    model, ids = bert_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    options: dict[str, Any] = (
        {"stats": True, "stream_to": stream_to}
        if stream_to
        else {"stats": bert_spec(), "capture": ("outputs", "params")}
    )
    with tensor_tracker.track(model, **options) as t:
        for step in range(STEPS):
            hidden = model(ids).last_hidden_state
            loss = (hidden[:, 0] - 1.0).square().mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            t.log("loss", loss)
            if step == NOTE_STEP:
                t.note("learning rate lowered")
            t.step()
    return t, tensor_tracker.module_graph(model, ids)


def chromium(width: int, height: int) -> Any:
    """A headless Chromium (Selenium) with its console log kept, offline
    (`tools/chromium.py`)."""
    offline = _sibling("chromium")
    reason = offline.missing()
    if reason is not None:
        raise SystemExit(reason)
    driver = offline.offline_chromium(width, height, "--hide-scrollbars")
    driver.set_page_load_timeout(120)
    return driver


def wait_for(browser: Any, script: str, timeout: float, *args: Any) -> Any:
    """The first truthy value of `script` in the page, polled; `None` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = browser.execute_script(script, *args)
        if value:
            return value
        time.sleep(0.25)
    return None


def console_errors(browser: Any) -> list[str]:
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def set_viewport(browser: Any, width: int, height: int) -> None:
    """Resize the window so that the page's viewport is `width` x `height` (the window's
    frame is measured and added)."""
    browser.set_window_size(width, height)
    inner = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    browser.set_window_size(2 * width - inner[0], 2 * height - inner[1])


def page_size(browser: Any) -> dict[str, int]:
    return dict(
        browser.execute_script(
            "const d = document.documentElement, b = document.body;"
            "return {innerWidth: window.innerWidth, innerHeight: window.innerHeight,"
            " scrollWidth: Math.max(d.scrollWidth, b.scrollWidth),"
            " scrollHeight: Math.max(d.scrollHeight, b.scrollHeight)};"
        )
    )


# Picks the module `arguments[0]` (a name's tail): a graph node first (clicked through its
# rect, as a user would), else the module list's entry; returns what was clicked.
_PICK = """
const tail = arguments[0];
const nodes = [...document.querySelectorAll('#graph-svg g.node')];
const node = nodes.find(n => (n.dataset.id || '').includes(tail))
  || nodes.find(n => /encoder/.test(n.dataset.id || '') && !/input|output/.test(n.dataset.id));
const items = [...document.querySelectorAll('#modules li')];
const item = items.find(li => (li.dataset.name || li.title || li.textContent).includes(tail));
const target = item || node;
if (!target) return null;
target.scrollIntoView({block: 'center'});
const el = target.querySelector('rect') || target;
el.dispatchEvent(new MouseEvent('click', {bubbles: true}));
return (target.dataset.id || target.dataset.name || target.textContent).slice(0, 80);
"""


def shoot_page(
    browser: Any, html: Path, name: str, out: Path, max_height: int
) -> list[dict[str, Any]]:
    """Shots of `html` at every size: first screen, whole page, first screen after a pick."""
    taken = []
    for size, (width, height) in SIZES.items():
        set_viewport(browser, width, height)
        console_errors(browser)
        browser.get(html.resolve().as_uri())
        wait_for(browser, "return document.body && document.body.dataset.ready === 'true'", 60)
        time.sleep(1.0)  # a redraw on the next animation frame or a resize observer
        info: dict[str, Any] = {"page": name, "size": size, **page_size(browser)}
        first = out / f"{name}-{size}.png"
        browser.save_screenshot(str(first))
        full_height = min(max(info["scrollHeight"], height), max_height)
        set_viewport(browser, width, full_height)
        time.sleep(0.5)
        full = out / f"{name}-{size}-full.png"
        browser.save_screenshot(str(full))
        set_viewport(browser, width, height)
        browser.execute_script("window.scrollTo(0, 0)")
        picked = browser.execute_script(_PICK, PICK)
        time.sleep(1.0)
        selected = out / f"{name}-{size}-selected.png"
        browser.execute_script("window.scrollTo(0, 0)")
        browser.save_screenshot(str(selected))
        selected_height = min(max(page_size(browser)["scrollHeight"], height), max_height)
        set_viewport(browser, width, selected_height)
        time.sleep(0.5)
        selected_full = out / f"{name}-{size}-selected-full.png"
        browser.save_screenshot(str(selected_full))
        info.update(
            first_screen=first.name,
            full_page=full.name,
            full_page_height=full_height,
            selected=selected.name,
            selected_full=selected_full.name,
            picked=picked,
            after_pick=page_size(browser),
            console_errors=console_errors(browser),
        )
        taken.append(info)
        print(f"{name} {size}: {info['scrollWidth']}x{info['scrollHeight']} page", flush=True)
    return taken


def _cell(source: str) -> dict[str, Any]:
    lines = source.strip().splitlines(keepends=True)
    return {
        "cell_type": "code",
        "metadata": {},
        "outputs": [],
        "execution_count": None,
        "source": lines,
    }


def viewer_notebook(folder: Path, stream: Path) -> Path:
    """A notebook that records the run and shows the five viewers, one per cell."""
    shutil.copy(__file__, folder / "tt_shots.py")
    cells = [
        _cell(
            "import tensor_tracker\n"
            "from tensor_tracker import widgets\n"
            "from tt_shots import bert_run\n"
            "t, graph = bert_run()\n"
            "print(tensor_tracker.__file__)"
        ),
        _cell("widgets.histogram_viewer(t)"),
        _cell("widgets.scale_viewer(t)"),
        _cell("widgets.umap_viewer(t)"),
        _cell("widgets.history_viewer(t)"),
        _cell(f"view = widgets.live_view({str(stream)!r}, start=False)\nview.refresh()\nview"),
    ]
    notebook = {
        "cells": cells,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = folder / "viewers.ipynb"
    path.write_text(json.dumps(notebook, indent=1))
    return path


def _jupyterlab() -> Any:
    """tools/jupyterlab.py of this checkout (see `_sibling`)."""
    return _sibling("jupyterlab")


def _sibling(name: str) -> Any:
    """tools/<name>.py of this checkout, loaded by path: `PYTHONPATH` may name another
    checkout, whose `tools` package can be older."""
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_tt_shots_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def start_lab(folder: Path, checkout: str) -> tuple[subprocess.Popen[bytes], str]:
    """JupyterLab over `folder`, its kernels importing `checkout`'s tensor_tracker."""
    env = {
        "PYTHONPATH": checkout,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    }
    process, base = _jupyterlab().start_lab(folder, folder / "nb", TOKEN, env, timeout=120)
    return process, base


_RUN_STATE = """
const nb = window.jupyterapp.shell.currentWidget;
const code = nb.content.widgets.filter(c => c.model.type === 'code');
const errors = [];
code.forEach((c, i) => {
  for (let k = 0; k < c.model.outputs.length; k++) {
    const o = c.model.outputs.get(k).toJSON();
    if (o.output_type === 'error') errors.push(`cell ${i}: ${o.ename}: ${o.evalue}`);
  }
});
const done = code.every(c => c.model.executionCount !== null);
return (errors.length || (done && nb.sessionContext.session.kernel.status === 'idle'))
  ? {errors} : null;
"""

# The output area of code cell `arguments[0]`, once it shows a figure or a message.
_OUTPUT = """
const nb = window.jupyterapp.shell.currentWidget;
const cell = nb.content.widgets.filter(c => c.model.type === 'code')[arguments[0]];
const area = cell.node.querySelector('.jp-Cell-outputArea') || cell.node;
const text = area.textContent;
const ready = area.querySelector('img') || (area.querySelector('.widget-vbox')
  && !/Loading widget/.test(text) && text.trim().length > 0);
return ready ? area : null;
"""


def shoot_viewers(out: Path, checkout: str, stream: Path, timeout: float) -> list[dict[str, Any]]:
    """The five viewers in JupyterLab, each output shot at both sizes."""
    taken: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tt-shots-lab-") as tmp:
        folder = Path(tmp)
        (folder / "nb").mkdir()
        viewer_notebook(folder / "nb", stream)
        process, base = start_lab(folder, checkout)
        browser = chromium(*SIZES["desktop"])
        try:
            browser.get(f"{base}/lab/tree/viewers.ipynb?token={TOKEN}")
            opened = wait_for(
                browser,
                "const w = window.jupyterapp?.shell.currentWidget;"
                "return !!(w?.content?.widgets && w.sessionContext?.session?.kernel"
                " && w.sessionContext.session.kernel.status === 'idle');",
                180,
            )
            if not opened:
                raise RuntimeError("the notebook did not open with an idle kernel")
            console_errors(browser)
            browser.execute_script("window.jupyterapp.commands.execute('notebook:run-all-cells')")
            state = wait_for(browser, _RUN_STATE, timeout)
            if state is None or state["errors"]:
                raise RuntimeError(f"the notebook did not run: {state}")
            time.sleep(2.0)
            for size, (width, height) in SIZES.items():
                set_viewport(browser, width, height)
                # The notebook alone, as on a small screen: no side panels, one document.
                browser.execute_script(
                    "const s = window.jupyterapp.shell; s.collapseLeft(); s.collapseRight();"
                    "s.mode = 'single-document';"
                )
                time.sleep(1.5)
                for index, name in enumerate(VIEWERS, start=1):
                    area = wait_for(browser, _OUTPUT, 60, index)
                    if area is None:
                        raise RuntimeError(f"{name} shows nothing")
                    # A taller window for a tall viewer: an element's shot holds only what
                    # is on the screen.
                    tall = browser.execute_script(
                        "return arguments[0].getBoundingClientRect().height", area
                    )
                    set_viewport(browser, width, min(max(height, int(tall) + 120), 6000))
                    time.sleep(0.5)
                    browser.execute_script("arguments[0].scrollIntoView()", area)
                    time.sleep(0.5)
                    file = out / "viewers" / f"{name}-{size}.png"
                    area.screenshot(str(file))
                    box = browser.execute_script(
                        "const r = arguments[0].getBoundingClientRect();"
                        "return {width: r.width, height: r.height,"
                        " scrollWidth: arguments[0].scrollWidth, text: arguments[0].innerText.slice(0, 400)};",
                        area,
                    )
                    taken.append({"viewer": name, "size": size, "file": file.name, **box})
                    print(f"{name} {size}: {box['width']:.0f}x{box['height']:.0f}", flush=True)
            for entry in taken:
                entry["console_errors"] = []
            if taken:
                taken[-1]["console_errors"] = console_errors(browser)
        finally:
            browser.quit()
            _jupyterlab().stop_lab(process)
    return taken


def save_viewer_figures(out: Path, tracker: Any, stream: Path) -> list[dict[str, Any]]:
    """Each viewer's figure(s) as PNG, when JupyterLab is not used: no controls shown."""
    from tensor_tracker import widgets

    taken = []
    for name in VIEWERS:
        if name == "live_view":
            viewer = widgets.live_view(str(stream), start=False)
            viewer.refresh()
        else:
            viewer = getattr(widgets, name)(tracker)
        figures = [
            getattr(viewer, a) for a in dir(viewer) if "figure" in a and not a.startswith("_")
        ]
        figures = [f for f in figures if hasattr(f, "savefig")]
        message = getattr(getattr(viewer, "message", None), "value", "")
        for k, figure in enumerate(figures):
            file = out / "viewers" / f"{name}{'' if k == 0 else f'-{k}'}.png"
            figure.savefig(file, dpi=80)
            taken.append({"viewer": name, "file": file.name, "message": message})
        if not figures:
            taken.append({"viewer": name, "file": None, "message": message})
    (out / "viewers" / "NOTE.txt").write_text(
        "These are the viewers' matplotlib figures only: the controls around them are not shown "
        "(JupyterLab was not used).\n"
    )
    return taken


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the pictures")
    parser.add_argument(
        "--figures-only",
        action="store_true",
        help="save the viewers' figures instead of running them in JupyterLab",
    )
    parser.add_argument(
        "--max-height", type=int, default=8000, help="tallest whole-page shot, in pixels"
    )
    parser.add_argument(
        "--lab-timeout", type=float, default=900, help="seconds the viewers' notebook may run"
    )
    args = parser.parse_args(argv)

    import tensor_tracker

    checkout = str(Path(tensor_tracker.__file__).resolve().parent.parent)
    out: Path = args.out
    (out / "viewers").mkdir(parents=True, exist_ok=True)
    print(f"tensor_tracker from {checkout}", flush=True)
    manifest: dict[str, Any] = {
        "tensor_tracker": tensor_tracker.__file__,
        "commit": _commit(checkout),
    }

    started = time.monotonic()
    tracker, graph = bert_run()
    stream = out / "stream"
    if stream.exists():
        shutil.rmtree(stream)
    bert_run(stream_to=str(stream))
    manifest["modules"] = int(tracker.to_frame()["name"].nunique())
    manifest["run_seconds"] = round(time.monotonic() - started, 1)
    report = Path(tensor_tracker.report(tracker, out / "report.html", graph=graph))
    view = Path(tensor_tracker.graph_view(graph, tracker).save(out / "graph_view.html"))
    manifest["page_bytes"] = {p.name: p.stat().st_size for p in (report, view)}

    browser = chromium(*SIZES["desktop"])
    try:
        manifest["pages"] = [
            *shoot_page(browser, report, "report", out, args.max_height),
            *shoot_page(browser, view, "graph_view", out, args.max_height),
        ]
    finally:
        browser.quit()

    lab = not args.figures_only and _has_lab()
    if lab:
        try:
            manifest["viewers"] = shoot_viewers(out, checkout, stream, args.lab_timeout)
            manifest["viewers_in"] = "jupyterlab"
        except RuntimeError as error:
            print(f"JupyterLab failed ({error}); saving the figures instead", flush=True)
            lab = False
    if not lab:
        manifest["viewers"] = save_viewer_figures(out, tracker, stream)
        manifest["viewers_in"] = "figures"
    (out / "shots.json").write_text(json.dumps(manifest, indent=1, default=str))
    print(f"done: {out}", flush=True)
    return 0


def _has_lab() -> bool:
    import importlib.util

    return importlib.util.find_spec("jupyterlab") is not None


def _commit(checkout: str) -> str | None:
    try:
        return subprocess.run(
            ["git", "-C", checkout, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


if __name__ == "__main__":
    sys.exit(main())
