from __future__ import annotations

import pytest

from fakegpu.kubeletplugin.claims import ClaimError, ClaimRef
from fakegpu.plugin import cdi
from fakegpu.plugin.prepare import plan_claim, prepared_claim

from .helpers import DRIVER, NODE, claim, inventory

DEVICES = inventory().by_name()
REF = ClaimRef("default", "c1", "uid-1")


def test_plan_takes_this_drivers_results_for_this_node() -> None:
    obj = claim("c1", "uid-1", ["gpu-1", "gpu-3"])
    # A result of another driver in the same claim is not ours to prepare.
    obj["status"]["allocation"]["devices"]["results"].append(
        {"request": "nic", "driver": "nic.example.com", "pool": NODE, "device": "eth0"})
    plan = plan_claim(obj, REF, DRIVER, NODE, DEVICES)
    assert [d.device.name for d in plan.devices] == ["gpu-1", "gpu-3"]
    assert not plan.admin_access
    prepared = prepared_claim(plan, DRIVER, NODE, "i1")
    # The first device of a request also carries the request's device metadata file.
    assert [d.cdi_device_ids for d in prepared.devices] == [
        ("gpu.fakegpu.dev/gpu=uid-1-gpu-1", "gpu.fakegpu.dev/gpu=uid-1-metadata-gpus"),
        ("gpu.fakegpu.dev/gpu=uid-1-gpu-3",)]
    assert prepared.cdi_spec == "gpu_fakegpu_dev-claim_uid-1.json"
    assert all(d.pool_name == NODE and d.request_names == ("gpus",) for d in prepared.devices)


@pytest.mark.parametrize(("obj", "message"), [
    (claim("c1", "uid-1", [], allocated=False), "is not allocated"),
    (claim("c1", "uid-1", ["gpu-0"], pool="node-b"), "another node"),
    (claim("c1", "uid-1", ["gpu-0"], driver="other.example.com"), "no devices allocated"),
    (claim("c1", "uid-1", ["gpu-9"]), "unknown device 'gpu-9'"),
    (claim("c1", "uid-OTHER", ["gpu-0"]), "recreated"),
])
def test_plan_rejects_bad_claims(obj: dict[str, object], message: str) -> None:
    with pytest.raises(ClaimError, match=message):
        plan_claim(obj, REF, DRIVER, NODE, DEVICES)


def test_admin_access_sets_the_env_and_visible_devices_list_uuids() -> None:
    plan = plan_claim(claim("c1", "uid-1", ["gpu-0", "gpu-2"], admin=True), REF, DRIVER, NODE,
                      DEVICES)
    spec = cdi.build_spec(DRIVER, plan)
    env = spec["containerEdits"]["env"]
    assert "DRA_ADMIN_ACCESS=true" in env
    assert f"NVIDIA_VISIBLE_DEVICES={DEVICES['gpu-0'].uuid},{DEVICES['gpu-2'].uuid}" in env
    assert spec["kind"] == "gpu.fakegpu.dev/gpu"
    assert [d["name"] for d in spec["devices"]] == ["uid-1-gpu-0", "uid-1-gpu-2"]
    assert f"FAKEGPU_DEVICE_GPU_2_UUID={DEVICES['gpu-2'].uuid}" in \
        spec["devices"][1]["containerEdits"]["env"]
    plain = cdi.build_spec(DRIVER, plan_claim(claim("c1", "uid-1", ["gpu-0"]), REF, DRIVER, NODE,
                                              DEVICES))
    assert not any(e.startswith("DRA_ADMIN_ACCESS") for e in plain["containerEdits"]["env"])
