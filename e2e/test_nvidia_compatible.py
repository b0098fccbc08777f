"""What NVIDIA's manifests rely on, in whichever mode the cluster's plugins run (issue 13):
`--fakegpu-driver nvidia` (`fakegpu cluster up --driver nvidia`) gives gpu.nvidia.com with
NVIDIA's DeviceClasses; fakegpu's own mode the same shapes under its own domain.

Observed through the Kubernetes API and what pods see only.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes import client as kclient
from kubernetes.utils.quantity import parse_quantity

from fakegpu import drivers
from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit import k8s
from fakegpu.testkit.dra import (
    ResourceApi,
    allocation_results,
    attribute_value,
    cel_string,
    pod_claim_name,
    run_gpu_pod,
)

pytestmark = pytest.mark.e2e


def _domain(driver: str) -> str:
    return driver.removeprefix("gpu.")


def test_the_drivers_device_classes_are_nvidias_shape(fakegpu_cluster: ClusterInfo,
                                                      resource_api: ResourceApi) -> None:
    driver = fakegpu_cluster.driver_name
    classes = {c["metadata"]["name"]: c for c in resource_api.items("deviceclasses")}
    # NVIDIA's: gpu.nvidia.com for whole GPUs, mig.nvidia.com for MIG devices.
    for name, kind in ((driver, "gpu"), (f"mig.{_domain(driver)}", "mig")):
        assert name in classes, f"DeviceClass {name} missing (have {sorted(classes)})"
        exprs = [s["cel"]["expression"] for s in classes[name]["spec"]["selectors"]]
        assert any(f"device.driver == '{driver}'" in e and f"== '{kind}'" in e
                   for e in exprs), exprs
    extended = classes[driver]["spec"].get("extendedResourceName")
    # Kept by apiservers with DRAExtendedResource (1.34+ alpha, on in fakegpu's clusters).
    assert extended in (None, f"{_domain(driver)}/gpu"), extended


PCI_BUS_ID = "resource.kubernetes.io/pciBusID"


def test_index_attributes_follow_the_driver(fakegpu_cluster: ClusterInfo,
                                            resource_api: ResourceApi) -> None:
    """NVIDIA's current driver publishes no `index`, `minor` or MIG `parentIndex` (dropped
    after v25.3), so neither does fakegpu as NVIDIA's driver; fakegpu's own driver does."""
    driver = fakegpu_cluster.driver_name
    devices = [d for s in resource_api.slices(driver) for d in s["spec"].get("devices") or ()]
    assert devices, f"no devices of {driver}"
    published = {(d["name"], key) for d in devices for key in ("index", "minor", "parentIndex")
                 if attribute_value(d, key) is not None}
    if drivers.is_nvidia(driver):
        assert not published, f"NVIDIA's current driver has no such attributes: {published}"
    else:
        gpus = {d["name"] for d in devices if attribute_value(d, "type") == "gpu"}
        assert gpus <= {name for name, key in published if key == "index"}


def test_a_selector_on_the_pci_bus_id_gets_that_gpu(fakegpu_cluster: ClusterInfo,
                                                    core_v1: kclient.CoreV1Api,
                                                    resource_api: ResourceApi,
                                                    namespace: str) -> None:
    """Where NVIDIA's quickstart once selected by `index`, its driver now offers the standard
    `resource.kubernetes.io/pciBusID`: a selector on it gets exactly that GPU."""
    driver = fakegpu_cluster.driver_name
    gpus = [d for s in resource_api.slices(driver) for d in s["spec"].get("devices") or ()
            if attribute_value(d, "type") == "gpu"]
    bus_ids = sorted({attribute_value(d, PCI_BUS_ID) for d in gpus} - {None})
    assert bus_ids, f"no GPU of {driver} publishes {PCI_BUS_ID}"
    wanted = bus_ids[-1]  # the highest: not what an unconstrained allocation picks first
    pod: Any = run_gpu_pod(core_v1, resource_api, namespace, "p", fakegpu_cluster.workload_image,
                           driver, template="by-bus-id",
                           cel=[f"device.attributes[{cel_string('resource.kubernetes.io')}]"
                                f".pciBusID == {cel_string(wanted)}"])
    claim = resource_api.claim(namespace, pod_claim_name(pod, "gpu"))
    (result,) = allocation_results(claim, driver)
    (device,) = [d for s in resource_api.slices(driver, pod.spec.node_name)
                 if s["spec"]["pool"]["name"] == result["pool"]
                 for d in s["spec"].get("devices") or () if d["name"] == result["device"]]
    assert attribute_value(device, PCI_BUS_ID) == wanted
    env = k8s.parse_env(k8s.exec_in_pod(core_v1, namespace, "p", ["env"]).stdout)
    assert env.get("NVIDIA_VISIBLE_DEVICES") == attribute_value(device, "uuid")


@pytest.mark.parametrize("policy", ["memory", "unlimited", "4"])
def test_the_apiserver_keeps_nvidias_consumable_shares_shape(fakegpu_cluster: ClusterInfo,
                                                             resource_api: ResourceApi,
                                                             policy: str) -> None:
    """`fakegpu plugin run --driver nvidia --consumable-shares POLICY` publishes NVIDIA main's
    request policies: a slice of one published GPU in that shape, in a pool of its own, is
    stored as sent (a policy the apiserver rejects or drops would fail here)."""
    from fakegpu.plugin.shape import apply_shares

    driver = fakegpu_cluster.driver_name
    published = [s for s in resource_api.slices(driver) if s["spec"].get("devices")]
    assert published, f"no devices of {driver}"
    spec = published[0]["spec"]
    gpu = copy.deepcopy(next(d for d in spec["devices"] if attribute_value(d, "type") == "gpu"))
    gpu.pop("taints", None)
    memory = int(parse_quantity(gpu["capacity"]["memory"]["value"]))  # type: ignore[no-untyped-call]
    apply_shares(gpu, policy, memory)
    name = f"shares-check-{policy}"
    resource_api.delete("resourceslices", name)
    stored = resource_api.create("resourceslices", {
        "kind": "ResourceSlice", "metadata": {"name": name},
        "spec": {"driver": driver, "nodeName": spec["nodeName"],
                 "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                 "devices": [gpu]}})
    try:
        (kept,) = stored["spec"]["devices"]
        assert kept.get("allowMultipleAllocations") is True, kept
        assert kept["capacity"] == gpu["capacity"], (kept["capacity"], gpu["capacity"])
    finally:
        resource_api.delete("resourceslices", name)
