"""The README's figures, drawn from a real run (`./dev doc` calls this; the PNGs are
committed in doc/images/ so the README shows them anywhere).

A small transformer learns a copy task for a few steps under `track`; the figures are the
scale plot (stats of every layer against the number formats), a histogram of a layer's
activations and gradients, and token trajectories through the layers (UMAP).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import tensor_tracker
from examples.tiny_transformer import TinyTransformer, copy_task_batch
from tensor_tracker import plot

OUT = Path(__file__).resolve().parent.parent / "doc" / "images"
DPI = 80


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=OUT, help="folder for the PNGs")
    out = parser.parse_args(argv).out
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    torch.manual_seed(0)
    model = TinyTransformer(vocab=32, d_model=64, n_layers=3)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(30):  # trained a little, so the figures show a model that learns
        tokens, targets = copy_task_batch(batch=16, seq=24, vocab=32, generator=gen)
        loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
        torch.autograd.backward(loss)
        opt.step()
        opt.zero_grad()
    tokens, targets = copy_task_batch(batch=4, seq=24, vocab=32, generator=gen)

    def batch_loss() -> torch.Tensor:
        return F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())

    with tensor_tracker.track(model, stats=True) as stats:
        torch.autograd.backward(batch_loss())
    with tensor_tracker.track(model, include=r"^blocks\.\d+$|mlp\.act$") as full:
        torch.autograd.backward(batch_loss())
    model.zero_grad()

    figures = {
        "scale_plot.png": plot.scale_plot(stats),
        "histogram.png": plot.histogram(
            [s for s in full if s.name == "blocks.1.mlp.act"], log2=True
        ),
        "umap.png": plot.umap_plot(full, layers=r"^blocks\.\d+$", tokens=range(24)),
    }
    for name, figure in figures.items():
        figure.savefig(out / name, dpi=DPI)
        print(f"{out / name}: {(out / name).stat().st_size / 1024:.0f} KiB")
    print(f"README figures in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
