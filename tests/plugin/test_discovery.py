from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fakegpu.plugin.discovery import normalize_bus_id, numa_node, pcie_root
from fakegpu.plugin.slices import semver
from fakegpu.topology.packaged import FIXTURES


def test_bus_id_in_sysfs_form() -> None:
    assert normalize_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert normalize_bus_id("00000001:C1:00.0") == "0001:c1:00.0"


def test_pcie_root_from_sysfs_only_for_an_nvidia_device(tmp_path: Path) -> None:
    """As NVIDIA's driver: the root complex from sysfs, nothing when sysfs does not know the
    GPU (never the invented ``pci0000:3b`` for 0000:3b:00.0), nor a host device that merely
    sits at the fake GPU's address."""
    devices = tmp_path / "devices" / "pci0000:17" / "0000:17:00.0"
    links = tmp_path / "bus" / "pci" / "devices"
    links.mkdir(parents=True)
    for bus, vendor in (("0000:18:00.0", "0x10de\n"), ("0000:19:00.0", "0x8086\n")):
        (devices / bus).mkdir(parents=True)
        (devices / bus / "vendor").write_text(vendor)
        (devices / bus / "numa_node").write_text("1\n")
        (links / bus).symlink_to(devices / bus)
    assert pcie_root("0000:18:00.0", str(tmp_path)) == "pci0000:17"
    assert numa_node("0000:18:00.0", str(tmp_path)) == 1
    assert pcie_root("0000:19:00.0", str(tmp_path)) == ""  # not an NVIDIA device
    assert numa_node("0000:19:00.0", str(tmp_path)) is None
    assert pcie_root("0000:3b:00.0", str(tmp_path)) == ""  # no such device
    assert numa_node("0000:3b:00.0", str(tmp_path)) is None


def test_a_link_outside_devices_pci_or_to_another_address_is_no_root(tmp_path: Path) -> None:
    """deviceattribute's rules: the link must lead to devices/pci<root>/.../<its bus id>."""
    links = tmp_path / "bus" / "pci" / "devices"
    links.mkdir(parents=True)
    for where, bus in ((tmp_path / "elsewhere" / "0000:18:00.0", "0000:18:00.0"),
                       (tmp_path / "devices" / "pci0000:17" / "0000:1a:00.0", "0000:1b:00.0")):
        where.mkdir(parents=True)
        (where / "vendor").write_text("0x10de\n")
        (links / bus).symlink_to(where)
    assert pcie_root("0000:18:00.0", str(tmp_path)) == ""
    assert pcie_root("0000:1b:00.0", str(tmp_path)) == ""


def test_numa_minus_one_is_left_out(tmp_path: Path) -> None:
    where = tmp_path / "devices" / "pci0000:17" / "0000:18:00.0"
    where.mkdir(parents=True)
    (where / "vendor").write_text("0x10de\n")
    (where / "numa_node").write_text("-1\n")
    (tmp_path / "bus" / "pci" / "devices").mkdir(parents=True)
    (tmp_path / "bus" / "pci" / "devices" / "0000:18:00.0").symlink_to(
        "../../../devices/pci0000:17/0000:18:00.0")
    assert pcie_root("0000:18:00.0", str(tmp_path)) == "pci0000:17"  # a relative link too
    assert numa_node("0000:18:00.0", str(tmp_path)) is None


def test_semver_strips_leading_zeros() -> None:
    assert semver("580.159.03") == "580.159.3"
    assert semver("9.0") == "9.0.0"
    assert semver("13") == "13.0.0"


REPO = Path(__file__).resolve().parents[2]
NVIDIA_MIG_NAME = re.compile(r"^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$")
_READ = """
import dataclasses, json, sys
import pynvml
from fakegpu.plugin import discovery
inv = discovery.discover(nvidia_compatible=sys.argv[1:] == ["nvidia"])
# What NVML itself answers for each GPU's addressing mode (a code, or the error's value).
pynvml.nvmlInit()
modes = {}
for i in range(pynvml.nvmlDeviceGetCount()):
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        uuid = pynvml.nvmlDeviceGetUUID(h)
        modes[uuid] = pynvml.nvmlDeviceGetAddressingMode(h)
    except pynvml.NVMLError as err:
        modes[str(i)] = -err.value
print(json.dumps({"lost": list(inv.lost_indices), "addressing": modes,
                  "devices": [dataclasses.asdict(d) for d in inv.devices]}))
"""


def _fake_node(tmp_path: Path, fixture: str | Path, node: str) -> tuple[Path, dict[str, str]]:
    from fakegpu.nvml import env, state
    from fakegpu.topology.load import load_topology

    path = state.render(load_topology(FIXTURES / fixture), node, tmp_path / "s.bin")
    return path, {**os.environ, **env.env(path)}


def _discover(environ: dict[str, str], nvidia: bool = False) -> dict[str, Any]:
    # pynvml binds libnvidia-ml.so.1 once per process: read in a fresh one.
    out = subprocess.run([sys.executable, "-c", _READ, *(["nvidia"] if nvidia else [])],
                         env=environ, capture_output=True, text=True, check=True, timeout=60)
    return dict(json.loads(out.stdout))


def _run(environ: dict[str, str], code: str) -> None:
    subprocess.run([sys.executable, "-c", code], env=environ, check=True, timeout=60)


def test_mig_devices_read_back_from_the_fake_library(tmp_path: Path) -> None:
    from fakegpu.topology.load import load_topology

    node = load_topology(FIXTURES / "mixed.yaml").node("a100-0")
    _path, environ = _fake_node(tmp_path, "mixed.yaml", "a100-0")
    got = _discover(environ)
    by_name = {d["name"]: d for d in got["devices"]}
    # GPU 0 has three instances, GPU 1 MIG on without instances (nothing to offer),
    # GPUs 2 and 3 are whole GPUs: a GPU in MIG mode is never offered whole.
    migs = [d for d in got["devices"] if d["type"] == "mig"]
    assert sorted(d["profile"] for d in migs) == sorted(
        i.profile for i in node.gpus[0].mig.instances)
    assert sorted(d["name"] for d in got["devices"] if d["type"] == "gpu") == ["gpu-2", "gpu-3"]
    parent_uuid = {d["parent_uuid"] for d in migs}
    assert len(parent_uuid) == 1 and parent_uuid.pop().startswith("GPU-")
    for d in migs:
        m = d["mig"]
        # NVIDIA's current scheme, which NVIDIA's driver parses back.
        parsed = NVIDIA_MIG_NAME.match(d["name"])
        assert parsed is not None and parsed.groups() == (
            str(d["minor"]), d["profile"].replace(".", "").replace("+", "-"),
            str(m["profile_id"]), str(m["placement_start"]))
        assert d["uuid"].startswith("MIG-") and m["multiprocessors"] > 0
    # The profiles' real ids and sizes: 3g.20gb is id 9 over 4 memory slices at 0.
    three = next(d for d in migs if d["profile"] == "3g.20gb")
    assert (three["mig"]["profile_id"], three["mig"]["placement_start"],
            three["mig"]["placement_size"]) == (9, 0, 4)
    assert by_name["gpu-2"]["mig"] is None and got["lost"] == []
    assert "gpu-0-mig-3g20gb-9-0" in by_name


def test_addressing_mode_is_what_nvml_answers_for_gpus_and_their_mig_devices(
        tmp_path: Path) -> None:
    _path, environ = _fake_node(tmp_path, "mixed.yaml", "a100-0")
    got = _discover(environ)
    names = {0: "None", 1: "HMM", 2: "ATS"}
    assert got["devices"]
    for d in got["devices"]:
        nvml = got["addressing"][d["parent_uuid"] or d["uuid"]]
        # NOT_SUPPORTED (or any error) -> left out, as go-nvlib leaves it out.
        assert d["addressing_mode"] == names.get(nvml, ""), d["name"]


def test_an_nvswitch_node_has_no_clique(tmp_path: Path) -> None:
    """NVSwitch systems report a completed fabric with an all-zero cluster UUID (issue 15):
    no clique, no fabric attribute; a multi-node fabric keeps its clique."""
    _path, environ = _fake_node(tmp_path, "dgx-h100.yaml", "dgx-h100-0")
    assert {(d["clique_id"], d["fabric"]) for d in _discover(environ)["devices"]} == {("", "")}
    _path, environ = _fake_node(tmp_path, "gb200-mini.yaml", "gb200-0")
    assert all(d["clique_id"].endswith(".1") and d["fabric"]
               for d in _discover(environ)["devices"])


GB200_MIG = """
name: gb200-mig
driver: {version: "580.95.05", cuda_version: "13.0"}
nodes:
  - name: tray-0
    gpus:
      - product: GB200
        mig:
          enabled: true
          instances: [{profile: 1g.23gb, placement: 0}, {profile: 1g.23gb+me, placement: 1},
                      {profile: 2g.47gb, placement: 2}]
      - {product: GB200}
"""


@pytest.mark.parametrize("nvidia", [False, True])
def test_gb200_mig_profiles_are_the_production_ones(tmp_path: Path, nvidia: bool) -> None:
    (tmp_path / "gb200.yaml").write_text(GB200_MIG)
    _path, environ = _fake_node(tmp_path, tmp_path / "gb200.yaml", "tray-0")
    got = _discover(environ, nvidia)
    migs = {d["name"]: (d["profile"], d["memory_bytes"] >> 20) for d in got["devices"]
            if d["type"] == "mig"}
    assert migs == {"gpu-0-mig-1g23gb-19-0": ("1g.23gb", 22528),
                    "gpu-0-mig-1g23gb-me-20-1": ("1g.23gb+me", 22528),
                    "gpu-0-mig-2g47gb-14-2": ("2g.47gb", 46592)}
    # GB200 is a Grace part: coherent, ATS.
    assert {d["addressing_mode"] for d in got["devices"]} == {"ATS"}


_SPLIT_GI = """
import pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
gi = n.nvmlDeviceGetGpuInstanceById(h, n.nvmlDeviceGetGpuInstanceId(
    n.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)))
info = n.nvmlGpuInstanceGetInfo(gi)
for ci in range(8):
    try:
        n.nvmlComputeInstanceDestroy(n.nvmlGpuInstanceGetComputeInstanceById(gi, ci))
    except n.NVMLError:
        pass
one = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(
    gi, n.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
n.nvmlGpuInstanceCreateComputeInstance(gi, one.id)
n.nvmlGpuInstanceCreateComputeInstance(gi, one.id)
print(info.id)
n.nvmlShutdown()
"""


def test_a_gpu_instance_split_in_two_compute_instances(tmp_path: Path) -> None:
    """fakegpu publishes both compute instances (names kept unique); NVIDIA's driver cannot
    enumerate such a GPU, so its compatible mode publishes neither (and the rest as usual)."""
    _path, environ = _fake_node(tmp_path, "mixed.yaml", "a100-0")
    before = _discover(environ, nvidia=True)
    _run(environ, _SPLIT_GI)
    own = _discover(environ)
    split = sorted(d["name"] for d in own["devices"] if d["mig"] and d["mig"]["shared_gi"])
    assert len(split) == 2 and all(n.startswith("gpu-0-mig-3g20gb-9-0-ci") for n in split)
    nvidia = _discover(environ, nvidia=True)
    names = {d["name"] for d in nvidia["devices"]}
    assert names == {d["name"] for d in before["devices"]} - {"gpu-0-mig-3g20gb-9-0"}


def test_a_lost_gpu_is_reported_not_fatal(tmp_path: Path) -> None:
    from fakegpu.nvml import faults

    path, environ = _fake_node(tmp_path, "dgx-h100.yaml", "dgx-h100-0")
    faults.inject(path, 3, "gpu-lost")
    got = _discover(environ)
    assert got["lost"] == [3]
    assert len(got["devices"]) == 7 and all(d["index"] != 3 for d in got["devices"])


def test_carry_lost_keeps_last_known_devices_marked() -> None:
    from fakegpu.plugin.discovery import Inventory, carry_lost

    from .helpers import gpu

    before = Inventory("580.1", "13.0", tuple(replace(gpu(i), index=i) for i in range(3)))
    after = Inventory("580.1", "13.0", (before.devices[0], before.devices[2]), lost_indices=(1,))
    merged = carry_lost(before, after)
    assert [(d.name, d.lost) for d in merged.devices] == [
        ("gpu-0", False), ("gpu-1", True), ("gpu-2", False)]
    assert carry_lost(None, after) == after  # an instance started after the loss


@pytest.mark.parametrize("nvidia", [False, True])
def test_gpus_publish_the_root_and_numa_node_their_fake_host_shows(tmp_path: Path,
                                                                   nvidia: bool) -> None:
    """Through the fake library and the node's sysfs view, in both driver modes: each GPU
    (and each MIG device, its GPU's) gets the topology's root complex and NUMA node."""
    from fakegpu.topology.load import load_topology

    node = load_topology(FIXTURES / "mixed.yaml").node("a100-0")
    assert node.pcie is not None
    _path, environ = _fake_node(tmp_path, "mixed.yaml", "a100-0")
    devices = _discover(environ, nvidia)["devices"]
    assert {d["minor"] for d in devices} == {0, 2, 3}  # GPU 1: MIG on, no instances
    for d in devices:
        root = node.pcie.gpu_root(d["minor"])
        assert root is not None
        assert (d["pcie_root"], d["numa_node"]) == (root.name, root.numa_node), d["name"]
    whole = {d["minor"]: d["pcie_root"] for d in devices if d["type"] == "gpu"}
    assert whole[2] == whole[3] == "pci0000:40"


def test_without_the_view_nothing_is_invented(tmp_path: Path) -> None:
    _path, environ = _fake_node(tmp_path, "mixed.yaml", "a100-0")
    environ.pop("FAKEGPU_SYSFS")
    devices = _discover(environ)["devices"]
    assert {(d["pcie_root"], d["numa_node"]) for d in devices} == {("", None)}
