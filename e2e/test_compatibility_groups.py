"""Device compatibility groups (KEP-5963, DRADeviceCompatibilityGroups, alpha from 1.37): one
GPU used as MIG devices or as time-sliced shares, never both at once, refused at scheduling.

Runs on ``mig-modes``: one H100 whose plugin publishes it whole, as every MIG placement (dynamic
MIG, created at prepare) and as four time-sliced shares of a quarter of its memory each. The
shares and the MIG devices draw on one counter set, where a share and a small MIG device fit
together; what keeps them apart is the groups of their counter consumption ("time-sliced" and
"mig"), which the scheduler requires to intersect. So a pod asking for the other kind stays
Pending, unallocated, with the scheduler's verdict, instead of failing at prepare on the node.
Every check reads the API and what pods see: another driver publishing such groups passes too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from kubernetes import client as kclient
from kubernetes.utils.quantity import parse_quantity

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.drivers import mig_class
from fakegpu.plugin.partitions import fits
from fakegpu.testkit import k8s
from fakegpu.testkit.dra import (
    PodClaim,
    ResourceApi,
    allocated_devices,
    assert_pending,
    attribute_value,
    cel_string,
    node_devices,
    pod_claim_name,
    pod_manifest,
)
from fakegpu.testkit.gpus import visible_gpus
from fakegpu.testkit.minors import skip_without

pytestmark = [pytest.mark.e2e, pytest.mark.topology("mig-modes")]

SHARE = 'has(device.attributes["fakegpu.dev"].timeSlice)'
PROFILE = "1g.10gb"


@pytest.fixture(autouse=True)
def _needs_groups(fakegpu_cluster: ClusterInfo, resource_api: ResourceApi) -> None:
    skip_without(fakegpu_cluster, "DRADeviceCompatibilityGroups",
                 "device compatibility groups")
    if not any(_groups(d) for d in _devices(resource_api, fakegpu_cluster.driver_name)):
        pytest.skip(f"MISSING PREREQUISITE: {fakegpu_cluster.driver_name} publishes no device "
                    "with compatibility groups (fakegpu's NVIDIA-compatible mode has no "
                    "time-sliced shares)")


def _devices(api: ResourceApi, driver: str) -> list[dict[str, Any]]:
    return [d for devices in node_devices(api, driver).values() for d in devices]


def _consumption(device: Mapping[str, Any]) -> Mapping[str, Any]:
    [one] = (device.get("basic") or device).get("consumesCounters") or [{}]
    return dict(one)


def _groups(device: Mapping[str, Any]) -> set[str]:
    return set(_consumption(device).get("compatibilityGroups") or ())


def _values(counters: Mapping[str, Any]) -> dict[str, int]:
    return {k: int(parse_quantity(v["value"]))  # type: ignore[no-untyped-call]
            for k, v in counters.items()}


def _counters(device: Mapping[str, Any]) -> dict[str, int]:
    return _values(_consumption(device).get("counters") or {})


def _counter_set(api: ResourceApi, driver: str, name: str) -> dict[str, int]:
    for s in api.slices(driver):
        for cs in s["spec"].get("sharedCounters") or ():
            if cs["name"] == name:
                return _values(cs["counters"])
    raise AssertionError(f"no slice of {driver} has the counter set {name}")


def test_shares_and_mig_devices_consume_one_counter_set_in_disjoint_groups(
    fakegpu_cluster: ClusterInfo, resource_api: ResourceApi
) -> None:
    driver = fakegpu_cluster.driver_name
    devices = _devices(resource_api, driver)
    shares = [d for d in devices if attribute_value(d, "fakegpu.dev/timeSlice") is not None]
    migs = [d for d in devices if attribute_value(d, "type") == "mig"
            and attribute_value(d, "profile") == PROFILE]
    assert len(shares) == 4 and migs, [d["name"] for d in devices]
    assert {frozenset(_groups(d)) for d in shares} == {frozenset({"time-sliced"})}
    assert {frozenset(_groups(d)) for d in migs} == {frozenset({"mig"})}
    share, mig = shares[0], migs[0]
    counter_set = _consumption(share)["counterSet"]
    assert _consumption(mig)["counterSet"] == counter_set
    # The counters alone would let a share and a MIG device be allocated together: only the
    # groups, which do not intersect, keep them apart.
    available = _counter_set(resource_api, driver, counter_set)
    assert fits(available, [_counters(share), _counters(mig)]), (share, mig, available)


def _share_pod(core: kclient.CoreV1Api, api: ResourceApi, namespace: str, image: str,
               name: str, driver: str) -> None:
    api.create("resourceclaims", api.claim_manifest(
        name, [api.device_request("gpu", driver, cel=[SHARE])]), namespace)
    core.create_namespaced_pod(namespace, pod_manifest(  # type: ignore[arg-type]
        name, image, k8s.PRINT_ENV_AND_WAIT, [PodClaim("gpu", claim=name)]))


def _mig_pod(core: kclient.CoreV1Api, api: ResourceApi, namespace: str, image: str,
             name: str, driver: str) -> None:
    profile = f"device.attributes[{cel_string(driver)}].profile == {cel_string(PROFILE)}"
    api.create("resourceclaimtemplates", api.claim_template(
        name, [api.device_request("mig", mig_class(driver), cel=[profile])]),
        namespace)
    core.create_namespaced_pod(namespace, pod_manifest(  # type: ignore[arg-type]
        name, image, k8s.PRINT_ENV_AND_WAIT, [PodClaim("mig", template=name)]))


def _gone(core: kclient.CoreV1Api, namespace: str, *pods: str) -> None:
    """Delete gracefully, not forced: the kubelet removes such a pod only once it has
    unprepared its claims, so the other kind's prepare does not find them still there (and
    wait for the kubelet's retry)."""
    for pod in pods:
        core.delete_namespaced_pod(pod, namespace, grace_period_seconds=1)
    for pod in pods:
        k8s.wait_pod_gone(core, namespace, pod)


# serial: it holds the one GPU's shares, then a MIG device of it.
@pytest.mark.serial
def test_time_sliced_shares_and_a_mig_device_of_one_gpu_are_never_allocated_together(
    fakegpu_cluster: ClusterInfo,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
) -> None:
    driver, image = fakegpu_cluster.driver_name, fakegpu_cluster.workload_image
    # Two time-sliced shares of the GPU, each pod seeing the whole GPU.
    gpu_uuids = set()
    for name in ("share-a", "share-b"):
        _share_pod(core_v1, resource_api, namespace, image, name, driver)
    for name in ("share-a", "share-b"):
        k8s.wait_pod_running(core_v1, namespace, name)
        [device] = allocated_devices(resource_api, driver, resource_api.claim(namespace, name))
        assert "time-sliced" in _groups(device), device
        [uuid] = visible_gpus(k8s.logged_env(core_v1, namespace, name))
        assert uuid == attribute_value(device, "uuid") and uuid.startswith("GPU-")
        gpu_uuids.add(uuid)
    assert len(gpu_uuids) == 1

    # A MIG device of that GPU is refused by the scheduler, not by the node.
    _mig_pod(core_v1, resource_api, namespace, image, "mig", driver)
    assert_pending(core_v1, resource_api, namespace, "mig", "mig",
                   "a MIG device of a GPU whose time-sliced shares are allocated")
    _gone(core_v1, namespace, "share-a", "share-b")
    for name in ("share-a", "share-b"):
        resource_api.delete("resourceclaims", name, namespace)
    pod = k8s.wait_pod_running(core_v1, namespace, "mig", timeout=300)
    [device] = allocated_devices(resource_api, driver,
                                 resource_api.claim(namespace, pod_claim_name(pod, "mig")))
    assert "mig" in _groups(device) and attribute_value(device, "parentUUID") in gpu_uuids
    [mig_uuid] = visible_gpus(k8s.logged_env(core_v1, namespace, "mig"))
    assert mig_uuid.startswith("MIG-")

    # And the other way round: a share waits while the MIG device exists.
    _share_pod(core_v1, resource_api, namespace, image, "share-c", driver)
    assert_pending(core_v1, resource_api, namespace, "share-c", "gpu",
                   "a time-sliced share of a GPU whose MIG device is allocated")
    _gone(core_v1, namespace, "mig")
    k8s.wait_pod_running(core_v1, namespace, "share-c", timeout=300)
    assert visible_gpus(k8s.logged_env(core_v1, namespace, "share-c")) == sorted(gpu_uuids)
