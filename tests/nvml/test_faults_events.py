"""Fault injection from Python reaches pynvml users on the node: events, lost GPUs, links."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fakegpu.errors import InvalidInput
from fakegpu.nvml import env, faults

from .conftest import py_json, render_node, topology

pytestmark = pytest.mark.integration

WAITER = """
import json, sys
import pynvml as n
n.nvmlInit()
import ctypes
es = n.nvmlEventSetCreate()
index_of = {}
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    index_of[ctypes.cast(h, ctypes.c_void_p).value] = i
    types = n.nvmlEventTypeXidCriticalError | n.nvmlEventTypeDoubleBitEccError
    n.nvmlDeviceRegisterEvents(h, types, es)
print("ready", flush=True)
got = []
for _ in range(int(sys.argv[1])):
    d = n.nvmlEventSetWait_v2(es, 20000)   # generous: delivery, not speed, is asserted
    got.append([index_of[ctypes.cast(d.device, ctypes.c_void_p).value], d.eventType, d.eventData])
try:
    n.nvmlEventSetWait_v2(es, 50)
    timeout = 0
except n.NVMLError_Timeout:
    timeout = 1
n.nvmlEventSetFree(es)
print(json.dumps({"events": got, "timeout": timeout}))
"""


def _waiter(path: Path, count: int) -> subprocess.Popen[str]:
    environ = dict(os.environ, LD_LIBRARY_PATH=str(env.libdir()), FAKEGPU_NVML_STATE=str(path))
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WAITER), str(count)],
                            env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_injected_events_reach_a_waiting_process(tmp_path: Path) -> None:
    topo = topology("dgx-h100")
    path = render_node(tmp_path, topo, topo.nodes[0].name)
    proc = _waiter(path, 3)
    faults.inject(path, 3, "xid", 48)
    faults.inject(path, 5, "ecc-dbe")
    faults.inject(path, 6, "gpu-lost")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    got = json.loads(out.strip().splitlines()[-1])
    xid, dbe = 0x8, 0x2  # nvmlEventTypeXidCriticalError, nvmlEventTypeDoubleBitEccError
    assert got["events"][0] == [3, xid, 48]
    assert got["events"][1] == [5, dbe, 0]
    assert got["events"][2][1:] == [xid, 79]  # gpu-lost announces itself as XID 79
    assert got["timeout"] == 1


STATUS = """
import json, pynvml as n
n.nvmlInit()
out = {}
for i in range(n.nvmlDeviceGetCount()):
    try:
        h = n.nvmlDeviceGetHandleByIndex(i)
        out[i] = [n.nvmlDeviceGetName(h),
                  n.nvmlDeviceGetTotalEccErrors(h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                n.NVML_VOLATILE_ECC),
                  n.nvmlDeviceGetNvLinkState(h, 2)]
    except n.NVMLError as err:
        out[i] = err.value
print(json.dumps(out))
"""


def test_gpu_lost_and_cleared(tmp_path: Path) -> None:
    topo = topology("dgx-h100")
    node = topo.nodes[0]
    path = render_node(tmp_path, topo, node.name)
    faults.inject(path, 2, "gpu-lost")
    faults.inject(path, 4, "ecc-dbe")
    faults.inject(path, 4, "ecc-dbe")
    faults.inject(path, 5, "nvlink-down", 2)
    seen = py_json(path, STATUS)
    assert seen["2"] == 15  # NVML_ERROR_GPU_IS_LOST
    for gpu in node.gpus:
        if gpu.index != 2:
            name, ecc, link = seen[str(gpu.index)]
            assert name == gpu.product.name
            assert ecc == (2 if gpu.index == 4 else 0)
            assert link == (0 if gpu.index == 5 else 1)
    faults.clear(path, 2)
    faults.clear(path, 5, "nvlink-down", 2)
    seen = py_json(path, STATUS)
    assert seen["2"][0] == node.gpus[2].product.name
    assert seen["5"][2] == 1


def test_fabric_degraded(tmp_path: Path) -> None:
    topo = topology("gb200-mini")
    path = render_node(tmp_path, topo, topo.nodes[1].name)
    faults.inject(path, 1, "fabric-degraded")
    code = """
import json, pynvml as n
n.nvmlInit()
out = []
for i in range(n.nvmlDeviceGetCount()):
    f = n.c_nvmlGpuFabricInfo_v3_t()
    n.nvmlDeviceGetGpuFabricInfoV(n.nvmlDeviceGetHandleByIndex(i), n.byref(f))
    out.append([f.healthMask & 3, f.healthSummary])
print(json.dumps(out))
"""
    got = py_json(path, code)
    # degraded bandwidth TRUE (1) + LIMITED_CAPACITY (3) on GPU 1 only; FALSE (2) + HEALTHY (1)
    assert got == [[2, 1], [1, 3], [2, 1], [2, 1]]


def test_bad_fault_requests(tmp_path: Path) -> None:
    topo = topology("dgx-h100")
    path = render_node(tmp_path, topo, topo.nodes[0].name)
    with pytest.raises(InvalidInput):
        faults.inject(path, 0, "meltdown")
    with pytest.raises(InvalidInput):
        faults.inject(path, 0, "xid")
    # Out-of-range arguments are bad input (exit 2), refused before the library is called.
    with pytest.raises(InvalidInput, match="GPU index 8 is out of range"):
        faults.inject(path, 8, "xid", 13)  # only GPUs 0-7
    with pytest.raises(InvalidInput, match="link 18 is out of range"):
        faults.inject(path, 0, "nvlink-down", 18)  # links 0-17
    a100 = topology("dgx-a100")
    a100_path = render_node(tmp_path, a100, a100.nodes[0].name)
    with pytest.raises(faults.FaultError):
        faults.inject(a100_path, 0, "fabric-degraded")  # Ampere: no GPU fabric
    with pytest.raises(faults.FaultError):
        faults.inject(tmp_path / "missing.state", 0, "xid", 13)


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    """Several processes inject at once: every event lands, in the ring and in the counters."""
    topo = topology("dgx-h100")
    path = render_node(tmp_path, topo, topo.nodes[0].name)
    code = f"""
from fakegpu.nvml import faults
for _ in range(25):
    faults.inject({str(path)!r}, 4, "ecc-dbe")
"""
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(4)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    seen = py_json(path, STATUS)
    assert seen["4"][1] == 100
