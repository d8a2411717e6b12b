"""The parts of `benchmarks/gpu.py` (issue 40), each run in its own process by it:
`python benchmarks/gpu_parts.py PART --device cuda --partial FILE [--quick]`. Each part
writes what it has found so far to FILE (JSON) after every configuration, so a part killed
at its timeout still leaves its results."""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the package and examples/ without installing them

import bench  # noqa: E402  (benchmarks/, beside this file)

import tensor_tracker  # noqa: E402
from tensor_tracker import stats  # noqa: E402

PACKAGE = ROOT / "tensor_tracker"

CUDA_TESTS = [
    "tests/core/test_cuda.py",
    "tests/core/test_memory.py::test_non_blocking_copy_to_pinned_memory",
    "tests/probe/test_timeline.py::test_a_cuda_summary_times_with_events_and_never_waits_in_a_hook",
    "tests/stats/test_stats.py::test_no_host_sync_on_cuda",
    "tests/stats/test_vectors.py::test_no_host_sync_on_cuda_and_one_transfer_to_read",
    "tests/stats/test_attention.py::test_no_host_sync_on_cuda",
]
"""The tests that skip without CUDA (tests/tools/test_gpu.py checks that none is missing)."""

DEVICE_TESTS = [
    "tests/stats/test_stats.py::test_builtins_match_reference",
    "tests/stats/test_stats.py::test_format_fractions_on_values_spanning_all_ranges",
    "tests/stats/test_stats.py::test_nan_and_inf_inputs",
    "tests/stats/test_blocking.py::test_mx_statistics_match_torchao",
    "tests/stats/test_blocking.py::test_nvfp4_matches_the_reference",
    "tests/stats/test_blocking.py::test_block_dynamic_range",
    "tests/stats/test_vectors.py::test_values_match_numpy_for_every_dimension",
    "tests/core/test_tracker.py::test_tiny_transformer_with_inplace_residuals_bitwise_identical",
    "tests/core/test_param_stats.py::test_parameters_gradients_and_state_equal_the_per_tensor_reference",
]
"""Tests that take the `device` fixture (tests/conftest.py), run with TT_DEVICE=<device>."""


class Partial:
    """A part's results, written to `path` (JSON) at every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, Any] = {}

    def __setitem__(self, key: str, value: Any) -> None:
        self.data[key] = value
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.data, indent=1, default=str))
        temporary.replace(self.path)  # never half a file, whenever the process is killed


def has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# -- the workloads ------------------------------------------------------------------------

Loss = Callable[[Any], Tensor]


def encoder(
    device: torch.device, quick: bool, batch: int | None = None
) -> tuple[nn.Module, Tensor, Loss]:
    """bench.py's d_model 256 encoder (4 layers, batch 4 x 64, or `batch` x 64); `quick`:
    d_model 64, 2 layers."""
    d_model, layers, default, seq = (64, 2, 2, 16) if quick else (256, 4, 4, 64)
    batch = batch or default
    model = bench.make_model(d_model, layers).to(device)
    return model, torch.randn(batch, seq, d_model, device=device), lambda out: out.square().mean()


def bert(device: torch.device, quick: bool) -> tuple[nn.Module, Tensor, Loss]:
    """A BERT-base-size model from its config (hidden 768, 12 layers, random weights), batch
    4 x 128 tokens; `quick`: hidden 64, 2 layers, 2 x 16."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = (
        BertConfig(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128
        )
        if quick
        else BertConfig()
    )
    ids = torch.randint(0, config.vocab_size, (2, 16) if quick else (4, 128), device=device)
    model: nn.Module = BertModel(config)
    return model.to(device), ids, lambda out: out.last_hidden_state.square().mean()


Factory = Callable[[nn.Module, torch.optim.Optimizer], Any]


def configurations(folder: Path) -> dict[str, tuple[Factory, bench.Make | None, bool, str | None]]:
    """Name -> (attach a tracker, its floor from bench.py, whether the row's step includes
    the optimizer's, why it cannot run here or None)."""
    arrow = next((m for m in ("pyarrow", "safetensors") if not has(m)), None)
    return {
        "stats=True": (
            lambda m, o: tensor_tracker.track(m, stats=True),
            lambda m, o: bench._MinimalStats(m),
            False,
            None,
        ),
        "stats=True + per_channel('abs_max')": (
            lambda m, o: tensor_tracker.track(
                m, stats=[*stats.DEFAULT, stats.per_channel("abs_max")]
            ),
            lambda m, o: bench._MinimalChannelStats(m),
            False,
            None,
        ),
        "stats=True + mxfp8_e4m3 and nvfp4 error/underflow": (
            lambda m, o: tensor_tracker.track(m, stats=[*stats.DEFAULT, *bench._BLOCK["both"]]),
            lambda m, o: bench._MinimalBlockStats(m),
            False,
            None,
        ),
        'stats=True, capture=("outputs", "params"), optimizer=Adam': (
            lambda m, o: tensor_tracker.track(
                m, stats=True, capture=("outputs", "params"), optimizer=o
            ),
            lambda m, o: bench._MinimalParamStats(m, o),
            True,
            None,
        ),
        "stats=True, stream_to=": (
            lambda m, o: tensor_tracker.track(
                m, stats=True, stream_to=Path(tempfile.mkdtemp(dir=folder), "run")
            ),
            lambda m, o: bench._MinimalStats(m),
            False,
            None if arrow is None else f"{arrow} is not installed (stream_to= needs it)",
        ),
    }


# -- part 1: the tests ----------------------------------------------------------------------


def pytest_run(ids: list[str], device: torch.device, xml: Path) -> dict[str, Any]:
    """`ids` under pytest with TT_DEVICE=`device`; the outcome of each test from its JUnit XML."""
    # Without the 5 s guard (tests/timing.py): the first CUDA test also pays for CUDA's start.
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:tests.timing",
    ]
    command.append(f"--junitxml={xml}")
    env = {**os.environ, "TT_DEVICE": device.type}
    done = subprocess.run([*command, *ids], cwd=ROOT, env=env, capture_output=True, text=True)
    result: dict[str, Any] = {
        "returncode": done.returncode,
        "passed": 0,
        "failed": {},
        "skipped": {},
    }
    if not xml.exists() or done.returncode != 0:
        # Also a run whose tests all passed can fail (the 5 s guard, a collection error).
        result["output_tail"] = (done.stdout + done.stderr)[-3000:]
    if not xml.exists():
        return result
    for case in ET.parse(xml).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        problem = case.find("failure")
        problem = case.find("error") if problem is None else problem
        skipped = case.find("skipped")
        if problem is not None:
            result["failed"][name] = (
                (problem.get("message") or "")[:500] + "\n" + (problem.text or "")[-1500:]
            )
        elif skipped is not None:
            result["skipped"][name] = skipped.get("message") or ""
        else:
            result["passed"] += 1
    return result


def part_tests(out: Partial, device: torch.device, quick: bool) -> None:
    if not has("pytest"):
        out["skipped"] = "pytest is not installed: the tests cannot run"
        return
    out["missing"] = {m: "not installed" for m in ("numpy", "pandas", "torchao") if not has(m)}
    for label, ids in (("cuda_only", CUDA_TESTS), ("device", DEVICE_TESTS)):
        begin = time.perf_counter()
        result = pytest_run(ids, device, out.path.with_name(f"tests-{label}.xml"))
        out[label] = {**result, "seconds": round(time.perf_counter() - begin, 1)}


# -- part 2: host synchronisations ----------------------------------------------------------

SYNC_WARNING = "synchroniz"  # "called a synchronizing CUDA operation"


@contextlib.contextmanager
def sync_debug(mode: str, device: torch.device) -> Iterator[None]:
    """`torch.cuda.set_sync_debug_mode(mode)` inside the block (nothing on the CPU)."""
    if device.type != "cuda":
        yield
        return
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode(mode)
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


def checked(step: Callable[[], None], device: torch.device) -> dict[str, Any]:
    """Run `step` with syncs as errors; on an error, once more with syncs as warnings, to
    list every place that synchronised (not only the first)."""
    synchronize(device)
    try:
        with sync_debug("error", device):
            step()
        return {"ok": True}
    except RuntimeError:
        error = traceback.format_exc(limit=-6)
    synchronize(device)
    return {"ok": False, "error": error[-3000:], "sites": sync_sites(step, device)}


def sync_sites(step: Callable[[], None], device: torch.device) -> dict[str, int]:
    """Where `step` synchronises: the innermost frames in tensor_tracker (or, if none, the
    calling frames) of each sync warning, with how often."""
    sites: collections.Counter[str] = collections.Counter()

    def record(message: Any, *_: Any, **__: Any) -> None:
        if SYNC_WARNING in str(message):
            stack = traceback.extract_stack()[:-1]
            ours = [f for f in stack if Path(f.filename).is_relative_to(PACKAGE)]
            frames = (ours or stack)[-3:]
            sites[
                " <- ".join(
                    f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames)
                )
            ] += 1

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        try:
            with sync_debug("warn", device):
                step()
        except RuntimeError as e:
            sites[f"raised: {e}"[:300]] += 1
    return dict(sites)


def flush_allowed(tracker: tensor_tracker.Tracker, device: torch.device, syncs: list[int]) -> None:
    """Let the stream's flush at `step()` synchronise (it reads the statistics back to write
    them), and count its syncs into `syncs`, one entry per flush."""
    flush = tracker._flush
    if flush is None:
        return

    def allowed(block_ended: bool, step: int) -> None:
        with warnings.catch_warnings(record=True) as caught, sync_debug("warn", device):
            warnings.simplefilter("always")
            flush(block_ended, step)
        syncs.append(sum(SYNC_WARNING in str(w.message) for w in caught))

    tracker.on_flush(allowed, tracker.stream_path)


def sync_check(
    model: nn.Module, x: Tensor, loss: Loss, factory: Factory | None, device: torch.device
) -> dict[str, Any]:
    """A training step (zero_grad, forward, backward, Adam step, `tracker.step()`) of a copy
    of `model`, untracked when `factory` is None: the first step and two later ones checked."""
    model = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    flush_syncs: list[int] = []
    with contextlib.ExitStack() as stack:
        tracker = None if factory is None else stack.enter_context(factory(model, opt))
        if tracker is not None:
            flush_allowed(tracker, device, flush_syncs)

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            loss(model(x)).backward()
            opt.step()
            if tracker is not None:
                tracker.step()

        result: dict[str, Any] = {"first_step": checked(step, device)}
        step()  # not checked: so that "later steps" are the third and fourth

        def two_steps() -> None:
            step()
            step()

        result["later_steps"] = checked(two_steps, device)
        if flush_syncs:
            result["syncs_in_each_flush_at_step"] = flush_syncs
    result["ok"] = result["first_step"]["ok"] and result["later_steps"]["ok"]
    return result


def part_syncs(out: Partial, device: torch.device, quick: bool) -> None:
    if device.type != "cuda":
        out["note"] = "sync-debug mode is CUDA-only: on the CPU the steps just run"
    models: dict[str, Callable[[torch.device, bool], tuple[nn.Module, Tensor, Loss]] | str] = {
        "encoder d_model 256": encoder,
        "BERT-base (hidden 768, 12 layers)": bert
        if has("transformers")
        else "transformers is not installed",
    }
    with tempfile.TemporaryDirectory() as folder:
        for model_name, make in models.items():
            if isinstance(make, str):
                out[model_name] = {"skipped": make}
                continue
            model, x, loss = make(device, quick)
            results: dict[str, Any] = {}
            for name, (factory, _, _, missing) in {
                "untracked": (None, None, False, None),
                **configurations(Path(folder)),
            }.items():
                begin = time.perf_counter()
                results[name] = (
                    {"skipped": missing} if missing else sync_check(model, x, loss, factory, device)
                )
                results[name]["seconds"] = round(time.perf_counter() - begin, 2)
                out[model_name] = results
            del model


# -- part 3: cost -----------------------------------------------------------------------------


def kernels_per_step(step: Callable[[], None], device: torch.device) -> int:
    """What one call of `step` launches on the GPU (kernels, memcpy and memset), from the
    profiler; on the CPU (dry run) the operators it runs."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    step()
    synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        step()
        synchronize(device)
    if cuda:
        return sum(e.device_type.name == "CUDA" for e in prof.events())
    return len(prof.events())


def top_kernels(step: Callable[[], None], device: torch.device, n: int = 8) -> dict[str, int]:
    """The `n` most launched GPU activities of one call of `step`, by name (shows whether a
    compiled step runs generated, fused kernels)."""
    from torch.profiler import ProfilerActivity, profile

    step()
    synchronize(device)
    cuda = device.type == "cuda"
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        step()
        synchronize(device)
    names = collections.Counter(
        e.name[:80] for e in prof.events() if not cuda or e.device_type.name == "CUDA"
    )
    return dict(names.most_common(n))


def step_ms(step: Callable[[], None], device: torch.device, rounds: int) -> float:
    """The median time of `step` on `device`'s clock."""
    clock = bench.device_clock(device)
    times = []
    for _ in range(rounds):
        begin = clock()
        step()
        times.append(clock() - begin)
    return 1e3 * statistics.median(times)


def kernel_counts(
    model: nn.Module, x: Tensor, loss: Loss, adam: bool, factory: Factory, device: torch.device
) -> dict[str, int]:
    def count(tracked: bool) -> int:
        copied = copy.deepcopy(model)
        opt = torch.optim.Adam(copied.parameters(), lr=1e-4)
        with factory(copied, opt) if tracked else contextlib.nullcontext() as tracker:

            def step() -> None:
                opt.zero_grad(set_to_none=True)
                loss(copied(x)).backward()
                if adam:
                    opt.step()
                if isinstance(tracker, tensor_tracker.Tracker):  # not a floor's hooks
                    tracker.step()

            return kernels_per_step(step, device)

    counts = {"untracked": count(False), "tracked": count(True)}
    return {**counts, "added": counts["tracked"] - counts["untracked"]}


def compiled_row(
    model: nn.Module, x: Tensor, loss: Loss, factory: Factory, device: torch.device, quick: bool
) -> dict[str, Any]:
    """A compiled untracked and a compiled tracked copy, in adjacent pairs; their kernels."""
    backend = "eager" if quick else "inductor"  # the dry run traces, it does not generate code
    torch.compiler.reset()
    untracked, tracked = (
        cast(nn.Module, torch.compile(copy.deepcopy(model), backend=backend)) for _ in range(2)
    )
    opt = torch.optim.Adam(tracked.parameters(), lr=1e-4)
    begin = time.perf_counter()

    def untracked_step() -> None:
        untracked.zero_grad(set_to_none=True)
        loss(untracked(x)).backward()

    # Compiled before the tracker is attached: compiled while a tracker is attached to the
    # other copy, its code (same model class, no hooks) served the tracked copy too, which
    # then recorded nothing (seen on the CPU; reported, not fixed here).
    untracked_step()
    with factory(tracked, opt) as tracker:

        def tracked_step() -> None:
            tracked.zero_grad(set_to_none=True)
            loss(tracked(x)).backward()
            tracker.step()

        tracked_step()
        synchronize(device)
        compile_s = time.perf_counter() - begin
        ratios = bench.paired_ratios(
            untracked_step, tracked_step, 3 if quick else 30, bench.device_clock(device)
        )
        tracker.clear()
        tracked_step()
        records = len(tracker)  # what one compiled step recorded
        kernels = {
            "untracked": kernels_per_step(untracked_step, device),
            "tracked": kernels_per_step(tracked_step, device),
        }
        names = {
            "untracked": top_kernels(untracked_step, device),
            "tracked": top_kernels(tracked_step, device),
        }
        rounds = 3 if quick else 20
        times = {
            "untracked_compiled_step_ms": step_ms(untracked_step, device, rounds),
            "tracked_compiled_step_ms": step_ms(tracked_step, device, rounds),
        }
    counters = torch._dynamo.utils.counters
    dynamo = {
        "graphs": counters["stats"]["unique_graphs"],
        "graph_breaks": sum(counters["graph_break"].values()),
        "generated_kernels_untracked": sum(
            count for name, count in names["untracked"].items() if "triton" in name
        ),
    }
    eager = copy.deepcopy(model)

    def eager_step() -> None:
        eager.zero_grad(set_to_none=True)
        loss(eager(x)).backward()

    eager_step()
    times["untracked_eager_step_ms"] = step_ms(eager_step, device, rounds)
    torch.compiler.reset()
    return {
        "backend": backend,
        **times,
        "dynamo": dynamo,
        "top_kernels": names,
        "ratio": statistics.median(ratios),
        "compile_s": round(compile_s, 1),
        "records_per_step": records,
        "kernels": {**kernels, "added": kernels["tracked"] - kernels["untracked"]},
    }


def part_cost(out: Partial, device: torch.device, quick: bool) -> None:
    model, x, loss = encoder(device, quick)
    clock = bench.device_clock(device)
    out["method"] = (
        "bench.floor_row: (untracked, floor, tracked) steps in rotating order, medians over "
        f"{2 if quick else 30} rounds, timed by {'CUDA events' if device.type == 'cuda' else 'thread CPU time'}; "
        "kernels: profiler GPU activities (kernels, memcpy, memset) in one step"
    )
    with tempfile.TemporaryDirectory() as folder:
        configs = configurations(Path(folder))
        eager: dict[str, Any] = {}
        rows: dict[str, tuple[Factory, bench.Make | None, bool, str | None]] = {
            "no-op hooks": (lambda m, o: bench._NoOpHooks(m), None, False, None),
            **configs,
        }
        for name, (factory, floor, adam, missing) in rows.items():
            if missing:
                eager[name] = {"skipped": missing}
                out["eager"] = eager
                continue
            row = bench.floor_row(model, x, adam, factory, floor, 2 if quick else 30, clock)
            eager[name] = {
                "ratio": row.ratio,
                "floor": row.floor,
                "above_floor": row.above,
                "untracked_step_ms": 1e3 * row.untracked_s,
                "stashes": row.stashes,
                "kernels": kernel_counts(model, x, loss, adam, factory, device),
            }
            out["eager"] = eager
        compiled: dict[str, Any] = {}
        for name in ("stats=True", 'stats=True, capture=("outputs", "params"), optimizer=Adam'):
            compiled[name] = compiled_row(model, x, loss, configs[name][0], device, quick)
            out["compiled"] = compiled


# -- part 4: summary() ------------------------------------------------------------------------


def untracked_pass(model: nn.Module, x: Tensor, loss: Loss, device: torch.device) -> dict[str, Any]:
    """Forward and backward times of a plain pass, and the allocator's figures: what the
    forward left allocated, its peak and the whole pass's peak, each above the start."""
    cuda = device.type == "cuda"
    clock = bench.device_clock(device) if cuda else time.perf_counter
    model.zero_grad(set_to_none=True)
    synchronize(device)
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device) if cuda else 0
    start = clock()
    out = model(x)
    middle = clock()
    left = torch.cuda.memory_allocated(device) - before if cuda else None
    forward_peak = torch.cuda.max_memory_allocated(device) - before if cuda else None
    loss(out).backward()
    end = clock()
    peak = torch.cuda.max_memory_allocated(device) - before if cuda else None
    del out
    model.zero_grad(set_to_none=True)
    return {
        "forward_ms": 1e3 * (middle - start),
        "backward_ms": 1e3 * (end - middle),
        "forward_mem_bytes": left,
        "forward_peak_bytes": forward_peak,
        "peak_bytes": peak,
    }


def summary_diagnosis(
    model: nn.Module, x: Tensor, loss: Loss, device: torch.device
) -> dict[str, Any]:
    """Where a summary() pass spends host time (profiler, top operators and runtime calls by
    self CPU time), its host wall time against a plain pass's, and where it synchronises."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if device.type == "cuda" else [])]
    synchronize(device)
    begin = time.perf_counter()
    untracked_pass(model, x, loss, device)
    synchronize(device)
    plain_s = time.perf_counter() - begin
    begin = time.perf_counter()
    tensor_tracker.summary(model, x, loss_fn=loss)
    synchronize(device)
    summary_s = time.perf_counter() - begin
    model.zero_grad(set_to_none=True)
    with profile(activities=activities) as prof:
        tensor_tracker.summary(model, x, loss_fn=loss)
        synchronize(device)
    model.zero_grad(set_to_none=True)
    top = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:15]
    return {
        "host_wall_ms": {"plain_pass": 1e3 * plain_s, "summary": 1e3 * summary_s},
        "top_self_cpu": {e.key[:70]: [e.count, round(e.self_cpu_time_total)] for e in top},
        "sync_sites": sync_sites(lambda: tensor_tracker.summary(model, x, loss_fn=loss), device),
    }


def part_summary(out: Partial, device: torch.device, quick: bool) -> None:
    model, x, loss = encoder(device, quick)
    untracked_pass(model, x, loss, device)  # warm-up: cuBLAS workspaces, the allocator's pools
    passes = [untracked_pass(model, x, loss, device) for _ in range(5)]
    plain = {
        k: None if passes[0][k] is None else statistics.median(p[k] for p in passes)
        for k in passes[0]
    }
    out["untracked_pass"] = plain
    tensor_tracker.summary(model, x, loss_fn=loss)  # warm-up
    model.zero_grad(set_to_none=True)
    s = tensor_tracker.summary(model, x, loss_fn=loss)
    model.zero_grad(set_to_none=True)
    root = next(c for c in s.calls if c.parent == -1)
    got: dict[str, Any] = {
        "timing": s.timing,
        "device": s.device,
        "forward_ms": s.forward_ms,
        "backward_ms": s.backward_ms,
        "model_call_forward_ms": root.forward_ms,
        "forward_mem_bytes": root.forward_mem_bytes,
        "forward_peak_bytes": root.forward_peak_bytes,
        "peak_bytes": s.peak_bytes,
        "layers": {
            c.name: {
                "forward_ms": c.forward_ms,
                "backward_ms": c.backward_ms,
                "forward_mem_bytes": c.forward_mem_bytes,
                "forward_peak_bytes": c.forward_peak_bytes,
            }
            for c in s.calls
            if c.name.startswith("layers.") and c.name.count(".") == 1
        },
    }
    out["summary"] = got
    out["summary_pass_diagnosis"] = summary_diagnosis(model, x, loss, device)
    big, big_x, big_loss = encoder(device, quick, batch=8 if quick else 64)
    untracked_pass(big, big_x, big_loss, device)
    big_plain = [untracked_pass(big, big_x, big_loss, device) for _ in range(3)]
    tensor_tracker.summary(big, big_x, loss_fn=big_loss)
    big.zero_grad(set_to_none=True)
    big_s = tensor_tracker.summary(big, big_x, loss_fn=big_loss)
    out["larger_batch_summary_over_untracked"] = {
        "batch": big_x.shape[0],
        "forward_ms": big_s.forward_ms / statistics.median(p["forward_ms"] for p in big_plain),
        "backward_ms": big_s.backward_ms / statistics.median(p["backward_ms"] for p in big_plain),
    }
    out["summary_over_untracked"] = {
        k: got[k] / plain[k] if got[k] is not None and plain[k] else None
        for k in (
            "forward_ms",
            "backward_ms",
            "forward_mem_bytes",
            "forward_peak_bytes",
            "peak_bytes",
        )
    }


PARTS: dict[str, Callable[[Partial, torch.device, bool], None]] = {
    "tests": part_tests,
    "syncs": part_syncs,
    "cost": part_cost,
    "summary": part_summary,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("part", choices=PARTS)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--partial", type=Path, required=True)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    # The plain reference's full-backward hooks warn; the floors are bench.py's.
    warnings.filterwarnings("ignore", "Full backward hook is firing", UserWarning)
    torch.manual_seed(0)
    PARTS[args.part](Partial(args.partial), torch.device(args.device), args.quick)


if __name__ == "__main__":
    main()
