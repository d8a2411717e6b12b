"""Issue 27: the one-pass probes (`summary` and its timeline, `module_graph`,
`autograd_graph`) hook modules through core's `CallHooks` and name them as `track()` does:
an aliased module by its first name, compiled and DDP models by the names of the plain
model. A compiled model is probed by running it eagerly; a checkpoint's recomputation in
the backward pass is no call of the pass."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.checkpoint import checkpoint

import tensor_tracker
from tensor_tracker import autograd_graph, module_graph, summary, track

TIMEOUT = 120.0


class Aliased(nn.Module):
    """`a` also held as `b` (and called through both), beside a nested `Sequential`."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(4, 4)
        self.b = self.a
        self.c = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(self.b(x)) + self.a(x)


MODULES = ["", "a", "c", "c.0", "c.1"]
# The calls that make autograd operations of their own: `c` only runs its children.
OPERATIONS = ["", "a", "c.0", "c.1"]
PARAMS = ["a.bias", "a.weight", "c.0.bias", "c.0.weight"]


def probe_names(model: nn.Module, x: torch.Tensor) -> dict[str, list[str]]:
    """The module (and parameter) names each of the four probes and `track()` report."""
    with track(model, capture=("outputs", "params")) as t:
        model(x).sum().backward()
    model.zero_grad()
    s = summary(model, x)
    graph = module_graph(model, x)
    ops = autograd_graph(model, x)
    return {
        "track": sorted({r.name for r in t if r.kind == "output"}),
        "summary": sorted({c.name for c in s.calls}),
        # The timeline: the calls whose forward and backward times were measured.
        "timeline": sorted({c.name for c in s.calls if not math.isnan(c.forward_ms)}),
        "timeline_backward": sorted({c.name for c in s.calls if not math.isnan(c.backward_ms)}),
        "module_graph": sorted({n.name for n in graph.nodes.values() if n.kind == "module"}),
        # Call ids are "<name>#<call>", the model's "<model>#0".
        "autograd_graph": sorted(
            {_call_name(n.module) for n in ops.nodes.values() if n.module is not None}
        ),
        "track_params": sorted(
            f"{r.name}.{r.attr}".lstrip(".") for r in t if r.kind == "param" and not r.grad
        ),
        "autograd_params": sorted(n.label for n in ops.nodes.values() if n.kind == "param"),
    }


def _call_name(call_id: str) -> str:
    name = call_id.rpartition("#")[0]
    return "" if name == "<model>" else name


def check_names(names: dict[str, list[str]]) -> None:
    print({k: v for k, v in names.items()})  # shown with -s: the names, side by side
    assert names["track"] == MODULES
    for probe in ("summary", "timeline", "timeline_backward", "module_graph"):
        assert names[probe] == names["track"], probe
    assert names["autograd_graph"] == OPERATIONS
    assert names["autograd_params"] == names["track_params"] == PARAMS


def test_an_aliased_module_has_its_first_name_everywhere() -> None:
    check_names(probe_names(Aliased(), torch.randn(2, 4)))


@pytest.mark.parametrize("how", ["torch.compile", "module.compile"])
def test_a_compiled_model_has_the_plain_models_names_everywhere(how: str) -> None:
    if how == "torch.compile":
        model: nn.Module = torch.compile(Aliased(), backend="eager")  # type: ignore[assignment]
    else:
        model = Aliased()
        model.compile(backend="eager")
    check_names(probe_names(model, torch.randn(2, 4)))


def test_summary_and_module_graph_of_a_compiled_model_are_the_plain_models() -> None:
    x = torch.randn(2, 4)
    plain = Aliased()
    compiled = torch.compile(Aliased(), backend="eager")
    s, cs = summary(plain, x), summary(compiled, x)
    fields = ("name", "call", "depth", "parent", "output_shapes", "grad_output_shapes", "params")
    assert [[getattr(c, f) for f in fields] for c in cs.calls] == [
        [getattr(c, f) for f in fields] for c in s.calls
    ]
    assert s.timing == "wall clock"
    assert cs.timing == "wall clock, run eagerly (not the compiled code)"
    graph, cgraph = module_graph(plain, x), module_graph(compiled, x)
    assert list(cgraph.nodes) == list(graph.nodes)
    assert cgraph.edges == graph.edges
    # The compiled model still runs its compiled code, with the same result.
    torch.testing.assert_close(compiled(x), plain(x), rtol=0, atol=0)


def test_a_checkpoint_recomputing_in_backward_adds_no_call() -> None:
    class Checkpointed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Sequential(nn.Linear(4, 4), nn.Tanh())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = checkpoint(self.inner, x, use_reentrant=False)
            return out

    s = summary(Checkpointed(), torch.randn(2, 4, requires_grad=True))
    assert [(c.name, c.call) for c in s.calls] == [
        ("", 0),
        ("inner", 0),
        ("inner.0", 0),
        ("inner.1", 0),
    ]
    assert all(c.grad_output_shapes == [(2, 4)] for c in s.calls)


# -- DDP: a gloo group of one rank, in this process ---------------------------------------


def test_a_ddp_model_has_the_plain_models_names_everywhere() -> None:
    # One rank in this process (an in-memory store): spawning one would import torch again.
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = nn.parallel.DistributedDataParallel(Aliased())
        check_names(probe_names(model, torch.randn(2, 4)))
    finally:
        dist.destroy_process_group()


def test_the_probes_leave_no_hook_behind() -> None:
    model = torch.compile(Aliased(), backend="eager")
    x = torch.randn(2, 4)
    summary(model, x)
    module_graph(model, x)
    autograd_graph(model, x)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert tensor_tracker._core.naming.module_names(model)[0][1] is model._orig_mod


@pytest.mark.slow  # a fresh Python interpreter importing torch: 2-6 s of CPU
def test_probing_an_uncompiled_model_imports_no_compiler() -> None:
    # Importing TorchDynamo takes seconds, and makes track() guard its hooks against it.
    code = (
        "import sys, torch, tensor_tracker as tt\n"
        "model = torch.nn.Sequential(torch.nn.Linear(2, 2))\n"
        "x = torch.randn(3, 2)\n"
        "tt.summary(model, x); tt.module_graph(model, x); tt.autograd_graph(model, x)\n"
        "assert 'torch._dynamo' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=TIMEOUT)
