"""data/depth: repeated blocks and roles from module names, and leaf modules."""

from __future__ import annotations

from examples.zoo import ResNet18
from tensor_tracker._data.depth import BLOCK_ROLE, depth_layout, leaf_names


def test_blocks_roles_and_lone_modules_in_execution_order() -> None:
    names = ["emb", "layers.0.fc", "layers.0.act", "layers.1.fc", "layers.1.act", "head"]
    depth = depth_layout(names)
    assert depth.slots == ("emb", "layers.0", "layers.1", "head")
    assert depth.is_block == (False, True, True, False)
    assert depth.roles == ("fc", "act")
    assert depth.place["layers.1.act"] == (2, "act")
    assert depth.place["head"] == (3, None)
    assert depth.grouped


def test_the_outermost_repeated_index_is_the_block() -> None:
    names = [n for n, _ in ResNet18().named_modules()]
    depth = depth_layout(leaf_names(names))
    assert depth.slots[:4] == ("conv1", "bn1", "relu", "maxpool")
    assert depth.slots[4:12] == tuple(f"layer{i}.{j}" for i in range(1, 5) for j in (0, 1))
    assert depth.slots[12:] == ("avgpool", "fc")
    # downsample.0 is inside block layer2.0, not a block of its own.
    assert depth.place["layer2.0.downsample.0"] == (6, "downsample.0")
    assert depth.roles == ("conv1", "bn1", "relu", "conv2", "bn2", "downsample.0", "downsample.1")


def test_a_single_index_is_not_a_repeated_block() -> None:
    depth = depth_layout(["stem", "stages.0.conv", "stages.0.norm", "head.0"])
    assert not depth.grouped
    assert depth.slots == ("stem", "stages.0.conv", "stages.0.norm", "head.0")


def test_a_sequential_of_modules_is_blocks_of_one_module() -> None:
    depth = depth_layout(["0", "1", "2", ""])
    assert depth.slots == ("0", "1", "2", "<model>")
    assert depth.roles == (BLOCK_ROLE,)


def test_leaf_names_keep_order_and_drop_parents() -> None:
    assert leaf_names(["", "a", "a.b", "a.c", "d", "a.b"]) == ["a.b", "a.c", "d"]
    assert leaf_names([""]) == [""]
    assert leaf_names(["ab", "a"]) == ["ab", "a"]  # "a" is not a parent of "ab"
