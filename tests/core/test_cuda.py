"""CUDA-only checks (skipped where there is no GPU): no host synchronisation in stats mode."""

from __future__ import annotations

import pytest
import torch

from examples.tiny_transformer import TinyTransformer, copy_task_batch
from tensor_tracker import stats, track

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize(
    "spec",
    [True, [*stats.NAMES], [*stats.DEFAULT, stats.histogram(sample_n=256, reject_sigma=6.0)]],
    ids=["default", "all", "histogram"],
)
def test_stats_mode_forward_backward_never_synchronises(spec: object) -> None:
    torch.manual_seed(0)
    model = TinyTransformer(vocab=32, d_model=64, n_layers=2).cuda()
    tokens, _ = copy_task_batch(4, 16, 32)
    tokens = tokens.cuda()
    mask = torch.zeros(4, 16, dtype=torch.bool, device="cuda")
    model(tokens, padding_mask=mask).sum().backward()  # warm-up outside the check
    torch.cuda.synchronize()
    with track(model, stats=spec, capture=("outputs", "inputs", "params")) as t:
        torch.cuda.set_sync_debug_mode("error")
        try:
            model(tokens, padding_mask=mask).square().mean().backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    df = t.to_frame()
    assert len(df) > 0 and df["numel"].gt(0).all()


def test_stats_stay_on_the_device_until_read() -> None:
    model = torch.nn.Linear(8, 8).cuda()
    with track(model, stats=True) as t:
        model(torch.randn(4, 8, device="cuda")).sum().backward()
    assert all(s.first_value.raw.is_cuda for s in t)
