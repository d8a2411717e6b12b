"""`./dev demo` (or `python -m examples.demo` from the repository root): train a small transformer under `track`
and print where activations and gradients sit on a log2 scale, per module."""

from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn.functional as F

from examples.tiny_transformer import TinyTransformer, copy_task_batch
from tensor_tracker import track
from tensor_tracker.stats.formats import FORMATS


def _bar(log2_value: float, lo: float = -24.0, hi: float = 8.0, width: int = 32) -> str:
    """A text gauge: where log2_value falls between 2^lo and 2^hi."""
    if not math.isfinite(log2_value):
        return "!" * width
    pos = round((min(max(log2_value, lo), hi) - lo) / (hi - lo) * (width - 1))
    return "·" * pos + "█" + "·" * (width - 1 - pos)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--d-model", type=int, default=64)
    args = parser.parse_args(argv)
    import pandas as pd

    torch.manual_seed(0)
    vocab = 32
    model = TinyTransformer(vocab=vocab, d_model=args.d_model, n_layers=args.layers)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    losses = []
    start = time.perf_counter()
    with track(model, stats=True, every=5) as tracker:
        for _ in range(args.steps):
            tokens, targets = copy_task_batch(16, 32, vocab, generator)
            loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
            tracker.step()
    elapsed = time.perf_counter() - start

    df = tracker.to_frame()
    last = df[df.step == df.step.max()]
    table = last.pivot_table(index="name", columns="grad", values="rms", aggfunc="mean", sort=False)
    table.columns = ["activation rms", "gradient rms"]
    table.index = [name or "<model>" for name in table.index]
    print(
        f"tensor_tracker demo: {args.layers}-layer transformer (d_model={args.d_model}), "
        f"{args.steps} Adam steps in {elapsed:.1f}s, recorded every 5th step with stats=True\n"
        f"loss {losses[0]:.3f} -> {losses[-1]:.3f}; {len(df)} stashes, {tracker.nbytes:,} bytes held\n"
    )
    print(
        f"Scales at step {int(last.step.max())} (rows in execution order; log2 gauge 2^-24 .. 2^8):"
    )
    rows = []
    for name, (act, grad) in table.iterrows():
        rows.append(
            {
                "module": name,
                "act rms": f"{act:.3g}",
                "act log2": _bar(math.log2(act) if act > 0 else -math.inf),
                "grad rms": f"{grad:.3g}",
                "grad log2": _bar(math.log2(grad) if grad > 0 else -math.inf),
            }
        )
    with pd.option_context("display.max_rows", None, "display.width", 200):
        print(pd.DataFrame(rows).to_string(index=False))
    fp16 = FORMATS["fp16"]
    small = table[table["gradient rms"] < fp16.min_normal].index.tolist()
    print(
        f"\nGradients with rms below float16's smallest normal ({fp16.min_normal:.3g}): "
        f"{', '.join(small) if small else 'none'}."
    )
    history = df[df.grad & (df.name == "head")][["step", "rms"]].to_string(index=False)
    print(f"\nThe head's gradient rms over the run (tracker.to_frame() has every step):\n{history}")


if __name__ == "__main__":
    main()
