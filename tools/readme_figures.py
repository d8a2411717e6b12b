"""The README's figures, drawn from a real run (`./dev doc` calls this; the PNGs are
committed in doc/images/ so the README shows them anywhere). In CI (`--check`) they are drawn
into a temporary folder and compared with the committed ones, which stay as they are.

A small transformer learns a copy task for a few steps under `track`; the figures are the
scale plot (stats of every layer against the number formats), a histogram of a layer's
activations and gradients, and token trajectories through the layers (UMAP). Then the same
figures on real-size models built from code (`examples/zoo.py`): a 12-layer BERT's scale plot
grouped by block and role, a ResNet-18-like CNN's, and the gradient history of a 3-layer
`nn.TransformerEncoder` over 200 training steps. Last, the per-head max attention logit of a
GPT written in code (`examples/nanogpt.py`) over training steps, without and with QK-norm
(as in doc/Attention.ipynb).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

import tensor_tracker
from examples import zoo
from examples.nanogpt import NanoGPT
from examples.tiny_transformer import TinyTransformer, copy_task_batch
from tensor_tracker import plot, stats

OUT = Path(__file__).resolve().parent.parent / "doc" / "images"
DPI = 80

CHANGED_LEVEL = 16 / 255
"""A pixel counts as changed when a channel differs from the committed figure's by more."""

MAX_CHANGED = 0.05
"""`--check` fails when more than this fraction of a figure's pixels changed: the figure no
longer shows what the README says (another library version moving a label by a pixel or
UMAP's layout shifting slightly stays below)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=OUT, help="folder for the PNGs")
    parser.add_argument(
        "--check",
        action="store_true",
        help="draw into a temporary folder and compare with the PNGs in --out (CI)",
    )
    args = parser.parse_args(argv)
    if not args.check:
        draw(args.out)
        return 0
    with tempfile.TemporaryDirectory() as folder:
        drawn = draw(Path(folder))
        problems = [p for name in drawn if (p := compare(Path(folder) / name, args.out / name))]
    if problems:
        print(
            "README figures differ from the committed ones:\n  "
            + "\n  ".join(problems)
            + "\nIf the change is meant, run `./dev doc` (or python -m tools.readme_figures) "
            "outside CI and commit doc/images/.",
            file=sys.stderr,
        )
        return 1
    return 0


def compare(drawn: Path, committed: Path) -> str | None:
    """Why `drawn` does not match the committed figure (None when it does), after printing
    how much they differ."""
    from matplotlib import image

    if not committed.exists():
        return f"{committed.name}: not committed in {committed.parent}"
    new, old = image.imread(drawn), image.imread(committed)
    if new.shape != old.shape:
        return (
            f"{committed.name}: {new.shape[1]}x{new.shape[0]} px drawn, "
            f"{old.shape[1]}x{old.shape[0]} px committed"
        )
    if float(new[..., :3].std()) < 0.01:
        return f"{committed.name}: the drawn figure is blank"
    changed = float((abs(new - old) > CHANGED_LEVEL).any(axis=-1).mean())
    print(f"{committed.name}: {new.shape[1]}x{new.shape[0]} px, {changed:.2%} of pixels changed")
    if changed > MAX_CHANGED:
        return f"{committed.name}: {changed:.1%} of its pixels changed (at most {MAX_CHANGED:.0%})"
    return None


def draw(out: Path) -> list[str]:
    """Draw the figures as PNGs in `out`; returns their file names."""
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
    figures.update(at_scale())
    figures["attention_logits.png"] = attention_logits()
    for name, figure in figures.items():
        figure.savefig(out / name, dpi=DPI)
        print(f"{out / name}: {(out / name).stat().st_size / 1024:.0f} KiB")
    print(f"README figures in {time.perf_counter() - start:.1f} s")
    return list(figures)


def at_scale() -> dict[str, Any]:
    """Figures of the models of `examples/zoo.py` (#16: readable at 200+ modules)."""
    bert = zoo.bert()
    ids = torch.randint(0, 100, (4, 16), generator=torch.Generator().manual_seed(0))
    with tensor_tracker.track(bert, stats=True) as bert_stats:
        torch.autograd.backward(bert(ids).last_hidden_state.pow(2).mean())
    resnet = zoo.ResNet18()
    images = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with tensor_tracker.track(resnet, stats=True) as resnet_stats:
        torch.autograd.backward(F.cross_entropy(resnet(images), torch.arange(4)))
    encoder = zoo.encoder()
    x = torch.randn(8, 12, 16, generator=torch.Generator().manual_seed(0))
    opt = torch.optim.Adam(encoder.parameters(), lr=1e-3)
    with tensor_tracker.track(encoder, stats=True) as history:
        for _ in range(200):
            torch.autograd.backward(encoder(x).sin().pow(2).mean())
            opt.step()
            opt.zero_grad()
            history.step()
    return {
        "bert_scale_plot.png": plot.scale_plot(bert_stats),
        "resnet_scale_plot.png": plot.scale_plot(resnet_stats),
        "encoder_history.png": plot.history(history, grad=True, leaves=True),
    }


def attention_logits(steps: int = 40) -> Any:
    """The largest attention logit of each head over `steps` Adam steps (lr 0.02) of a
    2-layer GPT on the copy task, recorded by `ops=` and `stats.attention_logits()`:
    without QK-norm and with it, from the same weights and batches."""
    from matplotlib import pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3), sharey=True)
    for ax, qk_norm in zip(axes, (False, True), strict=True):
        torch.manual_seed(0)
        model = NanoGPT(
            vocab=32, d_model=64, n_heads=4, n_layers=2, max_len=32, sdpa=True, qk_norm=qk_norm
        )
        opt = torch.optim.Adam(model.parameters(), lr=2e-2)
        gen = torch.Generator().manual_seed(0)
        spec = [stats.attention_logits()]
        with tensor_tracker.track(
            model, ops="scaled_dot_product_attention", stats=spec, include=r"attn$", grad=False
        ) as t:
            for _ in range(steps):
                tokens, targets = copy_task_batch(batch=16, seq=32, vocab=32, generator=gen)
                loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
                torch.autograd.backward(loss)
                opt.step()
                opt.zero_grad()
                t.step()
        frame = t.to_frame()
        ops = frame[frame["kind"] == "op"].groupby("name")
        for (name, rows), style in zip(ops, ("-", "--"), strict=True):
            logits = np.stack(rows["max_logit_per_head"].to_numpy())  # [steps, heads]
            for head in range(logits.shape[1]):
                ax.plot(logits[:, head], style, color=f"C{head}", label=f"{name} head {head}")
        ax.set_title("QK-norm" if qk_norm else "no QK-norm", fontsize=10)
        ax.set_xlabel("step")
    axes[0].set_ylabel("max attention logit")
    axes[0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    sys.exit(main())
