"""Issue #15, in one process: several ranks' records in one tracker (`persist.ranks`), as
`Tracker.gather` builds it (here from parts made by hand) and as `load` reads a run
directory of `rank-N` recordings; outside `torch.distributed` nothing changes."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

import tensor_tracker
from tensor_tracker import Stash, Tracker, track
from tensor_tracker._persist.ranks import merge, part_of
from tensor_tracker.errors import ArgumentValueError, RecordingError, TrackerStateError
from tests.helpers import batch, tiny_model, train


def _run(rank: int, **options: object) -> Tracker:
    model = tiny_model()
    tokens = batch(seq=4 + 2 * rank)  # ranks see different data, and a different amount
    return train(model, track(model, **options), steps=1 + rank, tokens=tokens)


def test_outside_distributed_there_is_no_rank_and_nothing_to_gather() -> None:
    t = _run(0, stats=True)
    assert (t.rank, t.world_size) == (None, None)
    assert "rank" not in t.to_frame().columns
    with pytest.raises(TrackerStateError, match="not initialised"):
        t.gather()


@pytest.mark.parametrize("options", [{"stats": True}, {}], ids=["stats", "copies"])
def test_parts_travel_pickled_and_merge_in_rank_order(options: dict[str, object]) -> None:
    ranks = [_run(r, **options) for r in range(2)]
    ranks[0].stashes.append(Stash("by hand", torch.nn.Identity, False, torch.ones(2)))
    parts = [pickle.loads(pickle.dumps(part_of(t.stashes, r, 2))) for r, t in enumerate(ranks)]
    merged = Tracker(ranks[0]._stash_fn)
    merged.row_ranks = merge(parts, merged.stashes)
    frame = merged.to_frame()
    assert frame["rank"].tolist() == [0] * len(ranks[0]) + [1] * len(ranks[1])
    for r, t in enumerate(ranks):
        mine = frame[frame["rank"] == r].drop(columns="rank").reset_index(drop=True)
        assert mine.equals(t.to_frame()), r


def test_combined_merges_each_tensor_over_the_ranks() -> None:
    ranks = [_run(r, stats=True) for r in range(2)]
    merged = Tracker(ranks[0]._stash_fn)
    merged.row_ranks = merge([(r, t.stashes) for r, t in enumerate(ranks)], merged.stashes)
    combined = merged.combined()
    rows = combined[(combined["name"] == "head") & ~combined["grad"]]
    assert rows["ranks"].tolist() == [2, 1]  # step 0 on both ranks, step 1 on rank 1 only
    # The logits of both ranks, as one tensor: (2 x 4 + 2 x 6 tokens) x 16.
    assert rows["numel"].tolist() == [(2 * 4 + 2 * 6) * 16, 2 * 6 * 16]
    single = ranks[0].combined()
    assert (single["ranks"] == 1).all() and len(single) == len(ranks[0])


def test_load_reads_a_run_directory_of_rank_parts(tmp_path: Path) -> None:
    ranks = [_run(r, stats=True) for r in range(2)]
    for r, t in enumerate(ranks):
        t.save(tmp_path / "run" / f"rank-{r}")
    run = tensor_tracker.load(tmp_path / "run")
    assert run.world_size == 2
    frame = run.to_frame()
    assert frame.groupby("rank").size().to_dict() == {0: len(ranks[0]), 1: len(ranks[1])}
    one = tensor_tracker.load(tmp_path / "run" / "rank-1")  # each part is a recording
    assert "rank" not in one.to_frame().columns and len(one) == len(ranks[1])


class _DictOut(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"y": 2 * x}


def test_combined_reads_statistics_kept_in_objects_too() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), _DictOut())
    parts = []
    xs = [torch.randn(4, 3), torch.randn(2, 3)]
    for rank, x in enumerate(xs):
        with track(model, stats=["mean", "max", "numel"], grad=False) as t:
            model(x)
        parts.append((rank, t.stashes))
    merged = Tracker(t._stash_fn)
    merged.row_ranks = merge(parts, merged.stashes)
    combined = merged.combined()
    assert combined["name"].tolist() == ["0", "1", ""]  # recording order
    with torch.no_grad():
        whole = 2 * model[0](torch.cat(xs))
    row = combined[combined["name"] == "1"].iloc[0]
    assert (row["ranks"], row["numel"]) == (2, whole.numel())
    assert row["max"] == pytest.approx(whole.max().item())
    assert row["mean"] == pytest.approx(whole.mean().item())


# Issue #26 item 2: ranks that recorded different statistics. Each rank's rows are read
# with its own layout; a statistic a rank did not record is NaN on its rows.
_RANK_STATS: list[object] = [
    True,
    ["mean", "fp16_overflow"],
    [tensor_tracker.stats.histogram(bins=4, range=(-4.0, 4.0))],
]


def _check_each_rank_as_recorded(merged: Tracker, ranks: list[Tracker]) -> None:
    frame = merged.to_frame()
    names = {n for t in ranks for n in t._stash_fn.stash_value.names}  # type: ignore[attr-defined]
    assert names <= set(frame.columns)
    assert frame["rank"].tolist() == [r for r, t in enumerate(ranks) for _ in range(len(t))]
    for r, t in enumerate(ranks):
        mine = frame[frame["rank"] == r].reset_index(drop=True)
        own = t.to_frame()
        recorded = set(t._stash_fn.stash_value.names)  # type: ignore[attr-defined]
        for name in sorted(names):
            if name in recorded:
                assert mine[name].tolist() == own[name].tolist(), (r, name)
            elif name != "numel":  # every rank's element counts are known
                assert all(
                    torch.tensor(v, dtype=torch.float64).isnan().all() for v in mine[name]
                ), (r, name)
    # Values read one by one agree with the frame (the stash's own Stats).
    own_last = ranks[2][len(ranks[2]) - 1].value[0]
    last = merged[len(merged) - 1].value[0]
    assert last["hist"].tolist() == own_last["hist"].tolist()
    assert torch.isnan(last["mean"]) and int(last["numel"]) == own_last.numel


def _ranks_with_different_statistics() -> list[Tracker]:
    return [_run(r, stats=spec) for r, spec in enumerate(_RANK_STATS)]


def test_gathered_ranks_with_different_statistics_keep_their_own_values() -> None:
    ranks = _ranks_with_different_statistics()
    parts = [pickle.loads(pickle.dumps(part_of(t.stashes, r, 3))) for r, t in enumerate(ranks)]
    merged = Tracker._of_ranks(ranks[0]._stash_fn, parts, [])
    _check_each_rank_as_recorded(merged, ranks)
    with pytest.raises(TrackerStateError, match="different statistics"):
        merged.combined()


def test_loaded_ranks_with_different_statistics_keep_their_own_values(tmp_path: Path) -> None:
    ranks = _ranks_with_different_statistics()
    for r, t in enumerate(ranks):
        t.save(tmp_path / "run" / f"rank-{r}")
    run = tensor_tracker.load(tmp_path / "run")
    _check_each_rank_as_recorded(run, ranks)
    # The merged tracker saves and loads back as it is.
    run.save(tmp_path / "merged")
    again = tensor_tracker.load(tmp_path / "merged").to_frame()
    assert again.drop(columns=["hist"]).equals(run.to_frame().drop(columns=["rank", "hist"])), (
        "save/load of the merged tracker"
    )


def test_ranks_with_copies_and_ranks_with_statistics_do_not_merge(tmp_path: Path) -> None:
    ranks = [_run(0, stats=True), _run(1)]
    for r, t in enumerate(ranks):
        t.save(tmp_path / f"rank-{r}")
    with pytest.raises(RecordingError, match="rank 1 recorded full copies"):
        tensor_tracker.load(tmp_path)


# -- issue 35, item 11: a run directory is checked before it is read ---------------------


def test_a_run_directory_with_missing_ranks_warns_and_a_duplicate_is_refused(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    for rank in (0, 5, 6):
        _run(rank, stats=True).save(run / f"rank-{rank}")
    with pytest.warns(RuntimeWarning, match=r"no recording of rank\(s\) 1-4: read the 3"):
        loaded = tensor_tracker.load(run)
    assert loaded.world_size == 7
    assert sorted(set(loaded.to_frame()["rank"])) == [0, 5, 6]
    _run(0, stats=True).save(run / "rank-00")
    with pytest.raises(RecordingError, match=r"rank-0+ and rank-0+ both name rank 0"):
        tensor_tracker.load(run)


def test_gather_refuses_a_dst_outside_the_group(tmp_path: Path) -> None:
    import torch.distributed as dist

    store = tmp_path / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    try:
        t = _run(0, stats=True)
        with pytest.raises(ArgumentValueError, match=r"gather\(dst=5\).*ranks 0 to 0"):
            t.gather(dst=5)
        assert t.gather(dst=0) is not None
    finally:
        dist.destroy_process_group()


# Issue 35 item 13: statistics per channel / per sample and block-format ones on some
# ranks only ("unknown statistic {'custom': PerAxis(...)}" before).
_RANK_VECTORS: list[object] = [
    True,
    ["mean", tensor_tracker.stats.per_channel("abs_max")],
    [
        tensor_tracker.stats.blocks("mxfp8_e4m3_error", dim=0, suffix="_dim0"),
        tensor_tracker.stats.per_sample("rms"),
    ],
]


@pytest.mark.parametrize("how", ["gathered", "loaded"])
def test_ranks_with_vectors_or_blocks_on_some_ranks_merge(tmp_path: Path, how: str) -> None:
    ranks = [_run(r, stats=spec) for r, spec in enumerate(_RANK_VECTORS)]
    if how == "gathered":
        parts = [pickle.loads(pickle.dumps(part_of(t.stashes, r, 3))) for r, t in enumerate(ranks)]
        merged = Tracker._of_ranks(ranks[0]._stash_fn, parts, [])
    else:
        for r, t in enumerate(ranks):
            t.save(tmp_path / "run" / f"rank-{r}")
        merged = tensor_tracker.load(tmp_path / "run")
    frame = merged.to_frame()
    columns = {c for t in ranks for c in t.to_frame().columns}
    assert columns <= set(frame.columns)
    for r, t in enumerate(ranks):
        mine = frame[frame["rank"] == r].reset_index(drop=True)
        own = t.to_frame()
        for name in sorted(columns - {"name", "type", "grad", "kind", "attr"}):
            for got, expected in zip(mine[name], own.get(name, [None] * len(mine)), strict=True):
                got = np.asarray(got, dtype=np.float64)
                if expected is None:  # not recorded on this rank: NaN, or an empty vector
                    # (every rank's element counts are known)
                    assert name == "numel" or got.size == 0 or np.isnan(got).all(), (r, name)
                else:
                    expected = np.asarray(expected, dtype=np.float64)
                    assert np.array_equal(got, expected, equal_nan=True), (r, name)
