"""NVIDIA's quickstart time-slicing and MPS demo (manifests/gpu-test5) on an NVIDIA-compatible
cluster: one claim, two GPUs configured differently; each container lists the GPU of the
request it names, and only that one (see conftest.py for the prerequisites).
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.e2e


def test_time_sliced_and_mps_gpus_of_one_claim(quickstart: Any) -> None:  # gpu-test5
    quickstart.check_time_sliced_and_mps()
