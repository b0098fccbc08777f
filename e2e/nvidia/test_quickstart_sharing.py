"""NVIDIA's quickstart time-slicing and MPS demo (manifests/gpu-test5) on an NVIDIA-compatible
cluster: one claim, two GPUs configured differently; each container lists the GPU of the
request it names, and only that one (see conftest.py for the prerequisites).
"""

from __future__ import annotations

from typing import Any

import pytest

from fakegpu.testkit.dra import attribute_value

pytestmark = pytest.mark.e2e


def test_time_sliced_and_mps_gpus_of_one_claim(quickstart: Any) -> None:  # gpu-test5
    quickstart.apply("gpu-test5")
    pod = quickstart.running("pod0")
    uuids = set()
    for request in ("ts-gpu", "mps-gpu"):
        (device,) = quickstart.devices(pod, "shared-gpus", request)
        uuids.add(attribute_value(device, "uuid"))
        prefix = request.split("-")[0]
        for container in (f"{prefix}-ctr0", f"{prefix}-ctr1"):
            assert quickstart.listing("pod0", container) == quickstart.gpu_lines([device])
    assert len(uuids) == 2, "both requests got the same GPU"
