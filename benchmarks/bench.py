"""Overhead of tracking a transformer encoder's training step (`./dev bench`).

One CPU thread, one process. Untracked and tracked steps are interleaved in rounds; each
configuration's ratio is (median tracked step time) / (median untracked step time of the
same round), and the table shows the median ratio over rounds. A plain implementation of the
contract (full-backward-pre hooks + `.detach().cpu().clone()`), written below, is measured on
the same workload for comparison. Results: doc/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
import torch
from torch import Tensor, nn

import tensor_tracker
from tensor_tracker import Stash, rmap_tensor, stats
from tensor_tracker.frame import type_name

# -- the plain reference implementation of the contract ------------------------------------


class PlainTracker:
    """What a straightforward implementation of ../shared/API.md does."""

    def __init__(self, stash_value: Callable[[Tensor], Any]) -> None:
        self.stash_value = stash_value
        self.stashes: list[Stash] = []
        self.handles: list[Any] = []

    def register_all(self, model: nn.Module, grad: bool) -> None:
        for name, module in model.named_modules():
            self.handles.append(module.register_forward_hook(self._forward(name)))
            if grad:
                self.handles.append(module.register_full_backward_pre_hook(self._backward(name)))

    def _forward(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            value = rmap_tensor(output, self.stash_value)
            self.stashes.append(Stash(name, type(module), False, value))

        return hook

    def _backward(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, grad_output: Any) -> None:
            value = rmap_tensor(grad_output, self.stash_value)
            self.stashes.append(Stash(name, type(module), True, value))

        return hook

    def to_frame(self) -> pd.DataFrame:
        rows = []
        for s in self.stashes:
            value = s.first_value
            std = value.std().item() if isinstance(value, Tensor) else None
            rows.append({"name": s.name, "type": type_name(s.type), "grad": s.grad, "std": std})
        return pd.DataFrame.from_records(rows)

    def __enter__(self) -> PlainTracker:
        return self

    def __exit__(self, *_: object) -> None:
        for handle in self.handles:
            handle.remove()


def plain(model: nn.Module, grad: bool, stash_value: Callable[[Tensor], Any]) -> PlainTracker:
    tracker = PlainTracker(stash_value)
    tracker.register_all(model, grad)
    return tracker


def plain_copy(t: Tensor) -> Tensor:
    return t.detach().cpu().clone()


def plain_std(t: Tensor) -> Tensor:
    return t.detach().std()


# -- workload ----------------------------------------------------------------------------


def make_model(d_model: int, layers: int) -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(
        d_model, 8, 4 * d_model, dropout=0.0, batch_first=True, norm_first=True
    )
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


def train_step(model: nn.Module, x: Tensor) -> None:
    model.zero_grad(set_to_none=True)
    model(x).square().mean().backward()


Factory = Callable[[nn.Module], contextlib.AbstractContextManager[Any]]


def configurations() -> dict[str, tuple[Factory, str]]:
    return {
        "forward only, full copies": (
            lambda m: tensor_tracker.track(m, grad=False),
            "<= 1.05",
        ),
        "  plain reference": (lambda m: plain(m, False, plain_copy), ""),
        "forward+grad, full copies": (lambda m: tensor_tracker.track(m), "<= 1.15"),
        "  plain reference ": (lambda m: plain(m, True, plain_copy), ""),
        "forward+grad, stats=True": (
            lambda m: tensor_tracker.track(m, stats=True),
            "<= 1.10",
        ),
        "  plain reference, stash_value=std": (lambda m: plain(m, True, plain_std), ""),
    }


def timed_steps(
    model: nn.Module, x: Tensor, steps: int, context: contextlib.AbstractContextManager[Any]
) -> tuple[list[float], int, int]:
    """Median-able step times, plus stashes and bytes held after one step."""
    times = []
    stashes = nbytes = 0
    with context as tracker:
        for i in range(steps + 1):  # the first step warms up (allocator, caches)
            if tracker is not None:
                tracker_stashes = getattr(tracker, "stashes", [])
                tracker_stashes.clear()
            start = time.perf_counter()
            train_step(model, x)
            elapsed = time.perf_counter() - start
            if i:
                times.append(elapsed)
            if tracker is not None:
                stashes = len(tracker.stashes)
                if isinstance(tracker, tensor_tracker.Tracker):
                    nbytes = tracker.nbytes
    return times, stashes, nbytes


def overhead_table(
    d_model: int, layers: int, batch: int, seq: int, rounds: int, steps: int
) -> None:
    model = make_model(d_model, layers)
    x = torch.randn(batch, seq, d_model)
    configs = configurations()
    ratios: dict[str, list[float]] = {name: [] for name in configs}
    info: dict[str, tuple[int, int]] = {}
    base_times: list[float] = []
    for _ in range(rounds):
        for name, (factory, _) in configs.items():
            base, _, _ = timed_steps(model, x, steps, contextlib.nullcontext())
            tracked, n, nbytes = timed_steps(model, x, steps, factory(model))
            base_times.append(statistics.median(base))
            ratios[name].append(statistics.median(tracked) / statistics.median(base))
            info[name] = (n, nbytes)
    print(
        f"\n## Transformer encoder: d_model={d_model}, {layers} layers, batch {batch} x seq {seq}, "
        f"1 thread; untracked step {1e3 * statistics.median(base_times):.1f} ms; "
        f"median of {rounds} rounds x {steps} steps\n"
    )
    print("| configuration | tracked / untracked | target | stashes/step | bytes held/step |")
    print("|---|---|---|---|---|")
    for name, (_, target) in configs.items():
        ratio = statistics.median(ratios[name])
        n, nbytes = info[name]
        verdict = ""
        if target:
            verdict = " (met)" if ratio <= float(target.split()[-1]) else " (MISSED)"
        held = f"{nbytes:,}" if nbytes else "-"
        print(f"| {name.strip()} | {ratio:.3f}x | {target}{verdict} | {n} | {held} |")


def frame_throughput(steps: int) -> None:
    model = make_model(128, 2)
    x = torch.randn(2, 16, 128)
    with tensor_tracker.track(model, stats=True) as tracker:
        for _ in range(steps):
            train_step(model, x)
            tracker.step()
    start = time.perf_counter()
    df = tracker.to_frame()
    ours = len(df) / (time.perf_counter() - start)
    with plain(model, True, plain_copy) as reference:
        for _ in range(max(1, steps // 20)):
            train_step(model, x)
    start = time.perf_counter()
    ref_df = reference.to_frame()
    ref = len(ref_df) / (time.perf_counter() - start)
    print("\n## to_frame() throughput\n")
    print("| implementation | rows | rows/s | target |")
    print("|---|---|---|---|")
    verdict = "met" if ours >= 100_000 else "MISSED"
    print(f"| stats=True stashes | {len(df):,} | {ours:,.0f} | >= 100,000 ({verdict}) |")
    print(f"| plain reference (full copies, std per row) | {len(ref_df):,} | {ref:,.0f} | |")
    per_stash = tracker.nbytes / len(tracker)
    print(f"\nMemory held with stats=True: {per_stash:.0f} bytes per stash (target < 1 KiB).")


@contextlib.contextmanager
def training_tracker(model: nn.Module, optimizer: torch.optim.Optimizer) -> Iterator[Any]:
    with tensor_tracker.track(
        model,
        stats=[*stats.DEFAULT, stats.histogram()],
        capture=("outputs", "params"),
        every=10,
    ) as tracker:
        yield tracker


def training_run(steps: int, rounds: int) -> None:
    """Issue #5's configuration: a whole run with every=10, histograms, parameters."""
    model = make_model(256, 4)
    x = torch.randn(4, 64, 256)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)

    def loop(tracker: Any) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            optimizer.zero_grad()
            model(x).square().mean().backward()
            optimizer.step()
            if tracker is not None:
                tracker.step()
        return time.perf_counter() - start

    ratios = []
    per_step = 0.0
    for _ in range(rounds):
        base = loop(None)
        with training_tracker(model, optimizer) as tracker:
            tracked = loop(tracker)
            recorded = len({s.step for s in tracker})
            per_step = tracker.nbytes / max(1, recorded)
            n = len(tracker) / max(1, recorded)
        ratios.append(tracked / base)
    ratio = statistics.median(ratios)
    verdict = "met" if ratio <= 1.05 else "MISSED"
    print(
        f"\n## Training run: {steps} steps, every=10, stats=DEFAULT+histogram(), outputs and "
        f"parameters with gradients (d_model=256, 4 layers, batch 4 x seq 64)\n"
    )
    print(f"- whole-run time tracked / untracked: {ratio:.3f}x (target <= 1.05: {verdict})")
    print(f"- per recorded step: {n:.0f} stashes, {per_step:,.0f} bytes held")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (CI)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rounds, steps = (1, 2) if args.quick else (7, 5)
    print(f"# tensor_tracker benchmark (torch {torch.__version__}, {args.threads} thread)")
    overhead_table(256, 4, 4, 64, rounds, steps)
    if not args.quick:
        overhead_table(128, 4, 8, 64, rounds, steps)
    frame_throughput(20 if args.quick else 400)
    training_run(20 if args.quick else 200, 1 if args.quick else 3)


if __name__ == "__main__":
    main()
