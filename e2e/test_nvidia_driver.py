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
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu import drivers
from fakegpu.cluster import external, get_provider, nodenvml
from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit import k8s
from fakegpu.testkit.dra import ResourceApi, attribute_value
from fakegpu.topology.packaged import FIXTURES

# Not `e2e`: that marker brings up the session's cluster (fakegpu's plugin) for every test, and
# this module needs only its own. `integration` keeps it in `make test` (skipped, with the
# reason, without a binary) and out of `-m e2e` runs on kind, where no host binary can run.
pytestmark = pytest.mark.integration

DRIVER = drivers.NVIDIA
NODE = "nv-0"
TOPOLOGY = FIXTURES / "nvidia-driver.yaml"
NOT_GIVEN = ("NVIDIA's gpu-kubelet-plugin was not given (--fakegpu-nvidia-plugin-bin PATH): its "
             "source is not on the package proxies here; build it from NVIDIA/k8s-dra-driver-gpu "
             "(go build -mod=vendor ./cmd/gpu-kubelet-plugin, docs/nvidia-driver.md)")


@pytest.fixture(scope="module")
def nvidia_cluster(request: pytest.FixtureRequest) -> Iterator[ClusterInfo]:
    binary = request.config.getoption("fakegpu_nvidia_plugin_bin")
    if not binary:
        warnings.warn(NOT_GIVEN, stacklevel=1)  # in the warnings summary, not only -rs
        pytest.skip(NOT_GIVEN)
    plugin = external.parse(Path(binary), [], preset="nvidia", driver=None, beside=False,
                            env=[])
    clusters = get_provider("embedded")
    name = f"{request.config.getoption('fakegpu_cluster_name')}-nvd"
    clusters.down(name)
    try:
        yield clusters.up(name, TOPOLOGY, request.config.getoption("fakegpu_k8s_version"),
                          driver="nvidia", plugin=plugin)
    finally:
        if not request.config.getoption("fakegpu_keep_cluster"):
            clusters.down(name)


@pytest.fixture(scope="module")
def api(nvidia_cluster: ClusterInfo) -> Any:
    return k8s.new_api_client(nvidia_cluster.kubeconfig)


@pytest.fixture()
def ns(api: Any) -> Iterator[str]:
    core = kclient.CoreV1Api(api)
    name = k8s.create_namespace(core, prefix="e2e-nvidia-driver",
                                labels={"fakegpu.dev/test": "e2e"})
    yield name
    k8s.delete_namespace(core, name)


def nvml_uuids(cluster: ClusterInfo) -> tuple[set[str], set[str]]:
    """(UUIDs of whole GPUs with MIG off, UUIDs of MIG devices) as NVML reports them."""
    out = nodenvml.run(cluster.name, NODE, ["smi", "-o", "json"], provider=cluster.provider)
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
