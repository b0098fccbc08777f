"""NVIDIA's own DRA kubelet plugin on fake GPUs (issue 13, docs/nvidia-driver.md).

`fakegpu cluster up --driver nvidia --plugin-bin <gpu-kubelet-plugin> --plugin-preset nvidia`
runs NVIDIA's gpu-kubelet-plugin in place of fakegpu's, on the host fakegpu builds for it from
the node's NVML state. Its source is not on the package proxies here, so the binary is an
option: ``--fakegpu-nvidia-plugin-bin PATH`` (build it from NVIDIA/k8s-dra-driver-gpu with its
vendor directory). Without it every test here is skipped, saying so.

The cluster is this module's own (a plugin other than the session's), of the packaged topology
nvidia-driver, named after --fakegpu-cluster-name. Observed through the Kubernetes API, what
pods see, and `fakegpu smi --cluster` (NVML as a user reads it).
"""

from __future__ import annotations

import json
import re
import subprocess
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kclient
from kubernetes.utils.quantity import parse_quantity

from fakegpu import drivers
from fakegpu.cluster import external, get_provider, nodenvml
from fakegpu.cluster.provider import ClusterInfo
from fakegpu.nvml.sysfs import bus_id
from fakegpu.testkit import faults, k8s
from fakegpu.testkit.dra import (
    ResourceApi,
    allocation_results,
    attribute_value,
    pod_claim_name,
    published_device,
)
from fakegpu.testkit.quickstart import Quickstart
from fakegpu.testkit.wait import NotYet, until_true, wait_for
from fakegpu.topology.load import load_topology
from fakegpu.topology.packaged import FIXTURES

# Not `e2e`: that marker brings up the session's cluster (fakegpu's plugin) for every test, and
# this module needs only its own. `integration` keeps it in `make test` (skipped, with the
# reason, without a binary) and out of `-m e2e` runs on kind, where no host binary can run.
pytestmark = pytest.mark.integration

DRIVER = drivers.NVIDIA
STANDARD = "resource.kubernetes.io"
NODE = "nv-0"
MANIFESTS = Path(__file__).resolve().parent / "nvidia" / "manifests"
QUICKSTART_IMAGES = ("ubuntu:22.04", "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04")
TOPOLOGY = FIXTURES / "nvidia-driver.yaml"
NOT_GIVEN = ("NVIDIA's gpu-kubelet-plugin was not given (--fakegpu-nvidia-plugin-bin PATH): its "
             "source is not on the package proxies here; build it from a checkout of "
             "kubernetes-sigs/dra-driver-nvidia-gpu (go build -mod=vendor "
             "./cmd/gpu-kubelet-plugin, docs/nvidia-driver.md)")


def templates(binary: Path) -> Path | None:
    """NVIDIA's manifest templates, in its checkout beside the binary built there."""
    found = binary.parent / "templates"
    return found if (found / "mps-control-daemon.tmpl.yaml").is_file() else None


def needs_templates(request: pytest.FixtureRequest) -> None:
    """Skip, saying why, when NVIDIA's plugin has no MPS daemon template to start."""
    if templates(Path(request.config.getoption("fakegpu_nvidia_plugin_bin"))) is None:
        pytest.skip("NVIDIA's templates/mps-control-daemon.tmpl.yaml is not beside the binary "
                    "(its checkout's templates/): the plugin reads its MPS daemon from there")


def nvidia_plugin_cluster(request: pytest.FixtureRequest, suffix: str,
                          plugin_args: Sequence[str] = (),
                          image_aliases: Sequence[str] = ()) -> Iterator[ClusterInfo]:
    """A cluster of TOPOLOGY with NVIDIA's plugin (given ``plugin_args``) in fakegpu's place,
    named ``<--fakegpu-cluster-name>-<suffix>``; skips, saying why, without the binary."""
    binary = request.config.getoption("fakegpu_nvidia_plugin_bin")
    if not binary:
        warnings.warn(NOT_GIVEN, stacklevel=1)  # in the warnings summary, not only -rs
        pytest.skip(NOT_GIVEN)
    plugin = external.parse(Path(binary), plugin_args, preset="nvidia", driver=None,
                            beside=False, env=[], templates=templates(Path(binary)))
    clusters = get_provider("embedded")
    name = f"{request.config.getoption('fakegpu_cluster_name')}-{suffix}"
    clusters.down(name)
    try:
        yield clusters.up(name, TOPOLOGY, request.config.getoption("fakegpu_k8s_version"),
                          driver="nvidia", plugin=plugin, image_aliases=image_aliases)
    finally:
        if not request.config.getoption("fakegpu_keep_cluster"):
            clusters.down(name)


@pytest.fixture(scope="module")
def nvidia_cluster(request: pytest.FixtureRequest) -> Iterator[ClusterInfo]:
    # The quickstart manifests' image names on the nodes; time-slicing configs (gpu-test6's
    # and the sharing test's) need NVIDIA's TimeSlicingSettings gate.
    yield from nvidia_plugin_cluster(
        request, "nvd", ["--feature-gates=TimeSlicingSettings=true,MPSSupport=true"],
        image_aliases=QUICKSTART_IMAGES)


@pytest.fixture(scope="module")
def api(nvidia_cluster: ClusterInfo) -> Any:
    return k8s.new_api_client(nvidia_cluster.kubeconfig)


def namespace(api: Any, prefix: str) -> Iterator[str]:
    core = kclient.CoreV1Api(api)
    name = k8s.create_namespace(core, prefix=prefix, labels={"fakegpu.dev/test": "e2e"})
    yield name
    k8s.delete_namespace(core, name)


@pytest.fixture()
def ns(api: Any) -> Iterator[str]:
    yield from namespace(api, "e2e-nvidia-driver")


def nvml_uuids(cluster: ClusterInfo, node: str = NODE) -> tuple[set[str], set[str]]:
    """(UUIDs of whole GPUs with MIG off, UUIDs of MIG devices) as NVML reports them."""
    out = nodenvml.run(cluster.name, node, ["smi", "-o", "json"], provider=cluster.provider)
    assert out.returncode == 0, out.stderr
    view = json.loads(out.stdout)
    gpus = {g["uuid"] for g in view["gpus"] if g["mig_mode"] != "Enabled"}
    migs = {m["uuid"] for m in view["mig_devices"]}
    return gpus, migs


def devices(resource_api: ResourceApi) -> list[dict[str, Any]]:
    return [d for s in resource_api.slices(DRIVER) if s["spec"].get("nodeName") == NODE
            for d in s["spec"].get("devices") or ()]


def test_nvidias_plugin_publishes_what_nvml_reports(nvidia_cluster: ClusterInfo,
                                                    api: Any) -> None:
    published = devices(ResourceApi(api))
    by_type: dict[str, set[str]] = {}
    for d in published:
        by_type.setdefault(str(attribute_value(d, "type")), set()).add(
            str(attribute_value(d, "uuid")))
    gpus, migs = nvml_uuids(nvidia_cluster)
    assert by_type.get("gpu") == gpus, published
    assert by_type.get("mig") == migs, published


def test_nvidias_plugin_publishes_where_each_gpu_sits(nvidia_cluster: ClusterInfo,
                                                      api: Any) -> None:
    """NVIDIA's plugin reads a GPU's PCIe root and NUMA node from /sys (deviceattribute,
    go-nvlib), not from NVML: on each node it finds the topology's tree there (the sysfs view
    pluginhost shows it) and publishes the standard attributes of the GPU at that bus id
    (before, it published neither)."""
    topology = load_topology(TOPOLOGY)
    checked = 0
    for s in ResourceApi(api).slices(DRIVER):
        node = topology.node(s["spec"]["nodeName"])
        assert node.pcie is not None, node.name
        roots = {bus_id(g.pci): node.pcie.gpu_root(g.index) for g in node.gpus}
        for d in s["spec"].get("devices") or ():
            if attribute_value(d, "type") != "gpu":
                continue
            root = roots[str(attribute_value(d, f"{STANDARD}/pciBusID"))]
            assert root is not None
            assert attribute_value(d, f"{STANDARD}/pcieRoot") == root.name, d
            # numaNode: main publishes it for every GPU; v25.12 and v0.4 for VFIO devices only.
            assert attribute_value(d, f"{STANDARD}/numaNode") in (root.numa_node, None), d
            checked += 1
    assert checked == sum(1 for n in topology.nodes for g in n.gpus if not g.mig.enabled)


def _pod(name: str, template: str, image: str, script: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "dnsPolicy": "Default",
            "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": template}],
            "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never",
                            "command": ["sh", "-c", f"{script}; sleep 3600"],
                            "resources": {"claims": [{"name": "dev"}]}}],
        },
    }


@pytest.mark.parametrize(("device_class", "listing"), [
    (drivers.NVIDIA, "ls /dev | grep -E '^nvidia[0-9]+$'"),
    ("mig.nvidia.com", "ls /dev/nvidia-caps"),
])
def test_a_claim_is_prepared_and_its_pod_runs(nvidia_cluster: ClusterInfo, api: Any, ns: str,
                                              device_class: str, listing: str) -> None:
    resource_api = ResourceApi(api)
    core = kclient.CoreV1Api(api)
    resource_api.create("resourceclaimtemplates", resource_api.claim_template(
        "one", [resource_api.device_request("dev", device_class)]), namespace=ns)
    k8s.create_pod(core, ns, _pod("p", "one", nvidia_cluster.workload_image,
                                  f"echo BEGIN; {listing}; echo END"))
    k8s.wait_pod_running(core, ns, "p", timeout=180)
    lines = k8s.pod_log(core, ns, "p").split("BEGIN", 1)[1].split("END", 1)[0].split()
    if device_class == drivers.NVIDIA:
        # Exactly the one GPU of the claim is in the container, as the real driver does it.
        assert len(lines) == 1 and re.fullmatch(r"nvidia\d+", lines[0]), lines
    else:
        # The MIG device's GPU-instance and compute-instance capability nodes.
        assert len(lines) == 2 and all(re.fullmatch(r"nvidia-cap\d+", x) for x in lines), lines


def smi_listing(core: Any, ns: str, pod: str) -> list[str]:
    """The `nvidia-smi -L` lines a pod printed between BEGIN and END."""
    text = k8s.pod_log(core, ns, pod)
    assert "BEGIN" in text and "END" in text, text
    return [line for line in text.split("BEGIN", 1)[1].split("END", 1)[0].splitlines()
            if line.strip()]


def allocated_uuids(resource_api: ResourceApi, core: Any, ns: str, pod: str) -> list[str]:
    """UUIDs of the devices the pod's claim was allocated, as their slices publish them."""
    claim = resource_api.claim(ns, pod_claim_name(k8s.read_pod(core, ns, pod), "dev"))
    return [str(attribute_value(published_device(resource_api, DRIVER, r["pool"], r["device"]),
                                "uuid")) for r in allocation_results(claim, DRIVER)]


@pytest.mark.parametrize("device_class", [drivers.NVIDIA, "mig.nvidia.com"])
def test_nvml_in_its_pods_sees_exactly_the_claimed_device(nvidia_cluster: ClusterInfo,
                                                          api: Any, ns: str,
                                                          device_class: str) -> None:
    """`nvidia-smi -L` in a pod NVIDIA's plugin prepared (its CDI spec, no fakegpu variable):
    the one GPU, or the one MIG device and its parent, of the claim (issue 27)."""
    resource_api = ResourceApi(api)
    core = kclient.CoreV1Api(api)
    resource_api.create("resourceclaimtemplates", resource_api.claim_template(
        "one", [resource_api.device_request("dev", device_class)]), namespace=ns)
    k8s.create_pod(core, ns, _pod("p", "one", nvidia_cluster.workload_image,
                                  "echo BEGIN; nvidia-smi -L; echo END"))
    k8s.wait_pod_running(core, ns, "p", timeout=180)
    listed = smi_listing(core, ns, "p")
    (uuid,) = allocated_uuids(resource_api, core, ns, "p")
    gpus = [line for line in listed if line.startswith("GPU ")]
    assert len(gpus) == 1, listed
    if device_class == drivers.NVIDIA:
        assert listed == [gpus[0]] and gpus[0].endswith(f"(UUID: {uuid})"), listed
    else:
        assert len(listed) == 2 and listed[1].strip().startswith("MIG "), listed
        assert listed[1].endswith(f"(UUID: {uuid})"), listed


# --- NVIDIA's quickstart shapes, prepared by NVIDIA's plugin -------------------------------------


@pytest.fixture()
def quickstart(nvidia_cluster: ClusterInfo, api: Any, ns: str) -> Quickstart:
    return Quickstart(nvidia_cluster, kclient.CoreV1Api(api), ResourceApi(api), api, ns,
                      MANIFESTS)


def test_quickstart_one_gpu_per_pod(quickstart: Quickstart) -> None:  # gpu-test1
    quickstart.apply("gpu-test1")
    seen = {}
    for name in ("pod1", "pod2"):
        pod = quickstart.running(name)
        (device,) = quickstart.devices(pod, "gpu")
        assert quickstart.listing(name) == quickstart.gpu_lines([device]), name
        seen[name] = (pod.spec.node_name, attribute_value(device, "uuid"))
    assert seen["pod1"] != seen["pod2"], seen


def test_quickstart_two_containers_share_a_gpu(quickstart: Quickstart) -> None:  # gpu-test2
    quickstart.apply("gpu-test2")
    pod = quickstart.running("pod")
    (device,) = quickstart.devices(pod, "shared-gpu")
    for container in ("ctr0", "ctr1"):
        assert quickstart.listing("pod", container) == quickstart.gpu_lines([device])


def test_quickstart_two_pods_share_a_claim(quickstart: Quickstart) -> None:  # gpu-test3
    quickstart.apply("gpu-test3")
    pods = [quickstart.running(name) for name in ("pod1", "pod2")]
    (device,) = quickstart.devices(pods[0], "shared-gpu")
    assert pods[0].spec.node_name == pods[1].spec.node_name
    for pod in pods:
        assert quickstart.listing(pod.metadata.name) == quickstart.gpu_lines([device])


def test_quickstart_mig_devices_of_one_parent(quickstart: Quickstart) -> None:  # gpu-test4
    # nv-0's fourth A100 holds exactly gpu-test4's four MIG devices.
    quickstart.apply("gpu-test4")
    pod = quickstart.running("pod")
    parents = set()
    for container, request in (("ctr0", "mig-1g-5gb-0"), ("ctr1", "mig-1g-5gb-1"),
                               ("ctr2", "mig-2g-10gb"), ("ctr3", "mig-3g-20gb")):
        (device,) = quickstart.devices(pod, "mig-devices", request)
        parents.add(attribute_value(device, "parentUUID"))
        listing = quickstart.listing("pod", container)
        assert quickstart.mig_seen(listing) == quickstart.mig_lines(device), container
    assert len(parents) == 1, parents


def test_quickstart_time_sliced_and_mps_gpus(request: pytest.FixtureRequest,
                                             quickstart: Quickstart) -> None:  # gpu-test5
    # Two whole GPUs of one claim: nv-0's two whole A100s, one time-sliced, one under MPS.
    needs_templates(request)
    quickstart.check_time_sliced_and_mps()


def test_a_time_sliced_gpu_is_prepared(nvidia_cluster: ClusterInfo, api: Any,
                                       ns: str) -> None:
    """A GpuConfig with time-slicing (gpu-test5's and gpu-test6's config): NVIDIA's plugin runs
    the driver root's `nvidia-smi -c DEFAULT` and `compute-policy --set-timeslice` at prepare
    (before they existed in the fake, the prepare failed); the pod runs and sees its GPU."""
    resource_api = ResourceApi(api)
    core = kclient.CoreV1Api(api)
    template = resource_api.claim_template("ts", [resource_api.device_request("dev", DRIVER)])
    template["spec"]["spec"]["devices"]["config"] = [{"requests": ["dev"], "opaque": {
        "driver": DRIVER, "parameters": {
            "apiVersion": drivers.config_api_version(DRIVER), "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}}}]
    resource_api.create("resourceclaimtemplates", template, namespace=ns)
    k8s.create_pod(core, ns, _pod("p", "ts", nvidia_cluster.workload_image,
                                  "echo BEGIN; nvidia-smi -L; echo END"))
    k8s.wait_pod_running(core, ns, "p", timeout=180)
    (uuid,) = allocated_uuids(resource_api, core, ns, "p")
    listed = smi_listing(core, ns, "p")
    assert len(listed) == 1 and listed[0].endswith(f"(UUID: {uuid})"), listed


def test_an_mps_shared_gpu_runs_with_its_control_daemon(request: pytest.FixtureRequest,
                                                        nvidia_cluster: ClusterInfo, api: Any,
                                                        ns: str) -> None:
    """A GpuConfig with MPS (gpu-test5's other half): NVIDIA's plugin sets the GPU's compute
    mode to EXCLUSIVE_PROCESS, starts the claim's MPS control daemon as a Deployment from its
    template (the driver root's nvidia-cuda-mps-control, given the thread percentage) and
    waits for it; the pod runs with the daemon's pipe directory, and deleting the pod stops
    the daemon."""
    needs_templates(request)
    resource_api, core = ResourceApi(api), kclient.CoreV1Api(api)
    template = resource_api.claim_template("mps", [resource_api.device_request("dev", DRIVER)])
    template["spec"]["spec"]["devices"]["config"] = [{"requests": ["dev"], "opaque": {
        "driver": DRIVER, "parameters": {
            "apiVersion": drivers.config_api_version(DRIVER), "kind": "GpuConfig",
            "sharing": {"strategy": "MPS",
                        "mpsConfig": {"defaultActiveThreadPercentage": 50}}}}}]
    resource_api.create("resourceclaimtemplates", template, namespace=ns)
    k8s.create_pod(core, ns, _pod("p", "mps", nvidia_cluster.workload_image,
                                  "echo BEGIN; echo $CUDA_MPS_PIPE_DIRECTORY; ls /tmp/nvidia-mps; "
                                  "nvidia-smi --query-gpu=uuid,compute_mode --format=csv,noheader;"
                                  " echo END"))
    k8s.wait_pod_running(core, ns, "p", timeout=180)
    (uuid,) = allocated_uuids(resource_api, core, ns, "p")
    assert smi_listing(core, ns, "p") == ["/tmp/nvidia-mps", "control",
                                          f"{uuid}, Exclusive_Process"]
    claim = resource_api.claim(ns, pod_claim_name(k8s.read_pod(core, ns, "p"), "dev"))
    apps = kclient.AppsV1Api(api)

    def daemons() -> list[Any]:  # named mps-control-daemon-<claim uid>-<devices' hash>
        prefix = f"mps-control-daemon-{claim['metadata']['uid']}-"
        listed: Any = apps.list_deployment_for_all_namespaces().items
        return [d for d in listed if d.metadata.name.startswith(prefix)]

    [daemon] = daemons()
    assert daemon.status.ready_replicas == 1
    daemon_pods: Any = core.list_namespaced_pod(daemon.metadata.namespace,
                                                label_selector=f"app={daemon.metadata.name}").items
    [daemon_pod] = daemon_pods
    log = k8s.pod_log(core, daemon.metadata.namespace, daemon_pod.metadata.name)
    assert "Cmd:set_default_active_thread_percentage 50" in log, log
    core.delete_namespaced_pod("p", ns, grace_period_seconds=0)
    k8s.wait_pod_gone(core, ns, "p")
    wait_for(until_true(lambda: not daemons()), what="the MPS daemon stopped", timeout=120)


# --- NVIDIA's health monitor ------------------------------------------------------------------

HEALTH_NODE = "nv-1"  # one H100, whole: NVIDIA's monitor watches whole GPUs and static MIG


@pytest.fixture(scope="module")
def health_cluster(request: pytest.FixtureRequest) -> Iterator[ClusterInfo]:
    """A cluster of its own: NVIDIA's taints are permanent (its plugin clears none until it
    restarts), so they must not meet the other tests' claims."""
    yield from nvidia_plugin_cluster(request, "nvh", ["--feature-gates=NVMLDeviceHealthCheck=true"])


@pytest.fixture()
def health_ns(health_cluster: ClusterInfo) -> Iterator[str]:
    yield from namespace(k8s.new_api_client(health_cluster.kubeconfig), "e2e-nvidia-health")


def gpu_taints(api: ResourceApi, node: str) -> list[tuple[str, str, str]]:
    """(key, value, effect) of each taint on the whole GPU ``node``'s slice publishes."""
    [gpu] = [d for s in api.slices(DRIVER) if s["spec"].get("nodeName") == node
             for d in s["spec"].get("devices") or () if attribute_value(d, "type") == "gpu"]
    return [(t["key"], t.get("value", ""), t["effect"])
            for t in (gpu.get("basic") or gpu).get("taints") or ()]


def test_an_xid_taints_the_gpu_through_nvidias_health_monitor(health_cluster: ClusterInfo,
                                                               health_ns: str) -> None:
    """A fault injected into the fake GPU reaches NVIDIA's own monitor as the NVML XID event
    it waits for: its plugin republishes the GPU with its taint (``gpu.nvidia.com/xid``, the
    XID as value; effect None for the XIDs it deems application errors, NoSchedule for the
    others), and a claim for that GPU is then refused by the scheduler."""
    api = k8s.new_api_client(health_cluster.kubeconfig)
    resource_api, core = ResourceApi(api), kclient.CoreV1Api(api)
    [uuid] = nvml_uuids(health_cluster, HEALTH_NODE)[0]
    cel = f'device.attributes["{DRIVER}"].uuid == "{uuid}"'
    resource_api.create("resourceclaimtemplates", resource_api.claim_template(
        "h100", [resource_api.device_request("gpu", DRIVER, cel=[cel])]), namespace=health_ns)
    assert gpu_taints(resource_api, HEALTH_NODE) == []
    faults.inject(health_cluster, HEALTH_NODE, 0, "xid", 13)  # an application error
    wait_for(until_true(lambda: gpu_taints(resource_api, HEALTH_NODE) == [
        (f"{DRIVER}/xid", "13", "None")]), what="a taint for XID 13", timeout=60)
    # Effect None informs and blocks nothing: a pod still gets the GPU.
    k8s.create_pod(core, health_ns, _pod("p1", "h100", health_cluster.workload_image,
                                         "nvidia-smi -L"))
    k8s.wait_pod_running(core, health_ns, "p1", timeout=120)
    core.delete_namespaced_pod("p1", health_ns, grace_period_seconds=0)
    k8s.wait_pod_gone(core, health_ns, "p1")
    faults.inject(health_cluster, HEALTH_NODE, 0, "xid", 79)  # fallen off the bus
    wait_for(until_true(lambda: (f"{DRIVER}/xid", "79", "NoSchedule") in gpu_taints(
        resource_api, HEALTH_NODE)), what="a NoSchedule taint for XID 79", timeout=60)
    k8s.create_pod(core, health_ns, _pod("p2", "h100", health_cluster.workload_image,
                                         "nvidia-smi -L"))
    k8s.wait_unschedulable(core, health_ns, "p2", what="the claim for the tainted GPU refused")


# --- dynamic MIG ---------------------------------------------------------------------------------

DMIG_NODE = "nv-1"  # its H100 starts with MIG off: the plugin turns it on for the first instance
DMIG_PROFILE = "1g.10gb"


@pytest.fixture(scope="module")
def dmig_cluster(request: pytest.FixtureRequest) -> Iterator[ClusterInfo]:
    """A second cluster: NVIDIA's plugin with dynamic MIG. It publishes every MIG placement as
    a partitionable device and creates the instances at prepare, destroys them at unprepare;
    it reads a new instance's capability files the moment NVML's create returns, which the fake
    library writes then, as the real driver does (before that, every prepare failed)."""
    yield from nvidia_plugin_cluster(request, "dmig", ["--feature-gates=DynamicMIG=true"])


@pytest.fixture(scope="module")
def dmig_api(dmig_cluster: ClusterInfo) -> Any:
    return k8s.new_api_client(dmig_cluster.kubeconfig)


@pytest.fixture()
def dmig_ns(dmig_api: Any) -> Iterator[str]:
    yield from namespace(dmig_api, "e2e-nvidia-dmig")


def node_mig_devices(cluster: ClusterInfo) -> list[dict[str, Any]]:
    out = nodenvml.run(cluster.name, DMIG_NODE, ["smi", "-o", "json"], provider=cluster.provider)
    assert out.returncode == 0, out.stderr
    return list(json.loads(out.stdout)["mig_devices"])


def _bytes(quantity: str) -> int:
    return int(parse_quantity(quantity))  # type: ignore[no-untyped-call]


def test_dynamic_mig_publishes_every_placement_as_a_partition(dmig_cluster: ClusterInfo,
                                                              dmig_api: Any) -> None:
    devices = [d for s in ResourceApi(dmig_api).slices(DRIVER, node=DMIG_NODE)
               for d in s["spec"].get("devices") or ()]
    migs = [d for d in devices if attribute_value(d, "type") == "mig"]
    assert migs and all(d.get("consumesCounters") for d in migs), devices
    assert any(attribute_value(d, "profile") == DMIG_PROFILE for d in migs), migs
    assert node_mig_devices(dmig_cluster) == []  # nothing is created before a claim needs it
    # The shape fakegpu's plugin follows as NVIDIA's driver (tests/plugin/test_partitions.py):
    # the whole GPU has every MIG capacity (the largest profile's), a partition no
    # memorySlice<i>, and the whole GPU's memory is the largest partition's.
    mig_capacities = {"memory", "multiprocessors", "copyEngines", "decoders", "encoders",
                      "jpegEngines", "ofaEngines"}
    (whole,) = [d for d in devices if attribute_value(d, "type") == "gpu"]
    assert set(whole["capacity"]) == mig_capacities, whole["capacity"]
    for d in migs:
        assert set(d["capacity"]) == mig_capacities, d
    largest = max(migs, key=lambda d: _bytes(d["capacity"]["memory"]["value"]))
    assert whole["capacity"]["memory"] == largest["capacity"]["memory"], (whole, largest)


def test_dynamic_mig_creates_the_instance_at_prepare_and_destroys_it_after_a_restart(
        dmig_cluster: ClusterInfo, dmig_api: Any, dmig_ns: str) -> None:
    cluster, ns = dmig_cluster, dmig_ns
    resource_api = ResourceApi(dmig_api)
    core = kclient.CoreV1Api(dmig_api)
    request = resource_api.device_request(
        "dev", "mig.nvidia.com",
        # nv-1's H100 (nv-0's MIG A100s offer a 1g.10gb too).
        cel=[f"device.attributes['{DRIVER}'].profile == '{DMIG_PROFILE}'",
             f"device.attributes['{DRIVER}'].productName.contains('H100')"])
    resource_api.create("resourceclaimtemplates", resource_api.claim_template("one", [request]),
                        namespace=ns)
    k8s.create_pod(core, ns, _pod("p", "one", cluster.workload_image,
                                  "echo BEGIN; nvidia-smi -L; echo END"))
    k8s.wait_pod_running(core, ns, "p", timeout=180)
    # A partition has no UUID until it is made (none is published): NVML names it now.
    made = node_mig_devices(cluster)
    assert len(made) == 1 and made[0]["profile"] == DMIG_PROFILE, made
    listed = smi_listing(core, ns, "p")
    assert len(listed) == 2 and listed[1].endswith(f"(UUID: {made[0]['uuid']})"), listed

    # The plugin restarts between prepare and unprepare (its pod deleted and made again, an
    # upgrade): the instance it made stays with the running pod, and the new plugin, which
    # finds it in its checkpoint, destroys it at unprepare.
    get_provider(cluster.provider).restart_plugin(cluster.name, DMIG_NODE)
    assert node_mig_devices(cluster) == made
    pod = k8s.read_pod(core, ns, "p")
    assert pod.status.phase == "Running" and not any(
        c.restart_count for c in pod.status.container_statuses or ()), pod.status

    core.delete_namespaced_pod("p", ns, grace_period_seconds=0)
    k8s.wait_pod_gone(core, ns, "p")

    def destroyed() -> None:
        left = node_mig_devices(cluster)
        if left:
            raise NotYet(f"MIG devices still on {DMIG_NODE}: {left}")

    wait_for(destroyed, what=f"the plugin to destroy the MIG instance on {DMIG_NODE}", timeout=120)


# --- consumable shares (kubernetes-sigs main: its ConsumableShares gate) ------------------------

SHARES = 2  # --consumable-shares N: at most N claims of a device, one share each
SHARES_NODE = "nv-1"  # one H100, whole


def knows_flag(binary: Path, flag: str) -> bool:
    """Whether the plugin's --help lists ``flag`` (a release without it refuses to start)."""
    shown = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60,
                           check=False)
    return flag in shown.stdout + shown.stderr


@pytest.fixture(scope="module")
def shares_cluster(request: pytest.FixtureRequest) -> Iterator[ClusterInfo]:
    """NVIDIA's plugin sharing every whole GPU and static MIG device by consumable capacity
    (``--consumable-shares N``); only its main branch has the flag."""
    binary = request.config.getoption("fakegpu_nvidia_plugin_bin")
    if binary and not knows_flag(Path(binary), "--consumable-shares"):
        pytest.skip(f"{binary} has no --consumable-shares: consumable shares are in "
                    "kubernetes-sigs/dra-driver-nvidia-gpu's main after v0.4, not in this build")
    yield from nvidia_plugin_cluster(request, "nvcs", [
        "--feature-gates=ConsumableShares=true", f"--consumable-shares={SHARES}"])


@pytest.fixture()
def shares_ns(shares_cluster: ClusterInfo) -> Iterator[str]:
    yield from namespace(k8s.new_api_client(shares_cluster.kubeconfig), "e2e-nvidia-shares")


def _quantities(value: Any) -> Any:
    """``value`` with every string that is a Kubernetes quantity as its number, so ``1Mi``
    and ``1048576`` compare equal, as the apiserver treats them."""
    if isinstance(value, dict):
        return {k: _quantities(v) for k, v in value.items()}
    if isinstance(value, str):
        try:
            return parse_quantity(value)  # type: ignore[no-untyped-call]
        except ValueError:
            return value
    return value


def test_consumable_shares_publish_what_fakegpus_nvidia_mode_publishes(
        shares_cluster: ClusterInfo) -> None:
    """Every whole GPU and static MIG device NVIDIA's plugin publishes under its shares policy
    has the shape fakegpu's plugin publishes as NVIDIA's with the same ``--consumable-shares``
    (``plugin.shape.apply_shares``): several claims at once, memory in MiB steps from 0, and a
    ``shares`` capacity of N, one per claim unless asked otherwise."""
    from fakegpu.plugin.shape import apply_shares

    resource_api = ResourceApi(k8s.new_api_client(shares_cluster.kubeconfig))
    published = [d for s in resource_api.slices(DRIVER) for d in s["spec"].get("devices") or ()]
    kinds = {str(attribute_value(d, "type")) for d in published}
    assert {"gpu", "mig"} <= kinds, kinds
    for device in published:
        memory = _bytes(device["capacity"]["memory"]["value"])
        expected: dict[str, Any] = {"capacity": {"memory": {"value": str(memory)}}}
        apply_shares(expected, str(SHARES), memory)
        assert device.get("allowMultipleAllocations") is True, device["name"]
        assert _quantities(device["capacity"]["memory"]) == _quantities(
            expected["capacity"]["memory"]), device["name"]
        assert _quantities(device["capacity"]["shares"]) == _quantities(
            expected["capacity"]["shares"]), device["name"]


def test_two_claims_share_a_gpu_by_shares_and_a_third_waits(shares_cluster: ClusterInfo,
                                                             shares_ns: str) -> None:
    """N claims of one share each get the same GPU with distinct share IDs, and their pods,
    prepared by NVIDIA's plugin, see that GPU; claim N+1 is refused until one goes."""
    api = k8s.new_api_client(shares_cluster.kubeconfig)
    resource_api, core, ns = ResourceApi(api), kclient.CoreV1Api(api), shares_ns
    [gpu] = [d for s in resource_api.slices(DRIVER) if s["spec"].get("nodeName") == SHARES_NODE
             for d in s["spec"].get("devices") or () if attribute_value(d, "type") == "gpu"]
    uuid = str(attribute_value(gpu, "uuid"))
    names = [f"s{i}" for i in range(SHARES + 1)]
    for name in names:
        request = resource_api.device_request("dev", DRIVER, cel=[
            f'device.attributes["{DRIVER}"].uuid == "{uuid}"'])
        (request.get("exactly") or request)["capacity"] = {"requests": {"shares": "1"}}
        resource_api.create("resourceclaimtemplates", resource_api.claim_template(
            name, [request]), namespace=ns)
    for name in names[:SHARES]:
        k8s.create_pod(core, ns, _pod(name, name, shares_cluster.workload_image,
                                      "echo BEGIN; nvidia-smi -L; echo END"))
    share_ids = set()
    for name in names[:SHARES]:
        k8s.wait_pod_running(core, ns, name, timeout=180)
        claim = resource_api.claim(ns, pod_claim_name(k8s.read_pod(core, ns, name), "dev"))
        [result] = allocation_results(claim, DRIVER)
        assert (result["pool"], result["device"]) == (SHARES_NODE, gpu["name"]), result
        assert result.get("consumedCapacity", {}).get("shares") == "1", result
        share_ids.add(result["shareID"])
        listed = smi_listing(core, ns, name)
        assert len(listed) == 1 and listed[0].endswith(f"(UUID: {uuid})"), listed
    assert len(share_ids) == SHARES, share_ids
    last = names[SHARES]
    k8s.create_pod(core, ns, _pod(last, last, shares_cluster.workload_image,
                                  "echo BEGIN; nvidia-smi -L; echo END"))
    k8s.wait_unschedulable(core, ns, last, what=f"a claim for share {SHARES + 1} refused")
    core.delete_namespaced_pod(names[0], ns, grace_period_seconds=0)
    k8s.wait_pod_gone(core, ns, names[0])
    k8s.wait_pod_running(core, ns, last, timeout=300)
