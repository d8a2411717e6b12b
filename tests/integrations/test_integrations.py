"""The Hugging Face Trainer and PyTorch Lightning callbacks, with the real libraries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from tensor_tracker import track
from tensor_tracker.integrations import hf_trainer_callback, lightning_callback


class Regressor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def forward(self, x: Tensor, labels: Tensor | None = None) -> dict[str, Tensor]:
        out = self.layer(x)
        loss = nn.functional.mse_loss(out, labels) if labels is not None else out.sum()
        return {"loss": loss, "logits": out}


def test_hf_trainer_callback_steps_the_tracker(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    torch.manual_seed(0)
    data = [{"x": torch.randn(4), "labels": torch.randn(1)} for _ in range(24)]
    model = Regressor()
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=6,
        per_device_train_batch_size=4,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    with track(model, stats=True, include="^layer$", every=2) as t:
        trainer = transformers.Trainer(
            model=model, args=args, train_dataset=data, callbacks=[hf_trainer_callback(t)]
        )
        trainer.train()
    assert sorted({s.step for s in t}) == [0, 2, 4]
    assert {(s.step, s.grad) for s in t} == {(k, g) for k in (0, 2, 4) for g in (False, True)}


@pytest.mark.slow  # imports Lightning: 5 s of CPU in a fresh worker
def test_lightning_callback_counts_optimizer_steps() -> None:
    pl = pytest.importorskip("pytorch_lightning")

    class Module(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Tensor:
            x, y = batch
            loss: Tensor = nn.functional.mse_loss(self.layer(x), y)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    dataset = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    loader = torch.utils.data.DataLoader(dataset, batch_size=4)
    module = Module()
    with track(module, include="^layer$", grad=False) as t:
        trainer = pl.Trainer(
            max_steps=3,
            accumulate_grad_batches=2,
            accelerator="cpu",
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[lightning_callback(t)],
        )
        trainer.fit(module, loader)
    # Two batches per optimizer step: calls 0 and 1 of each step.
    assert [(s.step, s.call) for s in t] == [(k, c) for k in range(3) for c in range(2)]
