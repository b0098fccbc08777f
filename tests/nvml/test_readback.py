"""Every fixture's GPUs read back through the real pynvml exactly as the topology says."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from fakegpu.nvml import state
from fakegpu.topology.load import load_topology
from fakegpu.topology.model import LinkState, RemoteType, Topology

from .conftest import FIXTURE_FILES, FIXTURES, py_json, render_node, topology

# One interpreter per fixture walks every node: re-init with another FAKEGPU_NVML_STATE.
PROBE = """
import json, os, sys
import pynvml as n
out = []
for path in json.loads(sys.argv[1] if len(sys.argv) > 1 else os.environ["PROBE_STATES"]):
    os.environ["FAKEGPU_NVML_STATE"] = path
    n.nvmlInit()
    node = {"driver": n.nvmlSystemGetDriverVersion(), "cuda": n.nvmlSystemGetCudaDriverVersion_v2(),
            "gpus": []}
    for i in range(n.nvmlDeviceGetCount()):
        h = n.nvmlDeviceGetHandleByIndex(i)
        pci = n.nvmlDeviceGetPciInfo_v3(h)
        mem = n.nvmlDeviceGetMemoryInfo(h)
        g = {"index": n.nvmlDeviceGetIndex(h), "minor": n.nvmlDeviceGetMinorNumber(h),
             "name": n.nvmlDeviceGetName(h), "uuid": n.nvmlDeviceGetUUID(h),
             "serial": n.nvmlDeviceGetSerial(h), "module": n.nvmlDeviceGetModuleId(h),
             "part": n.nvmlDeviceGetBoardPartNumber(h), "arch": n.nvmlDeviceGetArchitecture(h),
             "cc": list(n.nvmlDeviceGetCudaComputeCapability(h)), "brand": n.nvmlDeviceGetBrand(h),
             "mem_total": mem.total,
             "busId": pci.busId, "busIdLegacy": pci.busIdLegacy, "domain": pci.domain,
             "bus": pci.bus, "device": pci.device, "pciDeviceId": pci.pciDeviceId,
             "byUuid": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByUUID(n.nvmlDeviceGetUUID(h))),
             "byPci": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByPciBusId(pci.busId)),
             "links": []}
        for link in range(n.NVML_NVLINK_MAX_LINKS):
            try:
                active = n.nvmlDeviceGetNvLinkState(h, link)
            except n.NVMLError_NotSupported:
                continue
            rp = n.nvmlDeviceGetNvLinkRemotePciInfo(h, link)
            g["links"].append({"link": link, "active": active, "remote": rp.busId,
                               "type": n.nvmlDeviceGetNvLinkRemoteDeviceType(h, link),
                               "version": n.nvmlDeviceGetNvLinkVersion(h, link)})
        try:
            f = n.c_nvmlGpuFabricInfo_v2_t()
            n.nvmlDeviceGetGpuFabricInfoV(h, n.byref(f))
            g["fabric"] = [bytes(f.clusterUuid).hex(), f.cliqueId, f.state]
        except n.NVMLError_NotSupported:
            g["fabric"] = None
        try:
            g["mig"] = list(n.nvmlDeviceGetMigMode(h))
        except n.NVMLError_NotSupported:
            g["mig"] = None
        node["gpus"].append(g)
    n.nvmlShutdown()
    out.append(node)
print(json.dumps(out))
"""

ARCH = {"ampere": 7, "hopper": 9, "blackwell": 10}


def _expected_link(topo: Topology, node_name: str, link: Any) -> dict[str, Any]:
    return {"link": link.link, "active": int(link.state is LinkState.UP),
            "remote": link.remote_pci.bus_id,
            "type": 0 if link.remote_type is RemoteType.GPU else 2}


@pytest.mark.integration
@pytest.mark.parametrize("fixture", FIXTURE_FILES, ids=lambda p: p.stem)
def test_fixture_reads_back(fixture: Path, tmp_path: Path) -> None:
    topo = load_topology(fixture)
    # The state files alone: render()'s sysfs view beside each is for the plugins, and for
    # fleet-1000 it was most of this test's time (about 25 ms of a core per node).
    paths = []
    for n in topo.nodes:
        path = tmp_path / f"{n.name}.state"
        path.write_bytes(state.render_bytes(topo, n))
        paths.append(str(path))
    got = py_json(paths[0], PROBE, extra_env={"PROBE_STATES": json.dumps(paths)}, timeout=120)
    assert len(got) == len(topo.nodes)
    for node, seen in zip(topo.nodes, got, strict=True):
        assert seen["driver"] == topo.driver.version
        assert seen["cuda"] == topo.driver.cuda_version
        assert len(seen["gpus"]) == len(node.gpus)
        for gpu, g in zip(node.gpus, seen["gpus"], strict=True):
            p = gpu.product
            assert g["index"] == gpu.index == g["byUuid"] == g["byPci"]
            assert g["minor"] == gpu.minor
            assert g["name"] == p.name
            assert g["uuid"] == gpu.uuid
            assert g["serial"] == gpu.serial
            assert g["module"] == gpu.module_id
            assert g["part"] == gpu.board_part_number
            assert g["arch"] == ARCH[p.architecture]
            assert tuple(g["cc"]) == p.cuda_compute_capability
            assert g["mem_total"] == p.memory_mib * 1024 * 1024
            assert g["busId"] == gpu.pci.bus_id
            assert g["busIdLegacy"] == gpu.pci.bus_id_legacy
            assert (g["domain"], g["bus"], g["device"]) == (gpu.pci.domain, gpu.pci.bus,
                                                            gpu.pci.device)
            assert g["pciDeviceId"] == (p.pci_device_id << 16) | 0x10DE
            expected_links = [_expected_link(topo, node.name, link)
                              for link in sorted(gpu.nvlinks, key=lambda k: k.link)]
            assert [{k: v for k, v in link.items() if k != "version"} for link in g["links"]] \
                == expected_links
            if p.nvlink is not None:
                assert {link["version"] for link in g["links"]} <= {p.nvlink.generation}
            on_switch = any(k.remote_type is RemoteType.SWITCH and k.remote_node == node.name
                            for k in gpu.nvlinks)
            if gpu.fabric is None and on_switch and p.architecture != "ampere":
                # an NVSwitch system without multi-node NVLink: completed, no cluster
                assert g["fabric"] == ["00" * 16, 0, 3]
            elif gpu.fabric is None:
                assert g["fabric"] is None
            else:
                assert g["fabric"] == [uuid.UUID(gpu.fabric.cluster_uuid).bytes.hex(),
                                       gpu.fabric.clique_id, 3 if gpu.fabric.state.value ==
                                       "completed" else g["fabric"][2]]
            if p.mig is None:
                assert g["mig"] is None
            else:
                assert g["mig"] == [int(gpu.mig.enabled)] * 2


@pytest.mark.integration
def test_remote_gpu_peers_resolve(tmp_path: Path) -> None:
    """Links to GPUs name a GPU that exists with that PCI address (fabric or direct)."""
    for fixture in FIXTURE_FILES:
        topo = load_topology(fixture)
        for node in topo.nodes:
            for gpu in node.gpus:
                for link in gpu.nvlinks:
                    if link.remote_type is RemoteType.GPU:
                        assert link.remote_gpu_index is not None
                        peer = topo.node(link.remote_node).gpu(link.remote_gpu_index)
                        assert peer.pci == link.remote_pci


FIDELITY = """
import json, pynvml as n
n.nvmlInit()
out = []
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    mode = n.nvmlDeviceGetAddressingMode(h)
    try:
        f = n.c_nvmlGpuFabricInfo_v3_t()
        f.version = n.nvmlGpuFabricInfo_v3
        n.nvmlDeviceGetGpuFabricInfoV(h, n.byref(f))
        fabric = [bytes(f.clusterUuid).hex() == "00" * 16, f.cliqueId, f.state, f.status]
    except n.NVMLError_NotSupported:
        fabric = None
    out.append([n.nvmlDeviceGetName(h), mode, fabric])
print(json.dumps(out[0]))
"""


@pytest.mark.integration
@pytest.mark.parametrize("product,nvlink,mode,fabric", [
    # x86 HGX parts: addressing NONE (a real x86 H200, driver 580.159.04, 2026-12-04; issue 15
    # made B200 stop answering ATS); NVSwitch inside the node: completed fabric, no cluster
    ("B200", "switched", 0, [True, 0, 3, 0]),
    ("H100-SXM5-80GB", "switched", 0, [True, 0, 3, 0]),
    # Ampere predates GPU fabric info (NOT_SUPPORTED); a Hopper without NVSwitches answers the
    # call with state NOT_SUPPORTED, as the real H200 without a fabric did
    ("A100-SXM4-80GB", "switched", 0, None),
    ("H100-SXM5-80GB", "none", 0, [True, 0, 0, 0]),
])
def test_addressing_mode_and_switch_fabric(tmp_path: Path, product: str, nvlink: str, mode: int,
                                           fabric: list[Any] | None) -> None:
    """issue 15: B200 (an x86 part) answered ATS; NVSwitch systems had no fabric info."""
    src = tmp_path / "t.yaml"
    src.write_text(f"name: t\nseed: 1\ndriver: {{version: \"580.95.05\", cuda_version: \"13.0\"}}\n"
                   f"nodes:\n  - name: n0\n    gpus: {{product: {product}, count: 4}}\n"
                   f"    nvlink: {nvlink}\n")
    topo = load_topology(src)
    path = state.render(topo, "n0", tmp_path / "n0.state")
    got = py_json(path, FIDELITY)
    assert got == [topo.nodes[0].gpus[0].product.name, mode, fabric]


@pytest.mark.integration
def test_grace_part_answers_ats(tmp_path: Path) -> None:
    topo = load_topology(FIXTURES / "gb200-mini.yaml")
    path = state.render(topo, topo.nodes[0].name, tmp_path / "n.state")
    got = py_json(path, FIDELITY)
    gpu = topo.nodes[0].gpus[0]
    assert gpu.fabric is not None
    assert got == [gpu.product.name, 2, [False, gpu.fabric.clique_id, 3, 0]]


def test_persistence_and_compute_mode_are_kept_for_every_process(tmp_path: Path) -> None:
    """Set in one process (as nvidia-smi -pm / -c does), read in the next: the node's state
    holds them; a mode NVML does not know is INVALID_ARGUMENT."""
    path = render_node(tmp_path, topology("dgx-h100"), "dgx-h100-0")
    assert py_json(path, """
import json, pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(3)
n.nvmlDeviceSetPersistenceMode(h, n.NVML_FEATURE_DISABLED)
n.nvmlDeviceSetComputeMode(h, n.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS)
try:
    n.nvmlDeviceSetComputeMode(h, 7)
    bad = 0
except n.NVMLError as err:
    bad = err.value
print(json.dumps(bad))
""") == 2  # NVML_ERROR_INVALID_ARGUMENT
    got = py_json(path, """
import json, pynvml as n
n.nvmlInit()
print(json.dumps([[n.nvmlDeviceGetPersistenceMode(n.nvmlDeviceGetHandleByIndex(i)),
                   n.nvmlDeviceGetComputeMode(n.nvmlDeviceGetHandleByIndex(i))] for i in (2, 3)]))
""")
    assert got == [[1, 0], [0, 3]]  # GPU 2 untouched: persistence on, DEFAULT
