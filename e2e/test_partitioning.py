"""GPU partitioning on a real cluster (topology partitioning, its own cluster).

Static MIG: the node's A100s carry pre-created MIG devices (GPU 0 as in NVIDIA's quickstart MIG
demo: 1g.5gb x2, 2g.10gb, 3g.20gb). Claims pick them by DeviceClass (the MIG class,
`mig.<driver domain>`: `mig.fakegpu.dev`, or `mig.nvidia.com` with NVIDIA's driver name), by CEL
on `profile`, and with a `matchAttribute: parentUUID` constraint several of one GPU.

Everything is observed as a user observes it: the ResourceSlices and claims through the
Kubernetes API (what the scheduler chose, which MIG device has which UUID, profile and parent),
the scheduler's verdict on the pod, and the environment the container prints.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster import get_provider
from fakegpu.cluster.provider import ClusterInfo
from fakegpu.drivers import mig_class
from fakegpu.testkit import k8s
from fakegpu.testkit.dra import (
    PodClaim,
    ResourceApi,
    allocation_results,
    cel_string,
    config_api_version,
    match_attribute,
    pod_claim_name,
    pod_manifest,
)
from fakegpu.testkit.gpus import visible_gpus
from fakegpu.testkit.wait import NotYet, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.topology("partitioning")]

STATIC_NODE = "a100-mig"  # partitioning: MIG devices made beforehand
DYNAMIC_NODE = "h100-dyn"  # one H100 whose plugin runs with --dynamic-mig


# --- what the API says ----------------------------------------------------------------------------


def attr_value(value: Mapping[str, Any]) -> Any:
    """A DeviceAttribute's value, whichever of string/int/bool/version it is."""
    for key in ("string", "int", "bool", "version"):
        if key in value:
            return value[key]
    raise AssertionError(f"attribute without a value: {value}")


def published_devices(api: ResourceApi, driver: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(pool, device name) -> its attributes (plain values, fully qualified names), from every
    slice of ``driver``."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for sl in api.slices(driver=driver):
        pool = sl["spec"]["pool"]["name"]
        for dev in sl["spec"].get("devices") or ():
            body = dev.get("basic", dev)  # v1beta1 nests attributes under `basic`
            # An attribute without a domain is in the driver's (as CEL and constraints see it).
            out[(pool, dev["name"])] = {(k if "/" in k else f"{driver}/{k}"): attr_value(v)
                                        for k, v in (body.get("attributes") or {}).items()}
    return out


def allocated(api: ResourceApi, namespace: str, pod: Any, pod_claim: str, driver: str
              ) -> list[tuple[str, dict[str, Any]]]:
    """(request, attributes of the device) for each device the pod's claim was allocated."""
    claim = api.claim(namespace, pod_claim_name(pod, pod_claim))
    devices = published_devices(api, driver)
    out = []
    for result in allocation_results(claim, driver):
        key = (result["pool"], result["device"])
        assert key in devices, f"allocated device {key} is in no slice of {driver}"
        out.append((str(result["request"]), {**devices[key], "name": result["device"]}))
    return out


def profile_is(driver: str, profile: str) -> str:
    return f"device.attributes[{cel_string(driver)}].profile == {cel_string(profile)}"


def run_pod(core: kclient.CoreV1Api, namespace: str, image: str, name: str, claim: PodClaim
            ) -> Any:
    core.create_namespaced_pod(namespace, pod_manifest(  # type: ignore[arg-type]
        name, image, k8s.PRINT_ENV_AND_WAIT, [claim]))
    return k8s.wait_pod_running(core, namespace, name)


def mig_requests(api: ResourceApi, driver: str, counts: Sequence[tuple[str, int]]
                 ) -> list[dict[str, Any]]:
    """One request per (profile, count) from the MIG class, named after the profile."""
    return [api.device_request("mig-" + profile.replace(".", "-"), mig_class(driver),
                               count=count, cel=[profile_is(driver, profile)])
            for profile, count in counts]


# --- static MIG -----------------------------------------------------------------------------------


def test_a_mig_profile_selector_gives_the_pod_that_mig_device(
    fakegpu_cluster: ClusterInfo,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    assert mig_class(driver) in resource_api.device_classes()
    # Both MIG GPUs hold a 2g.10gb: either will do; the pod must get exactly the device the
    # scheduler chose, as a MIG device.
    resource_api.create("resourceclaimtemplates", resource_api.claim_template(
        "one-2g", mig_requests(resource_api, driver, [("2g.10gb", 1)])), namespace)
    pod = run_pod(core_v1, namespace, fakegpu_cluster.workload_image, "mig-pod",
                  PodClaim("mig", template="one-2g"))

    [(request, device)] = allocated(resource_api, namespace, pod, "mig", driver)
    assert request == "mig-2g-10gb"
    assert device[f"{driver}/type"] == "mig"
    assert device[f"{driver}/profile"] == "2g.10gb"
    # NVIDIA's device name: gpu-<minor>-mig-<profile>-<GI profile id>-<placement start>.
    assert device["name"].split("-mig-")[1].startswith("2g10gb-14-"), device["name"]
    env = k8s.logged_env(core_v1, namespace, "mig-pod")
    assert visible_gpus(env) == [device[f"{driver}/uuid"]]
    assert visible_gpus(env)[0].startswith("MIG-")


# serial: it needs all four MIG devices of the only GPU that has them.
@pytest.mark.serial
def test_the_quickstart_demos_four_mig_devices_of_one_gpu_in_one_pod(
    fakegpu_cluster: ClusterInfo,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    requests = mig_requests(resource_api, driver,
                            [("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1)])
    resource_api.create("resourceclaimtemplates", resource_api.claim_template(
        "demo", requests, constraints=[match_attribute(f"{driver}/parentUUID")]), namespace)
    pod = run_pod(core_v1, namespace, fakegpu_cluster.workload_image, "demo-pod",
                  PodClaim("mig", template="demo"))

    got = allocated(resource_api, namespace, pod, "mig", driver)
    profiles = sorted(d[f"{driver}/profile"] for _, d in got)
    assert profiles == ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"], got
    parents = {d[f"{driver}/parentUUID"] for _, d in got}
    assert len(parents) == 1, f"four MIG devices from {len(parents)} GPUs: {got}"
    env = k8s.logged_env(core_v1, namespace, "demo-pod")
    assert sorted(visible_gpus(env)) == sorted(d[f"{driver}/uuid"] for _, d in got)


# serial: it needs a 1g+2g+3g set from each of both MIG GPUs (every 2g.10gb and 3g.20gb there is).
@pytest.mark.serial
def test_parent_constraint_keeps_each_claim_on_one_gpu(
    fakegpu_cluster: ClusterInfo,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
) -> None:
    # 1g + 2g + 3g of one parent: both MIG GPUs have such a set, so two such claims run at once,
    # one per GPU, and neither may take its devices from both.
    driver = fakegpu_cluster.driver_name
    requests = mig_requests(resource_api, driver,
                            [("1g.5gb", 1), ("2g.10gb", 1), ("3g.20gb", 1)])
    resource_api.create("resourceclaimtemplates", resource_api.claim_template(
        "trio", requests, constraints=[match_attribute(f"{driver}/parentUUID")]), namespace)
    parents = []
    for name in ("first", "second"):
        pod = run_pod(core_v1, namespace, fakegpu_cluster.workload_image, name,
                      PodClaim("mig", template="trio"))
        got = allocated(resource_api, namespace, pod, "mig", driver)
        assert len(got) == 3
        mine = {d[f"{driver}/parentUUID"] for _, d in got}
        assert len(mine) == 1, f"pod {name} got MIG devices of {len(mine)} GPUs: {got}"
        parents.append(mine.pop())
        assert sorted(visible_gpus(k8s.logged_env(core_v1, namespace, name))) == sorted(
            d[f"{driver}/uuid"] for _, d in got)
    assert parents[0] != parents[1], "two pods were given MIG devices of the same GPU"


# serial: it needs the only whole A100 of the cluster.
@pytest.mark.serial
def test_a_gpu_in_mig_mode_is_not_offered_whole(
    fakegpu_cluster: ClusterInfo,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
) -> None:
    # The A100 node has three GPUs, two in MIG mode: two whole GPUs cannot be had (nor on the
    # other node, whose one H100 is dynamic MIG: published whole and as partitions).
    driver = fakegpu_cluster.driver_name
    whole = [d for (pool, _), d in published_devices(resource_api, driver).items()
             if pool == STATIC_NODE and d[f"{driver}/type"] == "gpu"]
    assert len(whole) == 1, f"whole GPUs published: {whole}"
    # (Leaving out the GPU shared by memory on another node: it may be allocated repeatedly.)
    shared = [attr_value(d.get("basic", d)["attributes"]["uuid"])
              for sl in resource_api.slices(driver=driver, node=SHARED_NODE)
              for d in sl["spec"].get("devices") or ()]
    request = resource_api.device_request("gpus", driver, count=2, cel=[
        f"device.attributes[{cel_string(driver)}].uuid != {cel_string(u)}" for u in shared])
    resource_api.create("resourceclaimtemplates",
                        resource_api.claim_template("two", [request]), namespace)
    core_v1.create_namespaced_pod(namespace, pod_manifest(  # type: ignore[arg-type]
        "greedy", fakegpu_cluster.workload_image, k8s.PRINT_ENV_AND_WAIT,
        [PodClaim("gpus", template="two")]))

    pod: Any = k8s.wait_unschedulable(core_v1, namespace, "greedy",
                                      what="the scheduler to refuse two whole GPUs")
    assert pod.spec.node_name is None
    # One whole GPU is there to be had.
    request = resource_api.device_request("gpu", driver, count=1)
    resource_api.create("resourceclaimtemplates",
                        resource_api.claim_template("one", [request]), namespace)
    pod = run_pod(core_v1, namespace, fakegpu_cluster.workload_image, "modest",
                  PodClaim("gpu", template="one"))
    [(_, device)] = allocated(resource_api, namespace, pod, "gpu", driver)
    assert visible_gpus(k8s.logged_env(core_v1, namespace, "modest")) == [device[f"{driver}/uuid"]]


# --- dynamic MIG ----------------------------------------------------------------------------------


def smi(info: ClusterInfo, node: str) -> str:
    """`fakegpu smi` on a node of the cluster: what NVML there reports (MIG devices included)."""
    out = subprocess.run([sys.executable, "-m", "fakegpu", "smi", "--cluster", info.name,
                          "--provider", info.provider, "--node", node],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, f"fakegpu smi failed: {out.stderr[-800:]}"
    return out.stdout


def mig_uuids(text: str) -> set[str]:
    return set(re.findall(r"MIG-[0-9a-fA-F-]{36}", text))


def require_partitions(api: ResourceApi, driver: str) -> None:
    """Skip where the apiserver dropped the counters (DRAPartitionableDevices off, as on a
    minor without it): the plugin then publishes no partitions."""
    for sl in api.slices(driver=driver, node=DYNAMIC_NODE):
        if any(d.get("basic", d).get("consumesCounters") for d in sl["spec"].get("devices") or ()):
            return
    pytest.skip(f"{DYNAMIC_NODE} publishes no partitions: the apiserver drops counters without "
                "the DRAPartitionableDevices gate")


def status_uuids(api: ResourceApi, namespace: str, pod: Any, pod_claim: str) -> list[str]:
    """The MIG UUIDs the plugin wrote into the claim's status.devices at prepare."""
    claim = api.claim(namespace, pod_claim_name(pod, pod_claim))
    return [str((d.get("data") or {}).get("uuid"))
            for d in (claim.get("status") or {}).get("devices") or []]


# serial: it requires the dynamic-MIG H100 to hold no MIG device but its own, before and after.
@pytest.mark.serial
def test_dynamic_1g_and_3g_claims_are_created_on_one_h100_and_destroyed_after_a_restart(
    fakegpu_cluster: ClusterInfo,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    require_partitions(resource_api, driver)
    before = smi(fakegpu_cluster, DYNAMIC_NODE)
    assert "MIG-" not in before, f"MIG devices exist before any claim:\n{before}"
    seen: dict[str, str] = {}  # pod -> its MIG UUID
    parents = set()
    for name, profile in (("small", "1g.10gb"), ("big", "3g.40gb")):
        resource_api.create("resourceclaimtemplates", resource_api.claim_template(
            name, mig_requests(resource_api, driver, [(profile, 1)])), namespace)
        pod = run_pod(core_v1, namespace, fakegpu_cluster.workload_image, name,
                      PodClaim("mig", template=name))
        assert pod.spec.node_name == DYNAMIC_NODE
        [(_, device)] = allocated(resource_api, namespace, pod, "mig", driver)
        assert device[f"{driver}/profile"] == profile
        assert f"{driver}/uuid" not in device  # a placement: it exists only once claimed
        parents.add(device[f"{driver}/parentUUID"])
        [uuid] = visible_gpus(k8s.logged_env(core_v1, namespace, name))
        assert uuid.startswith("MIG-")
        assert status_uuids(resource_api, namespace, pod, "mig") == [uuid]
        seen[name] = uuid
    assert len(parents) == 1
    listed = smi(fakegpu_cluster, DYNAMIC_NODE)
    for name, uuid in seen.items():
        assert uuid in listed, f"NVML on {DYNAMIC_NODE} does not list {name}'s {uuid}:\n{listed}"

    # The plugin restarts between prepare and unprepare (its pod deleted and made again): the
    # instances stay with the running pods, and the new plugin destroys them at unprepare.
    get_provider(fakegpu_cluster.provider).restart_plugin(fakegpu_cluster.name, DYNAMIC_NODE)
    after = smi(fakegpu_cluster, DYNAMIC_NODE)
    assert all(uuid in after for uuid in seen.values()), after
    for name in seen:
        pod = k8s.read_pod(core_v1, namespace, name)
        assert pod.status.phase == "Running" and not any(
            c.restart_count for c in pod.status.container_statuses or ()), pod.status

    for name in seen:
        core_v1.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    for name in seen:
        k8s.wait_pod_gone(core_v1, namespace, name)

    def destroyed() -> None:
        now = smi(fakegpu_cluster, DYNAMIC_NODE)
        left = [u for u in seen.values() if u in now]
        if left:
            raise NotYet(f"still in NVML: {left}")

    wait_for(destroyed, what="the pods' MIG devices to be destroyed", timeout=120)


# serial: it fills a GPU with partitions.
@pytest.mark.serial
def test_seven_1g_claims_fill_the_h100_and_an_eighth_waits_for_one_to_go(
    fakegpu_cluster: ClusterInfo,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    require_partitions(resource_api, driver)
    resource_api.create("resourceclaimtemplates", resource_api.claim_template(
        "one-1g", mig_requests(resource_api, driver, [("1g.10gb", 1)])), namespace)
    names = [f"p{i}" for i in range(8)]
    for name in names:
        core_v1.create_namespaced_pod(namespace, pod_manifest(  # type: ignore[arg-type]
            name, fakegpu_cluster.workload_image, k8s.PRINT_ENV_AND_WAIT,
            [PodClaim("mig", template="one-1g")]))

    def seven_and_one() -> tuple[list[str], str]:
        running, refused = [], []
        for name in names:
            pod: Any = k8s.read_pod(core_v1, namespace, name)
            if pod.status.phase == "Running":
                running.append(name)
            elif k8s.claims_refused(pod):
                refused.append(name)
        if len(running) != 7 or len(refused) != 1:
            raise NotYet(f"running {running}, refused {refused}")
        return running, refused[0]

    running, waiting = wait_for(seven_and_one, what="seven 1g pods running, one refused",
                                timeout=300)
    uuids: dict[str, str] = {}
    for name in running:
        pod: Any = k8s.read_pod(core_v1, namespace, name)
        [(_, device)] = allocated(resource_api, namespace, pod, "mig", driver)
        assert device["name"].startswith("gpu-0-mig-1g10gb-19-"), device["name"]
        [uuids[name]] = visible_gpus(k8s.logged_env(core_v1, namespace, name))
    assert len(set(uuids.values())) == 7 and all(u.startswith("MIG-") for u in uuids.values())

    core_v1.delete_namespaced_pod(running[0], namespace, grace_period_seconds=0)
    k8s.wait_pod_gone(core_v1, namespace, running[0])
    pod = k8s.wait_pod_running(core_v1, namespace, waiting, timeout=300)
    [(_, device)] = allocated(resource_api, namespace, pod, "mig", driver)
    assert device[f"{driver}/profile"] == "1g.10gb"
    [uuid] = visible_gpus(k8s.logged_env(core_v1, namespace, waiting))
    # A MIG device of its own: none of the six still running has it.
    assert uuid.startswith("MIG-") and uuid not in [uuids[n] for n in running[1:]]


# serial: it fills a GPU with partitions and then needs that GPU whole.
@pytest.mark.serial
def test_a_whole_gpu_claim_waits_until_the_partitions_are_gone(
    fakegpu_cluster: ClusterInfo,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    require_partitions(resource_api, driver)
    resource_api.create("resourceclaimtemplates", resource_api.claim_template(
        "one-1g", mig_requests(resource_api, driver, [("1g.10gb", 1)])), namespace)
    run_pod(core_v1, namespace, fakegpu_cluster.workload_image, "part",
            PodClaim("mig", template="one-1g"))
    h100 = f"device.attributes[{cel_string(driver)}].productName.startsWith('NVIDIA H100')"
    resource_api.create("resourceclaimtemplates", resource_api.claim_template(
        "whole", [resource_api.device_request("gpu", driver, cel=[h100])]), namespace)
    core_v1.create_namespaced_pod(namespace, pod_manifest(  # type: ignore[arg-type]
        "whole", fakegpu_cluster.workload_image, k8s.PRINT_ENV_AND_WAIT,
        [PodClaim("gpu", template="whole")]))

    k8s.wait_unschedulable(core_v1, namespace, "whole",
                           what="the whole H100 to be refused beside a partition")
    core_v1.delete_namespaced_pod("part", namespace, grace_period_seconds=0)
    k8s.wait_pod_gone(core_v1, namespace, "part")
    pod = k8s.wait_pod_running(core_v1, namespace, "whole", timeout=300)
    [(_, device)] = allocated(resource_api, namespace, pod, "gpu", driver)
    assert device["name"] == "gpu-0" and pod.spec.node_name == DYNAMIC_NODE
    assert visible_gpus(k8s.logged_env(core_v1, namespace, "whole")) == [device[f"{driver}/uuid"]]

# --- sharing configs ------------------------------------------------------------------------------

A100 = "NVIDIA A100-SXM4-40GB"


def opaque_config(driver: str, kind: str, sharing: dict[str, Any],
                  requests: Sequence[str] = ()) -> dict[str, Any]:
    return {**({"requests": list(requests)} if requests else {}),
            "opaque": {"driver": driver, "parameters": {
                "apiVersion": config_api_version(driver), "kind": kind, "sharing": sharing}}}


def device_env(env: Mapping[str, str], device: str, key: str) -> str | None:
    return env.get(f"FAKEGPU_DEVICE_{device.upper().replace('-', '_')}_{key}")


def test_two_pods_time_slice_one_gpu_and_see_the_claims_interval(
    fakegpu_cluster: ClusterInfo,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    request = resource_api.device_request("gpu", driver, cel=[
        f"device.attributes[{cel_string(driver)}].productName == {cel_string(A100)}"])
    body = resource_api.claim_manifest("shared", [request])
    body["spec"]["devices"]["config"] = [opaque_config(
        driver, "GpuConfig", {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
        ["gpu"])]
    resource_api.create("resourceclaims", body, namespace)
    pods = [run_pod(core_v1, namespace, fakegpu_cluster.workload_image, name,
                    PodClaim("gpu", claim="shared")) for name in ("one", "two")]
    [(_, device)] = allocated(resource_api, namespace, pods[0], "gpu", driver)
    for pod in pods:
        env = k8s.logged_env(core_v1, namespace, pod.metadata.name)
        assert visible_gpus(env) == [device[f"{driver}/uuid"]]
        assert device_env(env, device["name"], "SHARING_STRATEGY") == "TimeSlicing"
        assert device_env(env, device["name"], "TIMESLICE_INTERVAL") == "Long"


def test_mps_from_the_class_with_a_claim_override_per_request(
    fakegpu_cluster: ClusterInfo,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    # A DeviceClass of MIG devices whose config says MPS at 20 %; the claim asks 70 % for one
    # of its two requests only.
    cls = f"mps-{namespace}"[:63]
    resource_api.create("deviceclasses", {"kind": "DeviceClass", "metadata": {"name": cls},
                                          "spec": {
        "selectors": [{"cel": {"expression":
                               f"device.driver == {cel_string(driver)} && "
                               f"device.attributes[{cel_string(driver)}].type == 'mig'"}}],
        "config": [opaque_config(driver, "MigDeviceConfig", {
            "strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 20}})]}})
    try:
        requests = [resource_api.device_request(name, cls, cel=[profile_is(driver, "1g.5gb")])
                    for name in ("a", "b")]
        body = resource_api.claim_template("mps", requests)
        body["spec"]["spec"]["devices"]["config"] = [opaque_config(
            driver, "MigDeviceConfig", {"strategy": "MPS", "mpsConfig": {
                "defaultActiveThreadPercentage": 70, "defaultPinnedDeviceMemoryLimit": "2Gi"}},
            ["b"])]
        resource_api.create("resourceclaimtemplates", body, namespace)
        pod = run_pod(core_v1, namespace, fakegpu_cluster.workload_image, "mps-pod",
                      PodClaim("mig", template="mps"))
        got = dict(allocated(resource_api, namespace, pod, "mig", driver))
        env = k8s.logged_env(core_v1, namespace, "mps-pod")
        assert env.get("CUDA_MPS_PIPE_DIRECTORY") == "/tmp/nvidia-mps"
        a, b = got["a"]["name"], got["b"]["name"]
        assert device_env(env, a, "SHARING_STRATEGY") == "MPS"
        assert device_env(env, a, "MPS_ACTIVE_THREAD_PERCENTAGE") == "20"  # the class's
        assert device_env(env, a, "MPS_PINNED_DEVICE_MEMORY_LIMIT") is None
        assert device_env(env, b, "MPS_ACTIVE_THREAD_PERCENTAGE") == "70"  # the claim's
        assert device_env(env, b, "MPS_PINNED_DEVICE_MEMORY_LIMIT") == "2Gi"
        # The claim's MPS control daemon stand-in, mounted where NVIDIA's daemon's dirs are.
        assert env.get("CUDA_MPS_LOG_DIRECTORY") == "/var/log/nvidia-mps"
        log = k8s.exec_in_pod(core_v1, namespace, "mps-pod",
                              ["cat", "/var/log/nvidia-mps/control.log"]).stdout
        lines = {ln.split()[1]: ln for ln in log.splitlines() if ln.startswith("device ")}
        assert "active_thread_percentage=20 " in lines[a], log
        assert lines[b].endswith("active_thread_percentage=70 pinned_device_memory_limit=2Gi")
    finally:
        resource_api.delete("deviceclasses", cls)


def test_an_invalid_sharing_config_keeps_the_pod_from_starting_and_says_which_field(
    fakegpu_cluster: ClusterInfo,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    require_partitions(resource_api, driver)  # its 1g.10gb is a dynamic partition
    body = resource_api.claim_template("bad", mig_requests(resource_api, driver,
                                                           [("1g.10gb", 1)]))
    body["spec"]["spec"]["devices"]["config"] = [opaque_config(
        driver, "MigDeviceConfig", {"strategy": "MPS",
                                    "mpsConfig": {"defaultActiveThreadPercentage": 150}})]
    resource_api.create("resourceclaimtemplates", body, namespace)
    before = mig_uuids(smi(fakegpu_cluster, DYNAMIC_NODE))
    core_v1.create_namespaced_pod(namespace, pod_manifest(  # type: ignore[arg-type]
        "refused", fakegpu_cluster.workload_image, k8s.PRINT_ENV_AND_WAIT,
        [PodClaim("mig", template="bad")]))
    event = k8s.wait_event(core_v1, namespace, "FailedPrepareDynamicResources",
                           involved="refused", timeout=180)
    assert "defaultActiveThreadPercentage" in event.message and "150" in event.message, \
        event.message
    pod: Any = k8s.read_pod(core_v1, namespace, "refused")
    assert pod.status.phase == "Pending"
    # The 1g.10gb exists only on the dynamic-MIG H100: nothing was created there for it.
    assert pod.spec.node_name == DYNAMIC_NODE
    # (An earlier test's instances may still be going away: nothing new is the check.)
    assert mig_uuids(smi(fakegpu_cluster, DYNAMIC_NODE)) <= before


# --- shared GPUs by memory ------------------------------------------------------------------------

SHARED_NODE = "a100-shared"  # one A100 published with allowMultipleAllocations


def shared_gpu(api: ResourceApi, driver: str) -> dict[str, Any]:
    """The slice entry of the GPU shared by memory (skips where the apiserver dropped the
    field: DRAConsumableCapacity off, as on a minor without it)."""
    for sl in api.slices(driver=driver, node=SHARED_NODE):
        for dev in sl["spec"].get("devices") or ():
            body = dev.get("basic", dev)
            if body.get("allowMultipleAllocations"):
                return dict(dev)
    pytest.skip(f"no device of {SHARED_NODE} allows multiple allocations: the apiserver drops "
                "the field without the DRAConsumableCapacity gate")


def memory_request(api: ResourceApi, driver: str, uuid: str, memory: str) -> dict[str, Any]:
    request = api.device_request("gpu", driver, cel=[
        f"device.attributes[{cel_string(driver)}].uuid == {cel_string(uuid)}"])
    (request.get("exactly") or request)["capacity"] = {"requests": {"memory": memory}}
    return request


# serial: it fills the memory of the GPU shared by memory.
@pytest.mark.serial
def test_claims_share_a_gpu_by_memory_and_one_that_does_not_fit_waits(
    fakegpu_cluster: ClusterInfo,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    entry = shared_gpu(resource_api, driver)
    uuid = attr_value((entry.get("basic", entry))["attributes"]["uuid"])
    # 15 Gi each of its 40 Gi: two fit, the third does not until one goes.
    for name in ("a", "b", "c"):
        resource_api.create("resourceclaims", resource_api.claim_manifest(
            name, [memory_request(resource_api, driver, uuid, "15Gi")]), namespace)
    pods = {name: run_pod(core_v1, namespace, fakegpu_cluster.workload_image, f"pod-{name}",
                          PodClaim("gpu", claim=name)) for name in ("a", "b")}
    core_v1.create_namespaced_pod(namespace, pod_manifest(  # type: ignore[arg-type]
        "pod-c", fakegpu_cluster.workload_image, k8s.PRINT_ENV_AND_WAIT,
        [PodClaim("gpu", claim="c")]))

    share_ids = {}
    for name, pod in pods.items():
        assert pod.spec.node_name == SHARED_NODE
        claim = resource_api.claim(namespace, name)
        [result] = allocation_results(claim, driver)
        assert result["shareID"], result
        assert result.get("consumedCapacity", {}).get("memory") == "15Gi", result
        env = k8s.logged_env(core_v1, namespace, f"pod-{name}")
        assert visible_gpus(env) == [uuid]
        assert device_env(env, result["device"], "SHARE_ID") == result["shareID"]
        statuses = (claim.get("status") or {}).get("devices") or []
        assert [d.get("shareID") for d in statuses] == [result["shareID"]]
        share_ids[name] = result["shareID"]
    assert share_ids["a"] != share_ids["b"]

    k8s.wait_unschedulable(core_v1, namespace, "pod-c",
                           what="the scheduler to refuse a third 15Gi share")
    core_v1.delete_namespaced_pod("pod-a", namespace, grace_period_seconds=0)
    k8s.wait_pod_gone(core_v1, namespace, "pod-a")
    resource_api.delete("resourceclaims", "a", namespace)
    pod = k8s.wait_pod_running(core_v1, namespace, "pod-c", timeout=300)
    assert pod.spec.node_name == SHARED_NODE
    assert visible_gpus(k8s.logged_env(core_v1, namespace, "pod-c")) == [uuid]
