"""`Clock`: step numbers, kinds and `every=`, without a model."""

from __future__ import annotations

from tensor_tracker._core.clock import Clock
from tensor_tracker._core.options import Options


def test_every_counts_the_steps_of_each_kind_apart() -> None:
    clock = Clock(Options(every={"default": 3, "eval": 2}).every_of)
    seen = []
    for kind in ["default", "eval", "default", "eval", "default", "eval", "default"]:
        clock.advance(None, kind)
        seen.append((clock.step, clock.kind, clock.recording))
    # Step 0 is the first default step; each kind keeps its own pace.
    assert seen == [
        (1, "default", False),
        (2, "eval", True),
        (3, "default", False),
        (4, "eval", False),
        (5, "default", True),
        (6, "eval", True),
        (7, "default", False),
    ]
    assert clock.kinds == {2: "eval", 4: "eval", 6: "eval"}


def test_a_chosen_step_number_and_the_count() -> None:
    clock = Clock(lambda kind: 1)
    clock.advance(100, "default")
    clock.advance(None, "default")
    clock.advance(5, "default")
    assert (clock.step, clock.count, clock.kinds) == (5, 3, {})
