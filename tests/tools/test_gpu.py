"""`./dev gpu` (benchmarks/gpu.py): without CUDA it runs nothing, says so and writes its JSON;
its lists of tests name tests that exist, and every test that skips without CUDA."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a Python process that imports torch
def test_without_cuda_it_says_so_writes_the_json_and_exits_0(tmp_path: Path) -> None:
    out = tmp_path / "gpu" / "results.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no CUDA, also on a GPU machine
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu.py", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("CUDA is not available"), done.stdout
    assert str(out) in lines[0]
    results = json.loads(out.read_text())
    assert results["status"] == "no CUDA" and results["parts"] == {}
    assert list(results["would_run"]) == ["tests", "syncs", "cost", "summary"]
    assert results["torch"] and isinstance(results["missing_packages"], list)


def _listed(name: str) -> list[str]:
    text = (ROOT / "benchmarks" / "gpu_parts.py").read_text()
    block = re.search(rf"^{name} = \[(.*?)^\]", text, re.S | re.M)
    assert block is not None, name
    return re.findall(r'"(tests/[^"]+)"', block.group(1))


def test_the_listed_tests_exist_and_every_cuda_only_test_is_listed() -> None:
    cuda, device = _listed("CUDA_TESTS"), _listed("DEVICE_TESTS")
    for entry in cuda + device:
        path, _, name = entry.partition("::")
        source = (ROOT / path).read_text()
        assert not name or re.search(rf"^def {name}\(", source, re.M), entry
        if entry in device:
            signature = re.search(rf"^def {name}\((.*?)\) ->", source, re.M | re.S)
            assert signature and "device: torch.device" in signature.group(1), entry
    # A test that skips without CUDA is in a listed file, or listed by name.
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        source = path.read_text()
        relative = path.relative_to(ROOT).as_posix()
        for match in re.finditer(r"cuda\.is_available\(\)", source):
            if relative in cuda:
                continue
            following = re.search(r"^def (\w+)\(", source[match.end() :], re.M)
            assert following and f"{relative}::{following.group(1)}" in cuda, (relative, match)
