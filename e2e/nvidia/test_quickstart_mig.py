"""NVIDIA's quickstart MIG demo (manifests/gpu-test4) on an NVIDIA-compatible cluster of the
partitioning topology: four MIG devices of one parent, one per container; each container's
`nvidia-smi -L` shows the parent GPU and only its own MIG device, as NVIDIA's driver gives it
(see conftest.py for the prerequisites).
"""

from __future__ import annotations

from typing import Any

import pytest

from fakegpu.testkit.dra import attribute_value

pytestmark = [pytest.mark.e2e, pytest.mark.topology("partitioning")]

REQUESTS = {"ctr0": "mig-1g-5gb-0", "ctr1": "mig-1g-5gb-1", "ctr2": "mig-2g-10gb",
            "ctr3": "mig-3g-20gb"}


# serial: NVIDIA's gpu-test4: all four MIG devices of the only GPU that has them.
@pytest.mark.serial
def test_mig_devices_of_one_parent_one_per_container(quickstart: Any) -> None:  # gpu-test4
    quickstart.apply("gpu-test4")
    pod = quickstart.running("pod")
    parents = set()
    for container, request in REQUESTS.items():
        (device,) = quickstart.devices(pod, "mig-devices", request)
        parents.add(attribute_value(device, "parentUUID"))
        listing = quickstart.listing("pod", container)
        assert quickstart.mig_seen(listing) == quickstart.mig_lines(device), container
    assert len(parents) == 1, f"the MIG devices have several parents: {parents}"
