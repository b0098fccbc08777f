"""What NVIDIA's manifests rely on, in whichever mode the cluster's plugins run (issue 13):
`--fakegpu-driver nvidia` (`fakegpu cluster up --driver nvidia`) gives gpu.nvidia.com with
NVIDIA's DeviceClasses; fakegpu's own mode the same shapes under its own domain.

Observed through the Kubernetes API and what pods see only.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as kclient

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
