"""An nvidia-smi-like view of one node, read through NVML (pynvml on our library), never
from the topology file: what it prints is what any NVML client on the node sees."""

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


def view(state_path: Path) -> str:
    lines: list[str] = []
    with nvml_session(state_path) as n:
        count = n.nvmlDeviceGetCount()
        lines.append(f"Driver Version: {n.nvmlSystemGetDriverVersion()}   "
                     f"CUDA Version: {n.nvmlSystemGetCudaDriverVersion_v2() / 1000:.1f}   "
                     f"GPUs: {count}   state: {state_path}")
        lines.append(f"{'GPU':>3}  {'Name':<24} {'Bus-Id':<17} {'Memory':>10}  {'MIG':<4} "
                     f"{'Temp':>4} {'Power':>6}  {'Fabric (clique)':<44} UUID")
        handles: list[Any] = []
        bus_ids: list[str] = []
        for i in range(count):
            try:
                h = n.nvmlDeviceGetHandleByIndex(i)
            except n.NVMLError as err:
                lines.append(f"{i:>3}  ({err})")
                handles.append(None)
                bus_ids.append("")
                continue
            handles.append(h)
            pci = n.nvmlDeviceGetPciInfo(h)
            bus_ids.append(pci.busId)
            mem = n.nvmlDeviceGetMemoryInfo(h).total // (1024 * 1024)
            mig = _try(n.nvmlDeviceGetMigMode, h)
            mig_text = "n/a" if mig is None else ("on" if mig[0] else "off")
            temp = _try(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU, default="-")
            power = _try(n.nvmlDeviceGetPowerUsage, h, default=None)
            fabric = "-"
            info = n.c_nvmlGpuFabricInfo_v2_t()
            answered = _try(n.nvmlDeviceGetGpuFabricInfoV, h, ctypes.byref(info)) is not None
            if answered and not any(bytes(info.clusterUuid)):
                fabric = "node NVSwitches (no cluster)"
            elif answered:
                cluster = bytes(info.clusterUuid).hex()
                fabric = (f"{cluster[:8]}-{cluster[8:12]}-{cluster[12:16]}-{cluster[16:20]}-"
                          f"{cluster[20:]}.{info.cliqueId}")
                if info.healthMask & 3 == 1:
                    fabric += " degraded"
            power_text = "-" if power is None else f"{power // 1000}W"
            lines.append(f"{i:>3}  {n.nvmlDeviceGetName(h)[:24]:<24} {pci.busId:<17} "
                         f"{mem:>7}MiB  {mig_text:<4} {temp!s:>3}C {power_text:>6}  "
                         f"{fabric:<44} {n.nvmlDeviceGetUUID(h)}")
        lines.extend(_mig_section(n, handles))
        lines.extend(_nvlink_section(n, handles, bus_ids))
    return "\n".join(lines) + "\n"


def _mig_section(n: Any, handles: list[Any]) -> list[str]:
    rows = []
    for i, h in enumerate(handles):
        if h is None or not (_try(n.nvmlDeviceGetMigMode, h) or [0])[0]:
            continue
        for k in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
            m = _try(n.nvmlDeviceGetMigDeviceHandleByIndex, h, k)
            if m is None:
                break
            gi = n.nvmlDeviceGetGpuInstanceId(m)
            ci = n.nvmlDeviceGetComputeInstanceId(m)
            mem = n.nvmlDeviceGetMemoryInfo(m).total // (1024 * 1024)
            name = n.nvmlDeviceGetName(m).split(" MIG ")[-1]
            uuid = n.nvmlDeviceGetUUID(m)
            rows.append(f"{i:>3}  {gi:>3} {ci:>3}  {name:<12} {mem:>7}MiB  {uuid}")
    if not rows:
        return []
    return ["", "MIG devices:", f"{'GPU':>3}  {'GI':>3} {'CI':>3}  {'Profile':<12} "
            f"{'Memory':>10}  UUID", *rows]


def _nvlink_section(n: Any, handles: list[Any], bus_ids: list[str]) -> list[str]:
    live = [(i, h) for i, h in enumerate(handles) if h is not None]
    links = {i: _links(n, h) for i, h in live}
    if not any(links.values()):
        return []
    out = ["", "NVLink:"]
    for i, _ in live:
        up = sum(1 for _, active, _, _ in links[i] if active)
        switches = sum(1 for _, _, _, kind in links[i] if kind == n.NVML_NVLINK_DEVICE_TYPE_SWITCH)
        out.append(f"  GPU{i}: {up}/{len(links[i])} links up, {switches} to NVSwitch")
    if len(live) > MATRIX_LIMIT:
        out.append(f"  (matrix omitted: more than {MATRIX_LIMIT} GPUs)")
        return out
    out.append("")
    out.append("      " + "".join(f"{'GPU' + str(i):>7}" for i, _ in live))
    gpu_type, switch_type = n.NVML_NVLINK_DEVICE_TYPE_GPU, n.NVML_NVLINK_DEVICE_TYPE_SWITCH
    for i, hi in live:
        cells = []
        for j, hj in live:
            if i == j:
                cells.append("X")
                continue
            direct = sum(1 for _, active, remote, kind in links[i]
                         if active and kind == gpu_type and remote == bus_ids[j])
            if direct:
                cells.append(f"NV{direct}")
            elif n.nvmlDeviceGetP2PStatus(hi, hj, n.NVML_P2P_CAPS_INDEX_NVLINK) == 0:
                up_i = sum(1 for _, a, _, k in links[i] if a and k == switch_type)
                up_j = sum(1 for _, a, _, k in links[j] if a and k == switch_type)
                cells.append(f"NV{min(up_i, up_j)}")
            else:
                level = n.nvmlDeviceGetTopologyCommonAncestor(hi, hj)
                cells.append(LEVELS.get(level, str(level)))
        out.append(f"{'GPU' + str(i):<6}" + "".join(f"{c:>7}" for c in cells))
    return out
