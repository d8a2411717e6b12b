"""The planted-instability tables of doc/benchmarks.md ("Loss spikes explained").

For each recording mode and planted case of `tests/data/test_spike.py` (`planted_run`),
seeds 0-4: whether the planted module is `explain_spike`'s first cause and within its first
three, the first cause and its lead; for a healthy 40-step run (seeds 0-5), the causes
named by default and at steps 24, 30, 36 and 39. One torch thread. Run from the repository
root: `python benchmarks/spike_table.py [--modes stats,copies,updates] [--cases ...]`.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tensor_tracker import explain_spike, stats
from tests.data.test_spike import PLANTED, planted_run

MODES: dict[str, dict[str, Any]] = {
    "stats": {"stats": True},
    "copies": {"capture": ("outputs", "params")},
    "updates": {"stats": stats.health, "capture": ("outputs", "updates")},
}
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    **{case: (case, {}) for case in PLANTED},
    "lr_once+norm": ("lr_once", {"norm": True}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--cases", default=",".join([*CASES, "healthy"]))
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    for mode in args.modes.split(","):
        print(f"\n{mode}: case | top-1 | top-3 | first cause (seeds 0-4) | lead")
        for name in args.cases.split(","):
            if name == "healthy":
                named = []
                for seed in range(6):
                    t, losses = planted_run("healthy", seed, steps=40, **MODES[mode])
                    asked = [len(explain_spike(t, losses, step=s).causes) for s in (24, 30, 36, 39)]
                    named.append((len(explain_spike(t, losses).causes), asked))
                print(f"healthy | causes by default, at steps 24/30/36/39 (seeds 0-5): {named}")
                continue
            case, options = CASES[name]
            firsts, leads, top1, top3 = [], [], 0, 0
            for seed in range(5):
                t, losses = planted_run(case, seed, **options, **MODES[mode])
                causes = explain_spike(t, losses).causes
                modules = [c.module for c in causes]
                top1 += PLANTED[case] in modules[:1]
                top3 += PLANTED[case] in modules[:3]
                firsts.append(f"{causes[0].module} {causes[0].quantity}@{causes[0].step}")
                leads.append(str(causes[0].lead))
            print(f"{name} | {top1}/5 | {top3}/5 | {'; '.join(firsts)} | {', '.join(leads)}")


if __name__ == "__main__":
    main()
