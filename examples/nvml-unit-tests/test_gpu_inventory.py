"""Unit tests of gpu_inventory against fake GPUs: no GPU, no cluster, no root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpu_inventory import usable_gpus


def test_every_gpu_of_a_dgx_h100_is_usable(fakegpu_nvml):
    fakegpu_nvml("dgx-h100")
    usable, broken = usable_gpus()
    assert broken == []
    assert [g.index for g in usable] == list(range(8))
    assert all("H100" in g.name and g.memory_mib > 80_000 for g in usable)
    assert len({g.uuid for g in usable}) == 8


def test_a_lost_gpu_and_an_ecc_error_are_not_usable(fakegpu_nvml):
    gpus = fakegpu_nvml("dgx-h100")
    gpus.inject("gpu-lost", gpu=3)
    gpus.inject("ecc-dbe", gpu=5)
    usable, broken = usable_gpus()
    assert broken == [3, 5]
    assert [g.index for g in usable] == [0, 1, 2, 4, 6, 7]
    gpus.clear()
    assert usable_gpus()[1] == []


def test_a_subprocess_sees_the_same_gpus(fakegpu_nvml):
    gpus = fakegpu_nvml("dgx-h100")
    gpus.inject("gpu-lost", gpu=0)
    # A child process finds the library through LD_LIBRARY_PATH (.env), no preload needed.
    out = subprocess.run(
        [sys.executable, "-c", "from gpu_inventory import usable_gpus; print(usable_gpus()[1])"],
        env={**os.environ, **gpus.env}, cwd=Path(__file__).parent,
        capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[0]"
