"""A training script that streams its recording to disk (`python -m examples.stream_run
runs/copy-task` from the repository root), then reads it back as another process or a
notebook would: statistics of every module every fifth step, the loss of every step, a note,
a diagnosis, and the HTML report (`<path>/report.html`, one file that opens from disk;
`python -m tensor_tracker view <path>` writes and opens it too).

While it runs, `tensor_tracker.load("runs/copy-task")` in a notebook shows the steps written
so far; memory stays flat however long the run is, and a killed run loses at most the step
being written.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import tensor_tracker
from examples.tiny_transformer import TinyTransformer, copy_task_batch


def train(path: Path, steps: int, every: int) -> None:
    """Train the tiny transformer on the copy task, streaming statistics to `path`."""
    torch.manual_seed(0)
    model = TinyTransformer(vocab=32, d_model=32, n_layers=2)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    with tensor_tracker.track(
        model, stats=tensor_tracker.diagnosis_stats, every=every, stream_to=path
    ) as t:
        for step in range(steps):
            tokens, targets = copy_task_batch(batch=16, seq=32, vocab=32, generator=generator)
            logits = model(tokens)
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            optimizer.zero_grad()
            t.log("loss", loss)  # every step, also those every= does not record
            if step == steps // 2:
                for group in optimizer.param_groups:
                    group["lr"] /= 2
                t.note("learning rate halved")
            t.step()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path", type=Path, help="a new directory for the recording")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--every", type=int, default=5)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    train(args.path, args.steps, args.every)
    print(f"trained {args.steps} steps in {time.perf_counter() - start:.1f} s -> {args.path}")

    run = tensor_tracker.load(args.path)
    frame = run.to_frame()
    logged = run.log_frame()
    size = sum(f.stat().st_size for f in args.path.rglob("*") if f.is_file())
    print(f"{len(run):,} records of {frame['step'].nunique()} steps, {size / 1e3:.0f} kB on disk")
    losses = logged.dropna(subset=["name"])
    print(f"loss {losses['value'].iloc[0]:.2f} -> {losses['value'].iloc[-1]:.2f}")
    print("notes:", logged["text"].dropna().tolist())
    print(tensor_tracker.diagnose(run, loss=losses.set_index("step")["value"].to_dict()))
    page = tensor_tracker.report(run, args.path / "report.html")
    print(f"report: {page} ({page.stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()
