"""An nvidia-smi-like view of one node, read through NVML (pynvml on our library), never
from the topology file: what it shows is what any NVML client on the node sees.

``read`` gathers the view as plain data (``fakegpu smi -o json`` prints it as is);
``fakegpu.nvml.smitable`` renders it as the summary table."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fakegpu.errors import FakegpuError, MissingPrerequisite

from . import env

MATRIX_LIMIT = 16
LEVELS = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
COMPUTE_MODES = {0: "Default", 1: "E. Thread", 2: "Prohibited", 3: "E. Process"}
MIB = 1024 * 1024


@contextmanager
def nvml_session(state_path: Path) -> Iterator[Any]:
    """pynvml initialised on our library for ``state_path`` (in this process)."""
    os.environ[env.STATE_ENV] = str(state_path)
    # Loading ours first by path makes pynvml's dlopen("libnvidia-ml.so.1") find it by soname.
    ctypes.CDLL(str(env.library_path()), mode=ctypes.RTLD_GLOBAL)
    try:
        import pynvml
    except ImportError:
        raise MissingPrerequisite("pynvml (nvidia-ml-py) is not installed") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        raise FakegpuError(f"nvmlInit failed for {state_path}: {err}") from None
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def _try(fn: Any, *args: Any, default: Any = None) -> Any:
    import pynvml

    try:
        return fn(*args)
    except pynvml.NVMLError:
        return default


def _links(n: Any, h: Any) -> list[tuple[int, bool, str, int]]:
    out = []
    for link in range(n.NVML_NVLINK_MAX_LINKS):
        state = _try(n.nvmlDeviceGetNvLinkState, h, link)
        if state is None:
            continue
        remote = n.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId
        kind = n.nvmlDeviceGetNvLinkRemoteDeviceType(h, link)
        out.append((link, bool(state), remote, kind))
    return out


def read(state_path: Path) -> dict[str, Any]:
    """The node's GPUs, MIG devices, NVLinks and processes as NVML reports them; a value NVML
    does not answer is None, a GPU whose handle it refuses is listed under ``lost``."""
    with nvml_session(state_path) as n:
        count = n.nvmlDeviceGetCount()
        view: dict[str, Any] = {
            "state": str(state_path), "driver_version": n.nvmlSystemGetDriverVersion(),
            "cuda_version": _cuda(n.nvmlSystemGetCudaDriverVersion_v2()), "count": count,
            "gpus": [], "lost": [], "mig_devices": [], "nvlink": None, "processes": [],
        }
        handles: dict[int, Any] = {}
        for i in range(count):
            try:
                handles[i] = n.nvmlDeviceGetHandleByIndex(i)
            except n.NVMLError as err:
                view["lost"].append({"index": i, "error": str(err)})
        for i, h in handles.items():
            view["gpus"].append(_gpu(n, i, h))
            view["mig_devices"].extend(_mig_devices(n, i, h))
            view["processes"].extend(
                {"gpu": i, "pid": p.pid, "used_memory_mib": (p.usedGpuMemory or 0) // MIB}
                for p in _try(n.nvmlDeviceGetComputeRunningProcesses, h, default=[]))
        view["nvlink"] = _nvlink(n, handles)
    return view


def _cuda(version: int) -> str:
    return f"{version // 1000}.{version % 1000 // 10}"


def _gpu(n: Any, i: int, h: Any) -> dict[str, Any]:
    mem = _try(n.nvmlDeviceGetMemoryInfo, h)
    mig = _try(n.nvmlDeviceGetMigMode, h)
    power = _try(n.nvmlDeviceGetPowerUsage, h)
    cap = _try(n.nvmlDeviceGetEnforcedPowerLimit, h)
    ecc = None
    if (_try(n.nvmlDeviceGetEccMode, h) or [0])[0]:
        ecc = _try(n.nvmlDeviceGetTotalEccErrors, h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                   n.NVML_VOLATILE_ECC)
    util = _try(n.nvmlDeviceGetUtilizationRates, h)
    mode = _try(n.nvmlDeviceGetComputeMode, h)
    pstate = _try(n.nvmlDeviceGetPerformanceState, h)
    return {
        "index": i, "name": n.nvmlDeviceGetName(h), "uuid": n.nvmlDeviceGetUUID(h),
        "bus_id": n.nvmlDeviceGetPciInfo(h).busId,
        "persistence_mode": _on_off(_try(n.nvmlDeviceGetPersistenceMode, h)),
        "display_active": _on_off(_try(n.nvmlDeviceGetDisplayActive, h)),
        "ecc_uncorrected_volatile": ecc,
        "fan_percent": _try(n.nvmlDeviceGetFanSpeed, h),
        "temperature_c": _try(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU),
        "performance_state": None if pstate is None or pstate == 32 else f"P{pstate}",
        "power_w": None if power is None else power // 1000,
        "power_cap_w": None if cap is None else cap // 1000,
        "memory_used_mib": None if mem is None else mem.used // MIB,
        "memory_total_mib": None if mem is None else mem.total // MIB,
        "utilization_percent": None if util is None else util.gpu,
        "compute_mode": None if mode is None else COMPUTE_MODES.get(mode, str(mode)),
        "mig_mode": None if mig is None else ("Enabled" if mig[0] else "Disabled"),
        "fabric": _fabric(n, h),
    }


def _on_off(value: int | None) -> str | None:
    return None if value is None else ("On" if value else "Off")


def _fabric(n: Any, h: Any) -> str | None:
    info = n.c_nvmlGpuFabricInfo_v2_t()
    if _try(n.nvmlDeviceGetGpuFabricInfoV, h, ctypes.byref(info)) is None:
        return None
    if not any(bytes(info.clusterUuid)):
        return "node NVSwitches (no cluster)"
    c = bytes(info.clusterUuid).hex()
    text = f"{c[:8]}-{c[8:12]}-{c[12:16]}-{c[16:20]}-{c[20:]}.{info.cliqueId}"
    return text + " degraded" if info.healthMask & 3 == 1 else text


def _mig_devices(n: Any, i: int, h: Any) -> list[dict[str, Any]]:
    if not (_try(n.nvmlDeviceGetMigMode, h) or [0])[0]:
        return []
    rows = []
    for k in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
        m = _try(n.nvmlDeviceGetMigDeviceHandleByIndex, h, k)
        if m is None:
            break
        mem = n.nvmlDeviceGetMemoryInfo(m)
        rows.append({"gpu": i, "gpu_instance": n.nvmlDeviceGetGpuInstanceId(m),
                     "compute_instance": n.nvmlDeviceGetComputeInstanceId(m), "device": k,
                     "profile": n.nvmlDeviceGetName(m).split(" MIG ")[-1],
                     "memory_used_mib": mem.used // MIB, "memory_total_mib": mem.total // MIB,
                     "uuid": n.nvmlDeviceGetUUID(m)})
    return rows


def _nvlink(n: Any, handles: dict[int, Any]) -> dict[str, Any] | None:
    links = {i: _links(n, h) for i, h in handles.items()}
    if not any(links.values()):
        return None
    switch = n.NVML_NVLINK_DEVICE_TYPE_SWITCH
    gpus = [{"gpu": i, "up": sum(1 for _, active, _, _ in ls if active), "links": len(ls),
             "to_nvswitch": sum(1 for _, _, _, kind in ls if kind == switch)}
            for i, ls in links.items()]
    matrix = None
    if len(handles) <= MATRIX_LIMIT:
        matrix = [[_cell(n, i, j, handles, links) for j in handles] for i in handles]
    return {"gpus": gpus, "matrix": matrix, "matrix_limit": MATRIX_LIMIT}


def _cell(n: Any, i: int, j: int, handles: dict[int, Any],
          links: dict[int, list[tuple[int, bool, str, int]]]) -> str:
    if i == j:
        return "X"
    bus_j = n.nvmlDeviceGetPciInfo(handles[j]).busId
    gpu_type, switch_type = n.NVML_NVLINK_DEVICE_TYPE_GPU, n.NVML_NVLINK_DEVICE_TYPE_SWITCH
    direct = sum(1 for _, active, remote, kind in links[i]
                 if active and kind == gpu_type and remote == bus_j)
    if direct:
        return f"NV{direct}"
    if n.nvmlDeviceGetP2PStatus(handles[i], handles[j], n.NVML_P2P_CAPS_INDEX_NVLINK) == 0:
        up_i = sum(1 for _, a, _, k in links[i] if a and k == switch_type)
        up_j = sum(1 for _, a, _, k in links[j] if a and k == switch_type)
        return f"NV{min(up_i, up_j)}"
    level = n.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])
    return LEVELS.get(level, str(level))
