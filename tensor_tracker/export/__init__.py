"""Exporters: a recording written into other tools' formats (TensorBoard)."""

from ._tensorboard import tensorboard_tag, to_tensorboard

__all__ = ["tensorboard_tag", "to_tensorboard"]
