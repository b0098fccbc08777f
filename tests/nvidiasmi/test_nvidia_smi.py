"""fakegpu's nvidia-smi against the fake NVML library: what it prints is what pynvml reads."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fakegpu.nvidiasmi import path as smi_path
from fakegpu.nvml.env import ensure_state, env
from fakegpu.testkit.gpus import read_node_gpus
from fakegpu.topology.load import load_topology
from fakegpu.topology.packaged import FIXTURES

pytestmark = pytest.mark.integration


def _state(tmp_path: Path, fixture: str, node: str) -> Path:
    topology = load_topology(FIXTURES / fixture)
    return ensure_state(topology, node, tmp_path / f"{node}.state")


def _smi(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(smi_path()), *args], env={**os.environ, **env(state)},
                          capture_output=True, text=True, timeout=60, check=False)


def test_list_prints_every_gpu_nvml_reports(tmp_path: Path) -> None:
    state = _state(tmp_path, "dgx-h100.yaml", "dgx-h100-0")
    out = _smi(state, "-L")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"GPU {g.index}: {g.name} (UUID: {g.uuid})"
                                       for g in read_node_gpus(state)]


def test_query_gpu_csv(tmp_path: Path) -> None:
    state = _state(tmp_path, "dgx-h100.yaml", "dgx-h100-0")
    out = _smi(state, "--query-gpu=index,uuid,pci.bus_id", "--format=csv,noheader")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"{g.index}, {g.uuid}, {g.pci_bus_id}"
                                       for g in read_node_gpus(state)]
    with_header = _smi(state, "--query-gpu=name,memory.total", "--format=csv")
    assert with_header.stdout.splitlines()[0] == "name, memory.total [MiB]"
    assert with_header.stdout.splitlines()[1].endswith(" MiB")
    bad = _smi(state, "--query-gpu=index,warp.speed", "--format=csv")
    assert bad.returncode == 2 and "warp.speed" in bad.stderr


def test_topo_shows_nvswitch_links_between_every_pair(tmp_path: Path) -> None:
    # DGX H100: 18 NVLinks per GPU, all through NVSwitches.
    state = _state(tmp_path, "dgx-h100.yaml", "dgx-h100-0")
    out = _smi(state, "topo", "-m")
    assert out.returncode == 0, out.stderr
    rows = [line.split("\t") for line in out.stdout.splitlines() if line.startswith("GPU")]
    assert len(rows) == 8
    for i, row in enumerate(rows):
        cells = [c.strip() for c in row[1:9]]
        assert cells[i] == "X" and {c for j, c in enumerate(cells) if j != i} == {"NV18"}


def test_mig_devices_and_instances(tmp_path: Path) -> None:
    topology = load_topology(FIXTURES / "partitioning.yaml")
    node = next(n for n in topology.nodes if any(g.mig.enabled for g in n.gpus))
    state = ensure_state(topology, node.name, tmp_path / "mig.state")
    listed = _smi(state, "-L").stdout.splitlines()
    migs = [line for line in listed if line.startswith("  MIG ")]
    gis = [line for line in _smi(state, "mig", "-lgi").stdout.splitlines()
           if line.startswith("|  ") and "MIG" in line]
    assert migs and len(gis) == len(migs)  # one compute instance per GPU instance here
    # NVML's profile name ("MIG 1g.10gb"), not one computed from the memory size
    names = {f"MIG {p.name}" for g in node.gpus if g.mig.enabled
             for p in g.product.mig.profiles}  # type: ignore[union-attr]
    assert all(line.split()[2] + " " + line.split()[3] in names for line in gis), gis
    assert all("(UUID: MIG-" in line for line in migs)


def test_without_a_node_state_it_says_the_driver_is_not_there(tmp_path: Path) -> None:
    # As NVIDIA's exits 9 on a host without the driver loaded.
    from fakegpu.nvml.env import libdir

    bare = {k: v for k, v in os.environ.items() if k != "FAKEGPU_NVML_STATE"}
    out = subprocess.run([str(smi_path()), "-L"], capture_output=True, text=True, timeout=60,
                         check=False, env={**bare, "LD_LIBRARY_PATH": str(libdir())})
    assert out.returncode == 9 and out.stdout == ""
    assert "couldn't communicate with the NVIDIA driver" in out.stderr


# --- the summary (nvidia-smi without arguments) and -i ----------------------------------------

# What NVML says of each GPU, read with pynvml in a subprocess (the library loads once per
# process): the summary must print exactly these figures.
_NVML_FIGURES = r"""
import json, pynvml as n
n.nvmlInit()
def opt(fn, *a):
    try:
        return fn(*a)
    except n.NVMLError:
        return None
out = {"driver": n.nvmlSystemGetDriverVersion(), "cuda": n.nvmlSystemGetCudaDriverVersion(),
       "gpus": []}
for i in range(n.nvmlDeviceGetCount()):
    h = opt(n.nvmlDeviceGetHandleByIndex, i)
    if h is None:
        continue
    mem = n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)  # "used" without the reservation
    migs = []
    if (opt(n.nvmlDeviceGetMigMode, h) or [0])[0]:
        for k in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
            m = opt(n.nvmlDeviceGetMigDeviceHandleByIndex, h, k)
            if m is not None:
                migs.append([n.nvmlDeviceGetGpuInstanceId(m), n.nvmlDeviceGetComputeInstanceId(m),
                             n.nvmlDeviceGetMemoryInfo(m).used >> 20,
                             n.nvmlDeviceGetMemoryInfo(m).total >> 20,
                             n.nvmlDeviceGetAttributes(m).multiprocessorCount])
    out["gpus"].append({
        "index": i, "name": n.nvmlDeviceGetName(h), "bus": n.nvmlDeviceGetPciInfo(h).busId,
        "serial": n.nvmlDeviceGetSerial(h), "uuid": n.nvmlDeviceGetUUID(h),
        "persistence": n.nvmlDeviceGetPersistenceMode(h),
        "ecc": n.nvmlDeviceGetTotalEccErrors(h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                             n.NVML_VOLATILE_ECC),
        "temp": n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
        "perf": n.nvmlDeviceGetPerformanceState(h),
        "power": n.nvmlDeviceGetPowerUsage(h) // 1000,
        "cap": n.nvmlDeviceGetEnforcedPowerLimit(h) // 1000,
        "used": mem.used >> 20, "total": mem.total >> 20,
        "util": n.nvmlDeviceGetUtilizationRates(h).gpu,
        "mig": (opt(n.nvmlDeviceGetMigMode, h) or [None])[0], "migs": migs,
        "processes": len(n.nvmlDeviceGetComputeRunningProcesses(h)),
    })
print(json.dumps(out))
n.nvmlShutdown()
"""

_GPU_LINE1 = re.compile(r"\|\s+(\d+)  (.+?)\s+(On|Off)  \|\s+(\S+) (On|Off) \|\s+(\S+) \|")
_GPU_LINE2 = re.compile(r"\| (\S+)\s+(\d+)C\s+P(\d+)\s+(\d+)W /\s+(\d+)W \|\s+(\d+)MiB /\s+(\d+)MiB"
                        r" \|\s+(\d+)%\s+(\S+) \|")
_GPU_LINE3 = re.compile(r"\|\s+\|\s+\|\s+(Enabled|Disabled) \|")
_MIG_LINE = re.compile(r"\|\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)  \|\s+(\d+)MiB / (\d+)MiB\s+\|\s*(\d+)"
                       r"\s+\d+ \|[ \d]+\|")


def _figures(state: Path) -> dict[str, Any]:
    from fakegpu.testkit.gpus import nvml_env

    out = subprocess.run([sys.executable, "-c", _NVML_FIGURES], env=nvml_env(state),
                         capture_output=True, text=True, timeout=60, check=True)
    figures: dict[str, Any] = json.loads(out.stdout)
    return figures


def _blocks(stdout: str) -> list[tuple[re.Match[str], re.Match[str], re.Match[str]]]:
    lines = stdout.splitlines()
    blocks = []
    for k, line in enumerate(lines):
        first = _GPU_LINE1.fullmatch(line)
        if first:
            second = _GPU_LINE2.fullmatch(lines[k + 1])
            third = _GPU_LINE3.fullmatch(lines[k + 2])
            assert second and third, lines[k:k + 3]
            blocks.append((first, second, third))
    return blocks


def _check_summary(stdout: str, nvml: dict[str, Any]) -> None:
    lines = stdout.splitlines()
    # As NVIDIA's: the date, then a 91-column table (blank lines between its boxes).
    assert re.fullmatch(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4} *", lines[0]), lines[0]
    assert {len(line) for line in lines[1:] if line} == {91}
    cuda = f"{nvml['cuda'] // 1000}.{nvml['cuda'] % 1000 // 10}"
    assert re.fullmatch(rf"\| NVIDIA-SMI {re.escape(nvml['driver'])} +Driver Version: "
                        rf"{re.escape(nvml['driver'])} +CUDA Version: {re.escape(cuda)} +\|",
                        lines[2]), lines[2]
    blocks = _blocks(stdout)
    assert len(blocks) == len(nvml["gpus"])
    for (first, second, third), gpu in zip(blocks, nvml["gpus"], strict=True):
        assert int(first[1]) == gpu["index"] and first[2] == gpu["name"]
        assert first[3] == ("On" if gpu["persistence"] else "Off")
        assert first[4] == gpu["bus"] and int(first[6]) == gpu["ecc"]
        assert (int(second[2]), int(second[3])) == (gpu["temp"], gpu["perf"])
        assert (int(second[4]), int(second[5])) == (gpu["power"], gpu["cap"])
        assert (int(second[6]), int(second[7])) == (gpu["used"], gpu["total"])
        assert int(second[8]) == gpu["util"]
        assert third[1] == ("Enabled" if gpu["mig"] else "Disabled")
    migs = [tuple(int(x) for x in m.groups()) for m in map(_MIG_LINE.fullmatch, lines) if m]
    assert migs == [(gpu["index"], gi, ci, k, used, total, sm) for gpu in nvml["gpus"]
                    for k, (gi, ci, used, total, sm) in enumerate(gpu["migs"])]
    assert ("| MIG devices:" in stdout) == bool(migs)
    assert not any(gpu["processes"] for gpu in nvml["gpus"])
    assert "|  No running processes found" in stdout


def test_summary_prints_what_nvml_reports(tmp_path: Path) -> None:
    state = _state(tmp_path, "dgx-h100.yaml", "dgx-h100-0")
    out = _smi(state)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    _check_summary(out.stdout, _figures(state))


def test_summary_follows_the_state(tmp_path: Path) -> None:
    # A double-bit ECC error injected into GPU 3 shows in its Volatile Uncorr. ECC cell.
    from fakegpu.nvml import faults

    state = _state(tmp_path, "hgx-h200.yaml", "hgx-h200-0")
    faults.inject(state, 3, "ecc-dbe")
    nvml = _figures(state)
    assert nvml["gpus"][3]["ecc"] > 0
    out = _smi(state)
    assert out.returncode == 0, out.stderr
    _check_summary(out.stdout, nvml)
    cells = [int(first[6]) for first, _, _ in _blocks(out.stdout)]
    assert cells == [g["ecc"] for g in nvml["gpus"]]


def test_summary_shows_mig_devices(tmp_path: Path) -> None:
    state = _state(tmp_path, "partitioning.yaml", "a100-mig")
    nvml = _figures(state)
    assert any(gpu["migs"] for gpu in nvml["gpus"])
    out = _smi(state)
    assert out.returncode == 0, out.stderr
    _check_summary(out.stdout, nvml)


def _lost_line(state: Path, index: int) -> str:
    topology = load_topology(FIXTURES / "hgx-h200.yaml")
    bus = topology.nodes[0].gpus[index].pci.bus_id_legacy
    return (f"Unable to determine the device handle for GPU{index}: {bus}: GPU is lost.  "
            "Reboot the system to recover this GPU")


def test_a_lost_gpu_is_named_and_the_others_listed(tmp_path: Path) -> None:
    from fakegpu.nvml import faults

    state = _state(tmp_path, "hgx-h200.yaml", "hgx-h200-0")
    healthy = read_node_gpus(state)
    faults.inject(state, 1, "gpu-lost")
    listed = _smi(state, "-L")
    # NVIDIA's exit code 15: a GPU has fallen off the bus or become inaccessible.
    assert listed.returncode == 15
    assert listed.stderr.splitlines() == [_lost_line(state, 1)]
    assert listed.stdout.splitlines() == [f"GPU {g.index}: {g.name} (UUID: {g.uuid})"
                                          for g in healthy if g.index != 1]
    summary = _smi(state)
    assert summary.returncode == 15 and summary.stderr.splitlines() == [_lost_line(state, 1)]
    nvml = _figures(state)
    assert [g["index"] for g in nvml["gpus"]] == [0, 2, 3, 4, 5, 6, 7]
    _check_summary(summary.stdout, nvml)
    alone = _smi(state, "-L", "-i", "1")
    assert alone.returncode == 15 and alone.stdout == ""
    assert alone.stderr.splitlines() == [_lost_line(state, 1)]
    others = _smi(state, "-L", "-i", "0,2")
    assert others.returncode == 0 and others.stderr == ""
    assert len(others.stdout.splitlines()) == 2


def test_id_takes_an_index_uuid_bus_id_or_serial(tmp_path: Path) -> None:
    state = _state(tmp_path, "dgx-h100.yaml", "dgx-h100-0")
    gpus = {g["index"]: g for g in _figures(state)["gpus"]}
    short_bus = gpus[5]["bus"].split(":", 1)[1]  # "18:00.0" names 00000000:18:00.0 too
    for ids, expect in [("3", [3]), (gpus[6]["uuid"], [6]), (gpus[2]["bus"], [2]),
                        (short_bus, [5]), (f"0000:{short_bus}", [5]), (gpus[4]["serial"], [4]),
                        (f"7,{gpus[0]['uuid']}", [0, 7])]:
        out = _smi(state, "-L", "-i", ids)
        assert out.returncode == 0, (ids, out.stderr)
        assert [int(line.split()[1].rstrip(":")) for line in out.stdout.splitlines()] == expect
    one = _smi(state, "--id=3")
    assert one.returncode == 0 and [int(b[0][1]) for b in _blocks(one.stdout)] == [3]
    for unknown in ["8", "GPU-00000000-0000-0000-0000-000000000000", "ff:00.0", "x"]:
        out = _smi(state, "-L", "-i", unknown)
        # NVIDIA's 6: the query found no such object.
        assert out.returncode == 6 and out.stdout == "" and unknown in out.stderr


# What nvidia-smi printed on a real H200 SXM (one GPU in a VM, driver 580.159.04, 2026-12-04).
REAL = Path(__file__).parent / "data"


def _gpu0(tmp_path: Path, *args: str) -> list[str]:
    state = _state(tmp_path, "hgx-h200.yaml", "hgx-h200-0")
    out = _smi(state, *args)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_mig_profiles_as_a_real_h200_prints_them(tmp_path: Path) -> None:
    """mig -lgip / -lgipp of GPU 0 are line for line the real ones ("MIG 1g.18gb" names, the
    real memory sizes, NVIDIA's order)."""
    real_lgip = (REAL / "smi-lgip.txt").read_text().splitlines()
    assert _gpu0(tmp_path, "mig", "-lgip")[:len(real_lgip)] == real_lgip
    real_lgipp = (REAL / "smi-lgipp.txt").read_text().splitlines()
    assert _gpu0(tmp_path, "mig", "-lgipp")[:len(real_lgipp)] == real_lgipp


def test_version_and_summary_header_as_a_real_h200_prints_them(tmp_path: Path) -> None:
    assert _gpu0(tmp_path, "--version") == (REAL / "smi-version.txt").read_text().splitlines()
    real = (REAL / "smi-summary.txt").read_text().splitlines()
    fake = _gpu0(tmp_path, "-i", "0")
    assert fake[1:8] == real[1:8]  # the box, versions, the "+" rule and column titles
    # GPU 0: persistence On, 0MiB used (v2: the reservation left out); bus id, temperature and
    # power differ (a VM slot, a live GPU)
    assert fake[8].split("|")[1] == real[8].split("|")[1]
    assert fake[9].split("|")[2] == real[9].split("|")[2]


def test_query_csv_as_a_real_h200_prints_it(tmp_path: Path) -> None:
    real = (REAL / "smi-query-csv.txt").read_text().splitlines()
    fake = _gpu0(tmp_path, "-i", "0", "--query-gpu=index,name,pci.bus_id,memory.total,"
                 "mig.mode.current,compute_mode", "--format=csv")
    bus = re.compile(r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-9]")
    assert [bus.sub("BUS", line) for line in fake] == [bus.sub("BUS", line) for line in real]


def test_compute_mode_as_nvidias_plugin_sets_it(tmp_path: Path) -> None:
    """`nvidia-smi -i UUID -c EXCLUSIVE_PROCESS` (NVIDIA's DRA plugin, MPS sharing) and back:
    kept in the node's state, so NVML in any process reads the mode; NVIDIA's lines (the
    "already set" one read on a real H200)."""
    state = _state(tmp_path, "dgx-h100.yaml", "dgx-h100-0")
    gpus = read_node_gpus(state)
    target = gpus[1]
    out = _smi(state, "-i", target.uuid, "-c", "EXCLUSIVE_PROCESS")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"Set compute mode to EXCLUSIVE_PROCESS for GPU {target.pci_bus_id}.", "All done."]
    modes = _smi(state, "--query-gpu=index,compute_mode", "--format=csv,noheader")
    assert modes.stdout.splitlines() == [
        f"{g.index}, {'Exclusive_Process' if g.index == target.index else 'Default'}"
        for g in gpus]
    again = _smi(state, "-i", str(target.index), "-c", "3")
    assert again.stdout.splitlines()[0] == (
        f"Compute mode is already set to EXCLUSIVE_PROCESS for GPU {target.pci_bus_id}.")
    code = (f"import pynvml as n; n.nvmlInit(); "
            f"print(n.nvmlDeviceGetComputeMode(n.nvmlDeviceGetHandleByIndex({target.index})))")
    seen = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env(state)},
                          capture_output=True, text=True, timeout=60, check=True)
    assert seen.stdout.strip() == "3"  # NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    assert _smi(state, "-i", target.uuid, "-c", "DEFAULT").returncode == 0
    bad = _smi(state, "-c", "SOMETIMES")
    assert bad.returncode == 2 and "SOMETIMES" in bad.stderr


def test_compute_policy_timeslice(tmp_path: Path) -> None:
    """`nvidia-smi compute-policy -i UUID --set-timeslice N` (NVIDIA's time-slicing sharing):
    set per GPU, listed with -l, refused outside 0-3."""
    state = _state(tmp_path, "dgx-h100.yaml", "dgx-h100-0")
    gpus = read_node_gpus(state)
    out = _smi(state, "compute-policy", "-i", gpus[2].uuid, "--set-timeslice", "2")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"Set timeslice to MEDIUM for GPU {gpus[2].pci_bus_id}.", "All done."]
    listed = _smi(state, "compute-policy", "-l")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines() if "Timeslice" in line]
    assert rows == [["|", str(g.index), "Timeslice", "Medium" if g.index == 2 else "Default", "|"]
                    for g in gpus]
    bad = _smi(state, "compute-policy", "--set-timeslice", "7")
    assert bad.returncode == 2 and "7" in bad.stderr
    assert _smi(state, "compute-policy").returncode == 2  # neither --set-timeslice nor -l


def test_compute_policy_list_as_a_real_h200_prints_it(tmp_path: Path) -> None:
    real = (REAL / "smi-compute-policy-l.txt").read_text().splitlines()
    assert _gpu0(tmp_path, "compute-policy", "-i", "0", "-l") == real


# -q values that differ from the real H200's reading for a reason other than a fake's defect.
Q_DIFFERENT = {
    "Timestamp", "Attached GPUs",  # the moment; a 1-GPU VM against the 8-GPU fixture
    "GPU", "Bus", "Device", "Bus Id",  # the VM's PCI slot
    "Serial Number", "GPU UUID", "Board Part Number", "VBIOS Version",  # this board, not the part
    "Module Id", "Virtualization Mode",  # VM artifacts (Firecracker pass-through)
    "Tx Throughput", "Rx Throughput", "Average Power Draw", "Instantaneous Power Draw",
    "GPU Current Temp",  # live readings
    "GPU PDI", "Board ID", "GPU Part Number", "Image Version", "OEM Object", "ECC Object",
    "GPU T.Limit Temp", "GPU Shutdown T.Limit Temp", "GPU Slowdown T.Limit Temp",
    "GPU Max Operating T.Limit Temp", "Memory Current Temp", "Memory Max Operating T.Limit Temp",
    # no NVML call of the fake backs these: N/A, as a GPU without the reading prints
    "Min Power Limit",  # the fake derives it (a quarter of the limit): 175 W, real 200 W
    "Video",  # the fake derives video clocks from the SM clock
    "State", "Status", "CliqueId", "ClusterUUID",  # hgx-h200 has NVSwitches, the VM's GPU none
}


def _q_lines(lines: list[str]) -> list[tuple[str, str | None]]:
    """Each line of -q as (key with its indentation, value or None for a section title)."""
    out: list[tuple[str, str | None]] = []
    for line in lines:
        key, sep, value = line.partition(" : ")
        if line.startswith("GPU 0000"):
            key, value = "GPU", line[4:]
        elif not sep:
            value = None
        out.append((key.rstrip() if sep else key, value))
    return out


def test_full_query_as_a_real_h200_prints_it(tmp_path: Path) -> None:
    """`nvidia-smi -q`: the real H200's 257 lines, each key at its depth in the real order, and
    the value wherever the fake models it (the differing keys above say why)."""
    real = _q_lines((REAL / "smi-q.txt").read_text().splitlines())
    fake = _q_lines(_gpu0(tmp_path, "-i", "0", "-q"))
    assert [k for k, _ in fake] == [k for k, _ in real]
    differ = [(k, r, f) for (k, r), (_, f) in zip(real, fake, strict=True)
              if r != f and k.strip() not in Q_DIFFERENT]
    assert differ == []
