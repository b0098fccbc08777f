"""What NVIDIA's manifests rely on, in whichever mode the cluster's plugins run (issue 13):
`--fakegpu-driver nvidia` (`fakegpu cluster up --driver nvidia`) gives gpu.nvidia.com with
NVIDIA's DeviceClasses; fakegpu's own mode the same shapes under its own domain.

Observed through the Kubernetes API and what pods see only.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as kclient

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


def test_a_selector_on_index_gets_that_gpu(fakegpu_cluster: ClusterInfo,
                                          core_v1: kclient.CoreV1Api,
                                          resource_api: ResourceApi, namespace: str) -> None:
    driver = fakegpu_cluster.driver_name
    gpus = [d for s in resource_api.slices(driver) for d in s["spec"].get("devices") or ()
            if attribute_value(d, "type") == "gpu"]
    indexes = sorted({attribute_value(d, "index") for d in gpus} - {None})
    assert indexes, f"no GPU of {driver} publishes an index attribute"
    wanted = indexes[-1]  # the highest: not what an unconstrained allocation picks first
    pod: Any = run_gpu_pod(core_v1, resource_api, namespace, "p", fakegpu_cluster.workload_image,
                           driver, template="by-index",
                           cel=[f"device.attributes[{cel_string(driver)}].index == {wanted}"])
    claim = resource_api.claim(namespace, pod_claim_name(pod, "gpu"))
    (result,) = allocation_results(claim, driver)
    (device,) = [d for s in resource_api.slices(driver, pod.spec.node_name)
                 if s["spec"]["pool"]["name"] == result["pool"]
                 for d in s["spec"].get("devices") or () if d["name"] == result["device"]]
    assert attribute_value(device, "index") == wanted
    env = k8s.parse_env(k8s.exec_in_pod(core_v1, namespace, "p", ["env"]).stdout)
    assert env.get("NVIDIA_VISIBLE_DEVICES") == attribute_value(device, "uuid")
