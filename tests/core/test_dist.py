"""Issue #15: DDP and FSDP2 runs on two CPU processes (gloo), spawned once for the module:
per-rank records, gathering, exact cross-rank statistics, original parameter names,
uneven numbers of records, per-rank streaming. The workers record and gather; the tests
check what rank 0 sent back. A run that does not finish in `TIMEOUT` seconds fails."""

from __future__ import annotations

import pickle
import traceback
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

import tensor_tracker
from examples.tiny_transformer import copy_task_batch
from tensor_tracker import stats
from tests.helpers import spawn, tiny_model

pytestmark = pytest.mark.slow  # spawns two ranks that train DDP and FSDP2 models

WORLD = 2
TIMEOUT = 150.0
TOL = {"rtol": 1e-5, "atol": 1e-6}
STATS = ["mean", "std", "rms", "min", "max", "numel", "sum", stats.histogram(bins=8)]


def _tokens(rank: int) -> torch.Tensor:
    return copy_task_batch(2, 8, 16, torch.Generator().manual_seed(rank))[0]


def _loss(out: torch.Tensor) -> torch.Tensor:
    # A sum, so that each rank's activation gradients are those of the concatenated batch.
    return out.float().pow(2).sum()


def _reference() -> dict[str, Any]:
    """One process, the two ranks' batches concatenated: what the ranks should add up to."""
    model = tiny_model()
    tokens = torch.cat([_tokens(r) for r in range(WORLD)])
    with tensor_tracker.track(model, stats=STATS, capture=("outputs", "params")) as t:
        loss = _loss(model(tokens))
        names = [n for n, _ in model.named_parameters()]
        grads = torch.autograd.grad(loss, [p for _, p in model.named_parameters()])
    fn = stats.parse(STATS)
    return {
        "frame": t.to_frame(),
        "params": {n: fn(p).to_dict() for n, p in tiny_model().named_parameters()},
        "grads": {n: fn(g).to_dict() for n, g in zip(names, grads, strict=True)},
    }


def _ddp(rank: int) -> dict[str, Any]:
    from torch.nn.parallel import DistributedDataParallel

    model = tiny_model()
    ddp = DistributedDataParallel(model)
    tokens = _tokens(rank)
    with (
        tensor_tracker.track(ddp, stats=STATS) as t,
        tensor_tracker.track(ddp, capture="params", include="^head$", grad=True) as copies,
    ):
        _loss(ddp(tokens)).backward()
        if rank == 1:  # one rank records more than the other: gathering must not hang
            with torch.no_grad():
                model(tokens)
    # What rank's own gradient is, and what DDP leaves in .grad (the ranks' average).
    local = tiny_model()
    local_grad = torch.autograd.grad(_loss(local(tokens)), local.head.weight)[0]
    recorded = next(s.value[0] for s in copies if s.grad and s.attr == "weight")
    gathered = t.gather()
    seen = {
        "rank": t.rank,
        "world_size": t.world_size,
        "local_rows": len(t),
        "local_ranks": set(t.to_frame()["rank"]),
        "grad_is_local": torch.equal(recorded, local_grad),
        "grad_is_averaged": torch.allclose(recorded, model.head.weight.grad, **TOL),
        "averaged_differs": not torch.allclose(local_grad, model.head.weight.grad, **TOL),
    }
    if gathered is not None:
        seen["frame"] = gathered.to_frame()
        seen["combined"] = gathered.combined()
    return seen


def _fsdp(rank: int) -> dict[str, Any]:
    from torch.distributed.fsdp import fully_shard

    model = tiny_model()
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    with tensor_tracker.track(
        model, stats=STATS, capture=("outputs", "params"), optimizer=opt
    ) as t:
        _loss(model(_tokens(rank))).backward()
        opt.step()  # its state is sharded like the parameters (DTensors)
    gathered = t.gather()
    if gathered is None:
        return {}
    return {"frame": gathered.to_frame(), "combined": gathered.combined()}


def _stream(rank: int, run_dir: Path) -> dict[str, Any]:
    model = tiny_model()
    with tensor_tracker.track(model, stats=True, stream_to=run_dir) as t:
        for _ in range(rank + 1):  # rank 1 runs one step more
            _loss(model(_tokens(rank))).backward()
            t.step()
    dist.barrier()
    if rank != 0:
        return {}
    loaded = tensor_tracker.load(run_dir)
    return {"frame": loaded.to_frame(), "world_size": loaded.world_size}


def _worker(rank: int, port: int, out: str) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    try:
        results = {
            "ddp": _ddp(rank),
            "fsdp": _fsdp(rank),
            "stream": _stream(rank, Path(out) / "run"),
        }
        if rank == 0:
            results["reference"] = _reference()
        (Path(out) / f"rank{rank}.pkl").write_bytes(pickle.dumps(results))
    except BaseException:
        (Path(out) / f"rank{rank}.err").write_text(traceback.format_exc())
        raise
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("dist")
    spawn(_worker, WORLD, out, TIMEOUT)
    return [pickle.loads((out / f"rank{r}.pkl").read_bytes()) for r in range(WORLD)]


def _close(a: Any, b: Any, atol: Any = 1e-6) -> bool:
    f64 = torch.float64
    a, b = torch.tensor(a, dtype=f64), torch.tensor(b, dtype=f64)
    return bool(((a - b).abs() <= torch.tensor(atol, dtype=f64) + 1e-5 * b.abs()).all())


def _sum_atol(frame: Any) -> Any:
    """float32 sums of many terms that nearly cancel: compared on the terms' scale."""
    return 1e-5 * frame["numel"] * frame[["min", "max"]].abs().max(axis=1)


def _scalar_columns(frame: Any) -> list[str]:
    return ["mean", "std", "rms", "min", "max", "numel", "sum"]


# -- DDP ---------------------------------------------------------------------------------


def test_each_rank_knows_its_rank_and_its_frame_says_so(ranks: list[dict[str, Any]]) -> None:
    for rank, seen in enumerate(ranks):
        assert (seen["ddp"]["rank"], seen["ddp"]["world_size"]) == (rank, WORLD)
        assert seen["ddp"]["local_ranks"] == {rank}


def test_gather_brings_every_rank_even_with_uneven_records(ranks: list[dict[str, Any]]) -> None:
    assert "frame" not in ranks[1]["ddp"]  # only dst receives
    frame = ranks[0]["ddp"]["frame"]
    counts = frame.groupby("rank").size().to_dict()
    assert counts == {r: ranks[r]["ddp"]["local_rows"] for r in range(WORLD)}
    assert counts[1] > counts[0]
    assert list(frame.columns[:9]) == [*tensor_tracker._data.frame._META, "rank"]


def test_ddp_names_are_those_of_the_unwrapped_model(ranks: list[dict[str, Any]]) -> None:
    names = set(ranks[0]["ddp"]["frame"]["name"])
    assert names == set(ranks[0]["reference"]["frame"]["name"])
    assert "" in names and "blocks.0.attn.qkv" in names


def test_combined_statistics_equal_those_of_the_concatenated_batch(
    ranks: list[dict[str, Any]],
) -> None:
    combined = ranks[0]["ddp"]["combined"]
    reference = ranks[0]["reference"]["frame"]
    reference = reference[reference["kind"] == "output"]
    # "pos" embeds the positions, the same on every rank: not split by the batch.
    reference = reference[reference["name"] != "pos"]
    both = combined[(combined["call"] == 0) & (combined["kind"] == "output")]
    both = both[both["name"] != "pos"]
    assert (both["ranks"] == WORLD).all()
    keys = ["name", "grad"]
    merged = both.merge(reference, on=keys, suffixes=("", "_ref"))
    assert len(merged) == len(reference) == len(both)
    for column in _scalar_columns(merged):
        atol = _sum_atol(merged) if column == "sum" else 1e-6
        assert _close(merged[column], merged[f"{column}_ref"], atol), column
    for a, b in zip(merged["hist"], merged["hist_ref"], strict=True):
        assert a == b
    # The extra forward pass of rank 1 stays one rank's.
    assert set(combined.loc[combined["call"] == 1, "ranks"]) == {1}


def test_ddp_parameter_gradients_are_recorded_before_the_all_reduce(
    ranks: list[dict[str, Any]],
) -> None:
    for seen in ranks:
        assert seen["ddp"]["averaged_differs"]  # else the test could not tell
        assert seen["ddp"]["grad_is_local"]
        assert not seen["ddp"]["grad_is_averaged"]


# -- FSDP2 -------------------------------------------------------------------------------


def test_fsdp_parameters_keep_their_names(ranks: list[dict[str, Any]]) -> None:
    frame = ranks[0]["fsdp"]["frame"]
    params = frame[frame["kind"] == "param"]
    for grad in (False, True):
        rows = params[params["grad"] == grad]
        for rank in range(WORLD):
            mine = rows[rows["rank"] == rank]
            pairs = zip(mine["name"], mine["attr"], strict=True)
            found = {f"{n}.{a}".lstrip(".") for n, a in pairs}
            assert found == {n for n, _ in tiny_model().named_parameters()}


def test_fsdp_sharded_parameters_combine_to_the_whole(ranks: list[dict[str, Any]]) -> None:
    combined = ranks[0]["fsdp"]["combined"]
    reference = ranks[0]["reference"]
    params = combined[combined["kind"] == "param"]
    assert (params["ranks"] == WORLD).all()
    for row in params.itertuples():
        name = f"{row.name}.{row.attr}".lstrip(".")
        expected = reference["grads" if row.grad else "params"][name]
        for column in _scalar_columns(params):
            want = expected[column]
            if row.grad and column != "numel":
                # FSDP averages the ranks' gradients: half the concatenated batch's.
                want = want / WORLD
            # float32 sums of many terms that nearly cancel: compare on the terms' scale.
            atol = 1e-5 * row.numel * max(abs(row.min), abs(row.max)) if column == "sum" else 1e-6
            assert _close(getattr(row, column), want, atol), (name, row.grad, column)


def test_fsdp_optimizer_state_is_recorded_from_the_local_shards(
    ranks: list[dict[str, Any]],
) -> None:
    frame = ranks[0]["fsdp"]["frame"]
    state = frame[frame["kind"] == "optimizer"]
    whole = {n: p.numel() for n, p in tiny_model().named_parameters()}
    expected = {f"{n}.{key}" for n in whole for key in ("exp_avg", "exp_avg_sq")}
    for rank in range(WORLD):
        mine = state[state["rank"] == rank]
        assert {
            f"{n}.{a}".lstrip(".") for n, a in zip(mine["name"], mine["attr"], strict=True)
        } == expected
    # Each rank's shard, not the whole tensor: the shards' element counts add up to it.
    for (name, attr), rows in state.groupby(["name", "attr"]):
        assert len(rows) == WORLD
        param = f"{name}.{attr.rsplit('.', 1)[0]}".lstrip(".")
        assert rows["numel"].sum() == whole[param], (name, attr)


def test_fsdp_outputs_combine_like_data_parallel_ones(ranks: list[dict[str, Any]]) -> None:
    combined = ranks[0]["fsdp"]["combined"]
    outputs = combined[combined["kind"] == "output"]
    ddp = ranks[0]["ddp"]["combined"]
    ddp = ddp[(ddp["kind"] == "output") & (ddp["call"] == 0)]
    merged = outputs.merge(ddp, on=["name", "grad"], suffixes=("", "_ddp"))
    assert len(merged) == len(outputs) == len(ddp)
    for column in _scalar_columns(merged):
        atol = _sum_atol(merged) if column == "sum" else 1e-6
        assert _close(merged[column], merged[f"{column}_ddp"], atol), column


# -- streaming ---------------------------------------------------------------------------


def test_each_rank_streams_its_part_and_load_merges_them(ranks: list[dict[str, Any]]) -> None:
    frame = ranks[0]["stream"]["frame"]
    assert ranks[0]["stream"]["world_size"] == WORLD
    steps = frame.groupby("rank")["step"].nunique().to_dict()
    assert steps == {0: 1, 1: 2}
    per_step = frame.groupby(["rank", "step"]).size()
    assert per_step.nunique() == 1  # every step records the same modules
