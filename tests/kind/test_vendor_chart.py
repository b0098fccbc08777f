"""A vendor's DRA driver as it ships, a Helm chart and an image, on fake GPU nodes on kind
(``cluster up --provider kind --plugin-chart``, issue 23, docs/vendors.md path c).

The vendor here is fakegpu's own chart and image under another driver name (gpu.example.com),
installed through the vendor path exactly as a vendor's would be: release dra-driver, the
vendor's values file, the image loaded into the nodes. Observed as a vendor would: the
driver's ResourceSlices against what NVML shows on the node, a fault injected through the fake
node reaching the driver, and the conformance tool's verdict.

Not ``e2e`` (that marker brings up the session's cluster, with fakegpu's own driver): the
module makes its own cluster. ``docker`` puts it in ``make test``'s kind pass, with the other
tests that need Docker, away from the first pass's four workers.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakegpu.cluster import driverchart, get_provider
from fakegpu.cluster.kind import config
from fakegpu.cluster.provider import ClusterInfo
from fakegpu.deploy import chart_dir
from fakegpu.testkit import faults, k8s
from fakegpu.testkit.dra import ResourceApi, attribute_value, node_devices
from fakegpu.testkit.wait import NotYet, wait_for
from fakegpu.topology.packaged import FIXTURES

pytestmark = [pytest.mark.integration, pytest.mark.docker]

DRIVER = "gpu.example.com"
TOPOLOGY = FIXTURES / "dgx-h100.yaml"
NODE = "dgx-h100-0"


@pytest.fixture(scope="module")
def vendor_cluster(request: pytest.FixtureRequest, plugin_image: str,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterInfo]:
    repo, tag = plugin_image.rsplit(":", 1)
    values = tmp_path_factory.mktemp("vendor") / "values.yaml"
    # What a vendor writes for its own chart: its image, its driver name, where to run.
    values.write_text(yaml.safe_dump({
        "topology": TOPOLOGY.read_text(), "driverName": DRIVER,
        "image": {"repository": repo, "tag": tag},
        "nodeSelector": {config.WORKER_LABEL: "true"},
        "computeDomains": {"enabled": False}, "nics": {"enabled": False}}))
    chart = driverchart.parse(str(chart_dir()), driver=DRIVER, values=[values],
                              images=[plugin_image])
    clusters = get_provider("kind")
    name = f"{request.config.getoption('fakegpu_cluster_name')}-vc"
    clusters.down(name)
    try:
        yield clusters.up(name, TOPOLOGY, request.config.getoption("fakegpu_k8s_version"),
                          chart=chart)
    finally:
        if not request.config.getoption("fakegpu_keep_cluster"):
            clusters.down(name)


@pytest.fixture(scope="module")
def resource_api(vendor_cluster: ClusterInfo) -> ResourceApi:
    return ResourceApi(k8s.new_api_client(vendor_cluster.kubeconfig))


def test_the_vendors_driver_publishes_the_gpus_nvml_shows_on_the_fake_node(
        vendor_cluster: ClusterInfo, resource_api: ResourceApi) -> None:
    assert vendor_cluster.driver_name == DRIVER and vendor_cluster.nic_driver == ""
    published = node_devices(resource_api, DRIVER)
    assert set(published) == {NODE}
    uuids = {attribute_value(d, "uuid") for d in published[NODE]}
    view = faults.smi_view(vendor_cluster, NODE)
    assert uuids == {g["uuid"] for g in view["gpus"]} and len(uuids) == 8


def _taints(api: ResourceApi, uuid: str) -> list[str]:
    [device] = [d for d in node_devices(api, DRIVER)[NODE] if attribute_value(d, "uuid") == uuid]
    return [t["key"] for t in (device.get("basic") or device).get("taints") or []]


def test_a_fault_injected_through_the_fake_node_reaches_the_vendors_driver(
        vendor_cluster: ClusterInfo, resource_api: ResourceApi) -> None:
    gpu = 5
    uuid = faults.smi_view(vendor_cluster, NODE)["gpus"][gpu]["uuid"]
    assert _taints(resource_api, uuid) == []
    faults.inject(vendor_cluster, NODE, gpu, "xid", 79)
    try:
        def tainted() -> list[str]:
            keys = _taints(resource_api, uuid)
            if not keys:
                raise NotYet("no taint yet")
            return keys

        keys = wait_for(tainted, what=f"the driver to taint GPU {gpu} after XID 79",
                        timeout=120)
        assert all(k.startswith(f"{DRIVER}/") for k in keys), keys
    finally:
        faults.clear(vendor_cluster, NODE, gpu)

    def lifted() -> None:
        if _taints(resource_api, uuid):
            raise NotYet(f"taints {_taints(resource_api, uuid)}")

    wait_for(lifted, what="the taint to be lifted once the fault is cleared", timeout=120)


def test_the_vendors_driver_passes_conformance_on_fake_nodes(
        vendor_cluster: ClusterInfo, tmp_path: Path) -> None:
    capabilities = tmp_path / "capabilities.yaml"
    doc: dict[str, Any] = yaml.safe_load(
        (Path(driverchart.__file__).parents[1] / "conformance" / "capabilities"
         / "fakegpu.yaml").read_text())
    # The vendor's release: its service account writes the slices.
    doc["supports"]["sliceWriteScope"] = {"serviceAccount": "dra-driver/dra-driver-fakegpu"}
    capabilities.write_text(yaml.safe_dump(doc))
    out = subprocess.run(
        [sys.executable, "-m", "fakegpu", "conformance", "--kubeconfig",
         str(vendor_cluster.kubeconfig), "--driver", DRIVER, "--device-class", DRIVER,
         "--capabilities", str(capabilities), "--image", vendor_cluster.workload_image,
         "--report", str(tmp_path / "report")],
        capture_output=True, text=True, timeout=900, check=False)
    # Exit 0: every declared check passed (a failed one exits 1, docs/conformance.md).
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert (tmp_path / "report" / "conformance.md").is_file()
