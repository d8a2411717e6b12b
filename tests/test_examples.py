"""The example scripts run and report what they recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

pytestmark = pytest.mark.slow  # runs the example scripts


def test_stream_run_trains_streams_and_reads_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from examples.stream_run import main

    main([str(tmp_path / "run"), "--steps", "12", "--every", "3"])
    out = capsys.readouterr().out
    assert "records of 4 steps" in out  # steps 0, 3, 6, 9
    assert "notes: ['learning rate halved']" in out
    assert "No findings." in out
    assert (tmp_path / "run" / "records.blocks").exists()
    assert "report: " in out and (tmp_path / "run" / "report.html").exists()


def test_distributed_example_reports_a_gathered_run(capsys: pytest.CaptureFixture[str]) -> None:
    # `torchrun -m examples.distributed` itself runs two processes; here its report reads
    # two single-process recordings merged as `Tracker.gather` merges ranks.
    from examples.distributed import report
    from tensor_tracker import Tracker, track
    from tensor_tracker._persist.ranks import merge
    from tests.helpers import batch, tiny_model, train

    ranks = []
    for _ in range(2):
        model = tiny_model()
        t = track(model, stats=True, capture=("outputs", "params"))
        ranks.append(train(model, t, steps=2, tokens=batch()))
    run = Tracker(ranks[0].options.stash_fn)
    run.row_ranks = merge(list(enumerate(r.stashes for r in ranks)), run.stashes)
    for sharded in (False, True):
        report(run, sharded)
    out = capsys.readouterr().out
    assert "records per rank: {0: 220, 1: 220}" in out
    assert "head output over the global batch (2 ranks, 512 values)" in out
    assert "(rank 1)" in out and "(2 shards)" in out


def test_nanogpt_taps_record_what_ops_records() -> None:
    # The bench's floor of `ops=["softmax", "matmul", "add"]` (benchmarks/bench.py,
    # `ops_table`) is the model's own `tap` calls: the same values at the same points.
    import torch

    import tensor_tracker
    from examples.nanogpt import NanoGPT

    def records(taps: bool, **options: object) -> object:
        torch.manual_seed(0)
        model = NanoGPT(vocab=16, d_model=16, n_heads=2, n_layers=2, max_len=8, taps=taps)
        with tensor_tracker.track(model, stats=True, **options) as t:  # type: ignore[arg-type]
            model(torch.arange(8).view(1, 8) % 16).pow(2).mean().backward()
        frame = t.to_frame()
        return frame[frame["kind"].isin(["op", "tap"])][["name", "grad", "std", "max"]]

    ops = records(False, ops=["softmax", "matmul", "add"])
    taps = records(True)
    assert len(ops) == 2 * (1 + 2 * 5)  # embedding add; per block 3 attention ops, 2 adds
    assert ops.reset_index(drop=True).equals(taps.reset_index(drop=True))


def test_nanogpt_sdpa_computes_the_explicit_attention() -> None:
    import torch

    from examples.nanogpt import NanoGPT

    tokens = torch.randint(0, 16, (2, 8), generator=torch.Generator().manual_seed(0))
    outputs = []
    for sdpa in (False, True):
        torch.manual_seed(0)
        model = NanoGPT(vocab=16, d_model=16, n_heads=2, n_layers=2, max_len=8, sdpa=sdpa)
        outputs.append(model(tokens))
    torch.testing.assert_close(outputs[0], outputs[1])
