"""Issue #26 item 13: every public entry point refuses a wrong-typed or out-of-range
argument before it does anything, with `ArgumentTypeError` / `ArgumentValueError` (from
`tensor_tracker._validate`) naming the argument. One row per case: the call, the error
expected, and the argument's name as the message must show it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import tensor_tracker as tt
from tensor_tracker import plot, stats, widgets
from tensor_tracker.errors import ArgumentTypeError, ArgumentValueError, TensorTrackerError
from tests.helpers import mlp

T, V = ArgumentTypeError, ArgumentValueError


@dataclass
class Env:
    """What the calls need: a model, an input, trackers of statistics and of copies."""

    model: nn.Module
    x: torch.Tensor
    stats: tt.Tracker
    copies: tt.Tracker
    graph: tt.ModuleGraph
    path: Path


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Env:
    model, x = mlp(), torch.randn(3, 4)
    spec = [*stats.DEFAULT, stats.histogram(bins=8)]
    with tt.track(model, stats=spec) as with_stats:
        for _ in range(2):
            model(x).sum().backward()
            with_stats.step()
    with tt.track(model) as copies:
        model(x).sum().backward()
    graph = tt.module_graph(model, x)
    path = tmp_path_factory.mktemp("arguments")
    with_stats.save(path / "run")
    return Env(model, x, with_stats, copies, graph, path)


Call = Callable[[Env], Any]
CASES: list[tuple[str, Call, type, str]] = [
    # track
    ("track module", lambda e: tt.track("model"), T, "module"),
    ("track grad", lambda e: tt.track(e.model, grad="yes"), T, "grad"),
    ("track include", lambda e: tt.track(e.model, include=3), T, "include"),
    ("track exclude regex", lambda e: tt.track(e.model, exclude="("), V, "exclude"),
    ("track every 0", lambda e: tt.track(e.model, every=0), V, "every"),
    ("track every str", lambda e: tt.track(e.model, every="2"), T, "every"),
    ("track max_bytes", lambda e: tt.track(e.model, max_bytes=-1), V, "max_bytes"),
    ("track keep_steps", lambda e: tt.track(e.model, keep_steps=0), V, "keep_steps"),
    ("track dtype int8", lambda e: tt.track(e.model, dtype=torch.int8), V, "dtype"),
    ("track dtype bool", lambda e: tt.track(e.model, dtype=torch.bool), V, "dtype"),
    ("track dtype str", lambda e: tt.track(e.model, dtype="float16"), T, "dtype"),
    ("track sample", lambda e: tt.track(e.model, sample=0), V, "sample"),
    ("track seed", lambda e: tt.track(e.model, seed=1.5), T, "seed"),
    ("track non_blocking", lambda e: tt.track(e.model, non_blocking=1), T, "non_blocking"),
    ("track device", lambda e: tt.track(e.model, device=5), T, "device"),
    ("track device name", lambda e: tt.track(e.model, device="gpu9"), V, "device"),
    ("track capture", lambda e: tt.track(e.model, capture="weights"), V, "capture"),
    ("track train_only", lambda e: tt.track(e.model, train_only="no"), T, "train_only"),
    (
        "track on_nonfinite",
        lambda e: tt.track(e.model, stats=True, on_nonfinite="ignore"),
        V,
        "on_nonfinite=",
    ),
    ("track stream_to", lambda e: tt.track(e.model, stream_to=5), T, "stream_to"),
    ("track optimizer", lambda e: tt.track(e.model, optimizer="adam"), T, "optimizer"),
    ("track stats name", lambda e: tt.track(e.model, stats="nope"), V, "stats"),
    ("track ops name", lambda e: tt.track(e.model, ops="softmx"), V, "ops"),
    ("track ops type", lambda e: tt.track(e.model, ops=[3]), T, "ops"),
    ("Tracker ops name", lambda e: tt.Tracker(ops=["add", "nope"]), V, "ops"),
    ("track stats type", lambda e: tt.track(e.model, stats=5), T, "stats"),
    ("track stash", lambda e: tt.track(e.model, stash=5), T, "stash"),
    ("track stash_value", lambda e: tt.track(e.model, stash_value=5), T, "stash_value"),
    ("track every kind", lambda e: tt.track(e.model, every={"default": 0}), V, "every"),
    ("track every key", lambda e: tt.track(e.model, every={3: 2}), T, "every"),
    # issue #35 item 18: these were accepted silently
    ("track every no default", lambda e: tt.track(e.model, every={"other": 2}), V, "'default'"),
    (
        "track on_disk_full without stream_to",
        lambda e: tt.track(e.model, on_disk_full="warn"),
        V,
        "on_disk_full='warn'",
    ),
    ("track device absent", lambda e: tt.track(e.model, device="cuda:4095"), V, "device="),
    ("CopyValue device absent", lambda e: tt.CopyValue(device="cuda:4095"), V, "device="),
    ("track max_bytes str", lambda e: tt.track(e.model, max_bytes="1GB"), T, "max_bytes"),
    ("track keep_steps float", lambda e: tt.track(e.model, keep_steps=1.5), T, "keep_steps"),
    ("track capture empty", lambda e: tt.track(e.model, capture=[]), V, "capture"),
    (
        "track on_nonfinite type",
        lambda e: tt.track(e.model, stats=True, on_nonfinite=5),
        T,
        "on_nonfinite",
    ),
    ("CopyValue dtype", lambda e: tt.CopyValue(dtype=torch.int64), V, "dtype"),
    # Tracker: the options of track (issue 36 item 3), checked by the same declarations
    ("Tracker stash", lambda e: tt.Tracker(5), T, "stash"),
    ("Tracker stash_value", lambda e: tt.Tracker(stash_value=5), T, "stash_value"),
    ("Tracker stats name", lambda e: tt.Tracker(stats="nope"), V, "stats"),
    ("Tracker stats type", lambda e: tt.Tracker(stats=5), T, "stats"),
    ("Tracker stats and stash", lambda e: tt.Tracker(print, stats=True), V, "stash="),
    ("Tracker capture", lambda e: tt.Tracker(capture="weights"), V, "capture"),
    ("Tracker optimizer", lambda e: tt.Tracker(optimizer="adam"), T, "optimizer"),
    ("Tracker every", lambda e: tt.Tracker(every=0), V, "every"),
    ("Tracker every no default", lambda e: tt.Tracker(every={"x": 2}), V, "'default'"),
    ("Tracker train_only", lambda e: tt.Tracker(train_only="no"), T, "train_only"),
    ("Tracker max_bytes", lambda e: tt.Tracker(max_bytes=-1), V, "max_bytes"),
    ("Tracker keep_steps", lambda e: tt.Tracker(keep_steps=0), V, "keep_steps"),
    ("Tracker keep_steps stats", lambda e: tt.Tracker(stats=True, keep_steps=2), V, "keep_steps"),
    ("Tracker device", lambda e: tt.Tracker(device="gpu9"), V, "device"),
    ("Tracker dtype", lambda e: tt.Tracker(dtype=torch.int8), V, "dtype"),
    ("Tracker sample", lambda e: tt.Tracker(sample=0), V, "sample"),
    ("Tracker seed", lambda e: tt.Tracker(seed=1.5), T, "seed"),
    ("Tracker non_blocking", lambda e: tt.Tracker(non_blocking=1), T, "non_blocking"),
    ("Tracker copy and stats", lambda e: tt.Tracker(stats=True, sample=3), V, "sample="),
    ("Tracker on_nonfinite", lambda e: tt.Tracker(stats=True, on_nonfinite="x"), V, "on_nonfinite"),
    (
        "Tracker on_nonfinite type",
        lambda e: tt.Tracker(stats=True, on_nonfinite=5),
        T,
        "on_nonfinite",
    ),
    ("Tracker on_nonfinite copies", lambda e: tt.Tracker(on_nonfinite="raise"), V, "on_nonfinite"),
    ("Tracker stream_to", lambda e: tt.Tracker(stream_to=5), T, "stream_to"),
    ("Tracker on_disk_full", lambda e: tt.Tracker(on_disk_full="warn"), V, "on_disk_full"),
    ("Tracker options", lambda e: tt.Tracker(options={}), T, "options"),
    ("step negative", lambda e: tt.Tracker().step(-1), V, "step("),
    ("step float", lambda e: tt.Tracker().step(1.5), T, "step("),
    ("step kind", lambda e: tt.Tracker().step(kind=3), T, "kind"),
    ("step keep", lambda e: tt.Tracker().step(keep="no"), T, "keep"),
    ("log name", lambda e: tt.Tracker().log(3, 1.0), T, "name"),
    ("log empty name", lambda e: tt.Tracker().log("", 1.0), V, "name"),
    ("step empty kind", lambda e: tt.Tracker().step(kind=""), V, "kind"),
    ("log value", lambda e: tt.Tracker().log("loss", "high"), T, "value"),
    ("log tensor", lambda e: tt.Tracker().log("loss", torch.ones(3)), V, "value"),
    ("note text", lambda e: tt.Tracker().note(5), T, "text"),
    ("register module", lambda e: tt.Tracker().register("m"), T, "module"),
    ("register name", lambda e: tt.Tracker().register(e.model, name=3), T, "name"),
    ("register grad", lambda e: tt.Tracker().register(e.model, grad="x"), T, "grad"),
    ("register_all grad", lambda e: tt.Tracker().register_all(e.model, grad=1), T, "grad"),
    ("to_frame stat", lambda e: e.copies.to_frame(stat=5), T, "stat"),
    ("to_frame stat_name", lambda e: e.copies.to_frame(stat_name=5), T, "stat_name"),
    ("summary step type", lambda e: e.stats.summary(step="last"), T, "step"),
    ("summary step", lambda e: e.stats.summary(step=7), V, "step"),
    ("save path", lambda e: e.stats.save(5), T, "path"),
    ("gather dst", lambda e: e.stats.gather(dst="0"), T, "dst"),
    ("index", lambda e: e.stats[1.5], T, "index"),
    # load, report, graph_view
    ("load path", lambda e: tt.load(5), T, "path"),
    ("load recover", lambda e: tt.load(e.path, recover="yes"), T, "recover"),
    ("report title", lambda e: tt.report(e.stats, e.path / "r.html", title=5), T, "title"),
    ("report path", lambda e: tt.report(e.stats, 5), T, "path"),
    ("report graph", lambda e: tt.report(e.stats, e.path / "r.html", graph=5), T, "graph"),
    ("report recording", lambda e: tt.report([1], e.path / "r.html"), T, "recording"),
    ("graph_view graph", lambda e: tt.graph_view(5), T, "graph"),
    ("graph_view height", lambda e: tt.graph_view(e.graph, height=10), V, "height"),
    ("graph_view title", lambda e: tt.graph_view(e.graph, title=5), T, "title"),
    ("GraphView.save", lambda e: tt.graph_view(e.graph).save(5), T, "path"),
    # graphs and summaries of a model
    ("module_graph model", lambda e: tt.module_graph("m", e.x), T, "model"),
    (
        "module_graph max_nodes",
        lambda e: tt.module_graph(e.model, e.x, max_nodes=0),
        V,
        "max_nodes",
    ),
    ("autograd_graph model", lambda e: tt.autograd_graph("m", e.x), T, "model"),
    ("autograd_graph loss_fn", lambda e: tt.autograd_graph(e.model, e.x, loss_fn=5), T, "loss_fn"),
    ("summary model", lambda e: tt.summary("m", e.x), T, "model"),
    ("summary backward", lambda e: tt.summary(e.model, e.x, backward="yes"), T, "backward"),
    ("summary loss_fn", lambda e: tt.summary(e.model, e.x, loss_fn=5), T, "loss_fn"),
    ("Summary.table depth", lambda e: tt.summary(e.model, e.x).table(depth=-1), V, "depth"),
    ("ModuleGraph.level", lambda e: e.graph.level(5), T, "parent"),
    ("ModuleGraph.to_svg", lambda e: e.graph.to_svg(parent=5), T, "parent"),
    # comparing runs
    ("compare a", lambda e: tt.compare(5, e.stats), T, "a"),
    ("compare rtol", lambda e: tt.compare(e.stats, e.stats, rtol=-1.0), V, "rtol"),
    ("compare atol", lambda e: tt.compare(e.stats, e.stats, atol="x"), T, "atol"),
    ("compare names", lambda e: tt.compare(e.stats, e.stats, names=5), T, "names"),
    ("compare_models model", lambda e: tt.compare_models("m", e.model, e.x), T, "model_a"),
    (
        "compare_models loss_fn",
        lambda e: tt.compare_models(e.model, e.model, e.x, loss_fn=5),
        T,
        "loss_fn",
    ),
    (
        "compare_models max_bytes",
        lambda e: tt.compare_models(e.model, e.model, e.x, max_bytes=0),
        V,
        "max_bytes",
    ),
    ("plot.compare cmp", lambda e: plot.compare(5), T, "cmp"),
    (
        "plot.compare step",
        lambda e: plot.compare(tt.compare(e.stats, e.stats), step="x"),
        T,
        "step",
    ),
    (
        "plot.compare error",
        lambda e: plot.compare(tt.compare(e.stats, e.stats), error=5),
        T,
        "error",
    ),
    # reading recordings
    ("diagnose recording", lambda e: tt.diagnose(5), T, "recording"),
    ("diagnose dead", lambda e: tt.diagnose(e.stats, dead=2.0), V, "dead"),
    ("diagnose dead type", lambda e: tt.diagnose(e.stats, dead="high"), T, "dead"),
    ("diagnose vanishing", lambda e: tt.diagnose(e.stats, vanishing=-1.0), V, "vanishing"),
    ("diagnose exploding", lambda e: tt.diagnose(e.stats, exploding="big"), T, "exploding"),
    ("diagnose saturation", lambda e: tt.diagnose(e.stats, saturation=1.5), V, "saturation"),
    ("diagnose formats", lambda e: tt.diagnose(e.stats, formats=["fp99"]), V, "formats"),
    ("diagnose formats str", lambda e: tt.diagnose(e.stats, formats=5), T, "formats"),
    ("diagnose overflow", lambda e: tt.diagnose(e.stats, overflow=-0.5), V, "overflow"),
    ("diagnose underflow", lambda e: tt.diagnose(e.stats, underflow=2.0), V, "underflow"),
    (
        "diagnose update_size",
        lambda e: tt.diagnose(e.stats, update_size=(0.1, 0.01)),
        V,
        "update_size",
    ),
    ("diagnose update_size type", lambda e: tt.diagnose(e.stats, update_size=5), T, "update_size"),
    ("diagnose spike", lambda e: tt.diagnose(e.stats, spike=0.0), V, "spike"),
    (
        "diagnose outlier_ratio",
        lambda e: tt.diagnose(e.stats, outlier_ratio=0.5),
        V,
        "outlier_ratio",
    ),
    ("per_channel stat", lambda e: stats.per_channel("std"), V, "stat"),
    ("per_channel dim", lambda e: stats.per_channel("rms", dim="0"), T, "dim"),
    ("per_sample stat", lambda e: stats.per_sample("max"), V, "stat"),
    ("per_sample dim", lambda e: stats.per_sample("rms", dim=None), T, "dim"),
    ("channel_map step", lambda e: plot.channel_map(e.copies, step=7), V, "step"),
    ("channel_map mark", lambda e: plot.channel_map(e.copies, mark=1), V, "mark"),
    ("diagnose loss", lambda e: tt.diagnose(e.stats, loss="low"), T, "loss"),
    ("explain_spike recording", lambda e: tt.explain_spike(5, [1.0]), T, "recording"),
    ("explain_spike loss", lambda e: tt.explain_spike(e.stats, loss="low"), T, "loss"),
    ("explain_spike loss value", lambda e: tt.explain_spike(e.stats, ["a"]), T, "loss"),
    (
        "explain_spike loss shape",
        lambda e: tt.explain_spike(e.stats, torch.ones(2, 2)),
        V,
        "loss",
    ),
    ("explain_spike step", lambda e: tt.explain_spike(e.stats, [1.0], step=1.5), T, "step"),
    ("spike_plot explanation", lambda e: plot.spike_plot(5), T, "explanation"),
    (
        "spike_plot top",
        lambda e: plot.spike_plot(tt.explain_spike(e.stats, [1.0]), top=-1),
        V,
        "top",
    ),
    ("first_nonfinite", lambda e: tt.first_nonfinite(5), T, "recording"),
    ("sample_values recording", lambda e: tt.sample_values(5), T, "recording"),
    ("sample_values sample", lambda e: tt.sample_values(e.copies, sample=3), V, "sample="),
    ("sample_values sample type", lambda e: tt.sample_values(e.copies, "0"), T, "sample"),
    ("sample_values position", lambda e: tt.sample_values(e.copies, position=1.0), T, "position"),
    ("sample_values step", lambda e: tt.sample_values(e.copies, step=4), V, "step="),
    (
        "sample_values position on 2-D outputs",
        lambda e: tt.sample_values(e.copies, position=10**9),
        V,
        "position=1000000000",
    ),
    (
        "sample_values channel_dim",
        lambda e: tt.sample_values(e.copies, channel_dim=0),
        V,
        "channel_dim",
    ),
    (
        "sample_values stats",
        lambda e: tt.sample_values(e.stats),
        tt.errors.NotRecordedError,
        "stats=",
    ),
    ("sample_stats batch_dim", lambda e: tt.sample_stats(e.copies, batch_dim="0"), T, "batch_dim"),
    ("sample_stats grad", lambda e: tt.sample_stats(e.copies, grad=1), T, "grad"),
    ("SampleStats.ratio stat", lambda e: tt.sample_stats(e.copies).ratio("std"), V, "stat"),
    ("to_frame stashes", lambda e: tt.to_frame(5), T, "stashes"),
    ("stash name", lambda e: tt.stash(5, e.x), T, "name"),
    ("stash role", lambda e: tt.stash("n", e.x, role="x"), V, "role"),
    ("rmap_tensor fn", lambda e: tt.rmap_tensor(e.x, 5), T, "fn"),
    ("get_stash_fn stash", lambda e: tt.get_stash_fn(stash=5), T, "stash"),
    ("get_stash_fn stash_value", lambda e: tt.get_stash_fn(stash_value=5), T, "stash_value"),
    ("default_stash_value", lambda e: tt.default_stash_value(5), T, "tensor"),
    # stats
    ("compute tensor", lambda e: stats.compute(5), T, "tensor"),
    ("compute names", lambda e: stats.compute(e.x, ["nope"]), V, "stats"),
    ("parse spec", lambda e: stats.parse(5), T, "stats"),
    ("parse compile", lambda e: stats.parse(True, compile="yes"), T, "compile"),
    ("histogram bins", lambda e: stats.histogram(bins=0), V, "bins"),
    ("histogram bins type", lambda e: stats.histogram(bins="8"), T, "bins"),
    ("histogram range", lambda e: stats.histogram(range=(1.0, 0.0)), V, "range"),
    ("histogram seed", lambda e: stats.histogram(seed=1.5), T, "seed"),
    ("histogram log2", lambda e: stats.histogram(log2="yes"), T, "log2="),
    ("histogram name", lambda e: stats.histogram(name=5), T, "name"),
    ("combine empty", lambda e: stats.combine([]), V, "stats"),
    ("combine type", lambda e: stats.combine([5]), T, "stats"),
    ("Stats.edges", lambda e: e.stats[0].value.edges(5), T, "name"),
    ("blocks block_size", lambda e: stats.blocks("nvfp4_error", block_size=0), V, "block_size"),
    (
        "blocks block_size str",
        lambda e: stats.blocks("nvfp4_error", block_size="16"),
        T,
        "block_size",
    ),
    ("blocks dim", lambda e: stats.blocks("nvfp4_error", dim="x"), T, "dim"),
    ("blocks name", lambda e: stats.blocks("nope"), V, "stats"),
    ("diagnose block_error", lambda e: tt.diagnose(e.stats, block_error=0), V, "block_error"),
    ("stats_table type", lambda e: stats.stats_table([5]), T, "stats"),
    ("inexact_names", lambda e: stats.inexact_names(5), T, "layout"),
    # plots
    ("scale_plot stat", lambda e: plot.scale_plot(e.stats, stat=5), T, "stat"),
    ("scale_plot kind", lambda e: plot.scale_plot(e.stats, kind="weights"), V, "kind"),
    ("scale_plot step", lambda e: plot.scale_plot(e.stats, step="last"), T, "step"),
    ("scale_plot formats", lambda e: plot.scale_plot(e.stats, formats=["fp99"]), V, "formats"),
    ("scale_plot group", lambda e: plot.scale_plot(e.stats, group="yes"), T, "group"),
    ("history max_points", lambda e: plot.history(e.stats, max_points=0), V, "max_points"),
    ("history grad", lambda e: plot.history(e.stats, grad="yes"), T, "grad"),
    ("history stat", lambda e: plot.history(e.stats, stat=5), T, "stat"),
    ("histogram plot bins", lambda e: plot.histogram(e.copies[0], bins=0), V, "bins"),
    ("histogram plot range", lambda e: plot.histogram(e.copies[0], range=(1, 0)), V, "range"),
    ("histogram plot log2", lambda e: plot.histogram(e.copies[0], log2="yes"), T, "log2="),
    ("histogram_heatmap name", lambda e: plot.histogram_heatmap(e.stats, 5), T, "name"),
    ("histogram_heatmap grad", lambda e: plot.histogram_heatmap(e.stats, "0", grad=2), T, "grad"),
    ("sample_plot stat", lambda e: plot.sample_plot(e.copies, stat="std"), V, "stat"),
    ("sample_plot sample", lambda e: plot.sample_plot(e.copies, -4), V, "sample="),
    ("umap_plot max_tokens", lambda e: plot.umap_plot(e.copies, max_tokens=0), V, "max_tokens"),
    ("umap_plot method", lambda e: plot.umap_plot(e.copies, method="tsne"), V, "method"),
    ("umap_plot call", lambda e: plot.umap_plot(e.copies, call=-1), V, "call"),
    ("module_graph plot parent", lambda e: plot.module_graph(e.graph, parent=5), T, "parent"),
    ("default_layers", lambda e: plot.default_layers(5), T, "stashes"),
    # widgets
    ("live_view interval", lambda e: widgets.live_view(e.path / "run", interval=0), V, "interval"),
    ("live_view figure", lambda e: widgets.live_view(e.path / "run", figure="pie"), V, "figure"),
    ("live_view start", lambda e: widgets.live_view(e.path / "run", start="no"), T, "start"),
    ("live_view grad", lambda e: widgets.live_view(e.path / "run", grad=None), T, "grad"),
    (
        "live_view no such dir",
        lambda e: widgets.live_view(e.path / "no" / "such", start=False),
        V,
        "no such directory",
    ),
    (
        "live_view a file",
        lambda e: widgets.live_view(e.path / "run" / "recording.json", start=False),
        V,
        "not a directory",
    ),
    ("histogram_viewer", lambda e: widgets.histogram_viewer(5), T, "tracker"),
    ("history_viewer", lambda e: widgets.history_viewer(5), T, "tracker"),
    ("scale_viewer", lambda e: widgets.scale_viewer(5), T, "tracker"),
    ("umap_viewer", lambda e: widgets.umap_viewer(5), T, "tracker"),
    # exporters, integrations
    ("to_tensorboard logdir", lambda e: tt.export.to_tensorboard(e.stats, 5), T, "logdir"),
    ("to_tensorboard recording", lambda e: tt.export.to_tensorboard(5, e.path), T, "recording"),
    (
        "tensorboard_tag grad",
        lambda e: tt.export.tensorboard_tag("a", "output", "", "no", "rms"),
        T,
        "grad",
    ),
    ("to_wandb run", lambda e: tt.export.to_wandb(e.stats, 5), T, "run"),
    ("hf_trainer_callback", lambda e: tt.integrations.hf_trainer_callback(5), T, "tracker"),
    ("lightning_callback", lambda e: tt.integrations.lightning_callback(5), T, "tracker"),
]


@pytest.mark.parametrize(
    ("call", "error", "argument"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_wrong_argument_is_refused_by_name(
    env: Env, call: Call, error: type, argument: str
) -> None:
    with pytest.raises(TensorTrackerError) as info:
        call(env)
    assert isinstance(info.value, error), f"{type(info.value).__name__}: {info.value}"
    assert argument in str(info.value), str(info.value)
