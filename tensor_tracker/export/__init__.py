"""Exporters: a recording as a self-contained HTML report, or in other tools' formats
(TensorBoard, wandb)."""

from ._report import report
from ._tensorboard import tensorboard_tag, to_tensorboard
from ._wandb import to_wandb

__all__ = ["report", "tensorboard_tag", "to_tensorboard", "to_wandb"]
