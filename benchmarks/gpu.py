"""Issue 40's checks on a GPU, in one command: `./dev gpu` or `python3 benchmarks/gpu.py`.

Runs with the Python that runs it (no .venv, nothing installed: on a lent GPU machine, the
one that has a CUDA PyTorch), in this order, each part in its own process with a timeout,
within a global budget, writing the JSON after each part:

1. tests: the tests that skip without CUDA, and the device-capable tests with TT_DEVICE=cuda;
2. syncs: tracked training steps of the d_model 256 encoder and of a BERT-base-size model
   under `torch.cuda.set_sync_debug_mode("error")` (stats=True, per_channel, block formats,
   outputs+params with an optimizer, stream_to= with its flush at step() allowed to sync);
3. cost: tracked / untracked step ratios beside bench.py's floors, eager and compiled
   (inductor), and kernels launched per step (profiler);
4. summary: summary()'s CUDA event times and allocator figures against a plain pass.

Without CUDA it says so in one line, writes the JSON with that status and exits 0.
`--device cpu --quick` runs every part on the CPU, small (a dry run for development).
Missing optional packages (pytest, transformers, pyarrow...) skip what needs them, with
the reason in the JSON. Results: doc/benchmarks.md ("GPU").
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PARTS_SCRIPT = Path(__file__).with_name("gpu_parts.py")
PARTS = {
    "tests": (100, "the CUDA-only tests and the device-capable tests with TT_DEVICE=cuda"),
    "syncs": (120, "zero host syncs: tracked training steps under sync-debug mode 'error'"),
    "cost": (200, "tracked / untracked step ratios beside their floors, eager and compiled"),
    "summary": (50, "summary()'s CUDA event times and allocator figures against a plain pass"),
}
"""Name -> (timeout in seconds on CUDA, what it does)."""
OPTIONAL = ("pytest", "numpy", "pandas", "pyarrow", "safetensors", "transformers", "torchao")


def write(results: dict[str, Any], out: Path) -> None:
    temporary = out.with_suffix(".tmp")
    temporary.write_text(json.dumps(results, indent=1, default=str))
    temporary.replace(out)


def run_part(name: str, timeout: float, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """`gpu_parts.py name` in a process of its own (and its own process group, so that a
    timeout also ends the pytest it started); its output goes to <name>.log beside `out`."""
    partial = out.with_name(f"{name}.json")
    partial.unlink(missing_ok=True)
    command = [sys.executable, str(PARTS_SCRIPT), name, "--device", args.device]
    command += ["--partial", str(partial), *(["--quick"] if args.quick else [])]
    begin = time.monotonic()
    with out.with_name(f"{name}.log").open("w") as log:
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            status = "ok" if process.wait(timeout=timeout) == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            status = f"timed out after {timeout:.0f} s"
    result: dict[str, Any] = {"status": status, "seconds": round(time.monotonic() - begin, 1)}
    if partial.exists():
        result["results"] = json.loads(partial.read_text())
        partial.unlink()
    if status != "ok":
        result["log_tail"] = out.with_name(f"{name}.log").read_text()[-4000:]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu for a dry run")
    parser.add_argument("--quick", action="store_true", help="small models, few rounds")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "gpu" / "results.json")
    parser.add_argument("--budget", type=float, default=480, help="seconds for all parts")
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated, in order")
    args = parser.parse_args()
    out: Path = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    parts = [p for p in args.parts.split(",") if p]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    results: dict[str, Any] = {
        "status": "running",
        "requested_device": args.device,
        "quick": args.quick,
        "python": platform.python_version(),
        "missing_packages": [m for m in OPTIONAL if importlib.util.find_spec(m) is None],
        "parts": {},
    }
    try:
        import torch
    except ImportError as e:
        results["status"] = f"cannot import torch: {e}"
        write(results, out)
        print(f"gpu: cannot import torch ({e}); run it with a Python that has PyTorch: {out}")
        sys.exit(1)
    results["torch"] = torch.__version__
    results["torch_cuda"] = torch.version.cuda
    if args.device == "cuda" and not torch.cuda.is_available():
        results["status"] = "no CUDA"
        results["would_run"] = {name: what for name, (_, what) in PARTS.items()}
        write(results, out)
        print(
            f"CUDA is not available (torch {torch.__version__}): nothing run; on a CUDA machine "
            f"this runs {'; '.join(f'{n}: {w}' for n, (_, w) in PARTS.items())}. "
            f"Dry run: --device cpu --quick. Wrote {out}"
        )
        return
    results["device_name"] = (
        torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu"
    )
    print(f"gpu: {results['device_name']}, torch {torch.__version__}; results: {out}", flush=True)
    deadline = time.monotonic() + args.budget
    for name in parts:
        left = deadline - time.monotonic()
        if left < 20:
            results["parts"][name] = {"status": "not run: the budget (--budget) was spent"}
        else:
            # The CPU (a dry run) is slower than the GPU: four times the timeout.
            timeout = min(PARTS[name][0] * (1 if args.device == "cuda" else 4), left)
            results["parts"][name] = run_part(name, timeout, args, out)
        write(results, out)
        part = results["parts"][name]
        print(f"gpu: {name}: {part['status']} ({part.get('seconds', 0)} s)", flush=True)
    results["status"] = "done"
    write(results, out)
    print(f"gpu: wrote {out}")


if __name__ == "__main__":
    main()
