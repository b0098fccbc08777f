"""Dump what an NVML library answers, call by call, so a real GPU and the fake can be compared.

Run it on a machine with a real GPU and against the fake (same topology) and diff the two:

    python3 -m fakegpu.nvml.probe > real.json          # needs only pynvml
    eval "$(fakegpu nvml env --topology hgx-h200 --node hgx-h200-0)"
    python3 -m fakegpu.nvml.probe > fake.json
    python3 -m fakegpu.nvml.probe --compare real.json fake.json

Every call is recorded with its value or its NVML error name, so "not supported" on one side and
a value on the other is a difference too. Only stdlib and pynvml: it must run on a bare GPU box.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

# Identity differs between any two machines; the comparison reports it apart from real drift.
IDENTITY_KEYS = frozenset({"uuid", "serial", "busId", "busIdLegacy", "bus", "minor",
                           "remote_pci", "clusterUuid", "mig_uuid", "board_part_number"})


def _call(fn: Callable[[], Any]) -> Any:
    import pynvml

    try:
        return _plain(fn())
    except pynvml.NVMLError as err:
        return f"ERROR: {err}"


def _plain(value: Any) -> Any:
    """pynvml returns ctypes structs, bytes and lists; make them JSON."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, ctypes.Structure):
        out = {}
        for name, _type in value._fields_:  # type: ignore[misc]
            field = getattr(value, name)
            if isinstance(field, ctypes.Array):
                field = bytes(field).hex() if name == "clusterUuid" else list(field)
            out[name] = _plain(field)
        return out
    return value


def _fabric(handle: Any) -> dict[str, Any]:
    import pynvml

    def v1() -> Any:
        info = pynvml.c_nvmlGpuFabricInfo_t()
        pynvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
        return info

    def versioned(struct: type[ctypes.Structure], version: int) -> Callable[[], Any]:
        def call() -> Any:
            info = struct()
            info.version = version
            pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
            return info
        return call

    return {
        "v1": _call(v1),
        "V_v2": _call(versioned(pynvml.c_nvmlGpuFabricInfo_v2_t, pynvml.nvmlGpuFabricInfo_v2)),
        "V_v3": _call(versioned(pynvml.c_nvmlGpuFabricInfo_v3_t, pynvml.nvmlGpuFabricInfo_v3)),
    }


def _mig_profiles(handle: Any) -> dict[str, Any]:
    import pynvml

    profiles: dict[str, Any] = {}
    for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        info = _call(partial(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, handle, index))
        entry: dict[str, Any] = {"info": info}
        if isinstance(info, dict):
            def placements(pid: int = info["id"]) -> Any:
                array = (pynvml.c_nvmlGpuInstancePlacement_t * 16)()
                count = ctypes.c_uint(16)
                pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(
                    handle, pid, array, ctypes.byref(count))
                return [[array[i].start, array[i].size] for i in range(count.value)]
            entry["placements"] = _call(placements)
        profiles[str(index)] = entry
    return profiles


def _nvlinks(handle: Any) -> list[dict[str, Any]]:
    import pynvml

    def remote_bus_id(link: int) -> Any:
        return pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId

    links = []
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        state = _call(partial(pynvml.nvmlDeviceGetNvLinkState, handle, link))
        if isinstance(state, str) and state.startswith("ERROR") and link > 0:
            break  # past the last link this GPU has
        links.append({
            "link": link,
            "state": state,
            "version": _call(partial(pynvml.nvmlDeviceGetNvLinkVersion, handle, link)),
            "remote_type": _call(partial(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link)),
            "remote_pci": _call(partial(remote_bus_id, link)),
        })
    return links


def probe_device(index: int) -> dict[str, Any]:
    import pynvml

    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    calls: dict[str, Callable[[], Any]] = {
        "name": lambda: pynvml.nvmlDeviceGetName(h),
        "uuid": lambda: pynvml.nvmlDeviceGetUUID(h),
        "serial": lambda: pynvml.nvmlDeviceGetSerial(h),
        "board_part_number": lambda: pynvml.nvmlDeviceGetBoardPartNumber(h),
        "brand": lambda: pynvml.nvmlDeviceGetBrand(h),
        "architecture": lambda: pynvml.nvmlDeviceGetArchitecture(h),
        "cuda_compute_capability": lambda: pynvml.nvmlDeviceGetCudaComputeCapability(h),
        "memory_v1": lambda: pynvml.nvmlDeviceGetMemoryInfo(h),
        "memory_v2": lambda: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2),
        "pci": lambda: pynvml.nvmlDeviceGetPciInfo_v3(h),
        "minor": lambda: pynvml.nvmlDeviceGetMinorNumber(h),
        "index": lambda: pynvml.nvmlDeviceGetIndex(h),
        "module_id": lambda: pynvml.nvmlDeviceGetModuleId(h),
        "numa_node": lambda: pynvml.nvmlDeviceGetNumaNodeId(h),
        "persistence_mode": lambda: pynvml.nvmlDeviceGetPersistenceMode(h),
        "addressing_mode": lambda: pynvml.nvmlDeviceGetAddressingMode(h),
        "mig_mode": lambda: pynvml.nvmlDeviceGetMigMode(h),
        "max_mig_devices": lambda: pynvml.nvmlDeviceGetMaxMigDeviceCount(h),
        "ecc_mode": lambda: pynvml.nvmlDeviceGetEccMode(h),
        "temperature": lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        "power_usage_mw": lambda: pynvml.nvmlDeviceGetPowerUsage(h),
        "power_limit_mw": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h),
        "clock_sm": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
        "clock_mem": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
        "max_clock_sm": lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
        "max_clock_mem": lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM),
        "utilization": lambda: pynvml.nvmlDeviceGetUtilizationRates(h),
        "supported_events": lambda: pynvml.nvmlDeviceGetSupportedEventTypes(h),
        "processes": lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(h),
        "multiprocessors": lambda: pynvml.nvmlDeviceGetAttributes(h).multiprocessorCount,
    }
    out: dict[str, Any] = {key: _call(fn) for key, fn in calls.items()}
    out["fabric"] = _fabric(h)
    out["mig_profiles"] = _mig_profiles(h)
    out["nvlinks"] = _nvlinks(h)
    return out


def probe() -> dict[str, Any]:
    import pynvml

    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
        result: dict[str, Any] = {
            "system": {
                "driver_version": _call(pynvml.nvmlSystemGetDriverVersion),
                "nvml_version": _call(pynvml.nvmlSystemGetNVMLVersion),
                "cuda_driver_version": _call(pynvml.nvmlSystemGetCudaDriverVersion_v2),
                "device_count": count,
            },
            "devices": [probe_device(i) for i in range(count)],
        }
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        result["topology"] = {
            f"{a}-{b}": {
                "common_ancestor": _call(partial(
                    pynvml.nvmlDeviceGetTopologyCommonAncestor, handles[a], handles[b])),
                "p2p_nvlink": _call(partial(pynvml.nvmlDeviceGetP2PStatus, handles[a], handles[b],
                                            pynvml.NVML_P2P_CAPS_INDEX_NVLINK)),
            }
            for a in range(count) for b in range(count) if a < b
        }
        return result
    finally:
        pynvml.nvmlShutdown()


def compare(a: Any, b: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """Every leaf that differs, as (path, left, right)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            out += compare(a.get(key, "<absent>"), b.get(key, "<absent>"), f"{path}.{key}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        # Lists of unequal length (a 1-GPU VM against an 8-GPU fixture, 1 NVLink against 18)
        # still compare item by item as far as both go, so GPU 0 is checked leaf by leaf.
        out = [] if len(a) == len(b) else [(f"{path}.length".lstrip("."), len(a), len(b))]
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            out += compare(x, y, f"{path}[{i}]")
        return out
    return [] if a == b else [(path.lstrip("."), a, b)]


def _is_identity(path: str) -> bool:
    return any(part.split("[")[0] in IDENTITY_KEYS for part in path.split("."))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m fakegpu.nvml.probe", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compare", nargs=2, metavar=("LEFT", "RIGHT"),
                        help="compare two probe dumps instead of probing")
    args = parser.parse_args(argv)
    if not args.compare:
        json.dump(probe(), sys.stdout, indent=1, sort_keys=True)
        print()
        return 0
    left, right = (json.loads(Path(p).read_text(encoding="utf-8")) for p in args.compare)
    diffs = compare(left, right)
    drift = [d for d in diffs if not _is_identity(d[0])]
    for path, x, y in drift:
        print(f"{path}: {x!r} != {y!r}")
    print(f"# {len(drift)} differences ({len(diffs) - len(drift)} identity fields left out)")
    return 1 if drift else 0


if __name__ == "__main__":
    sys.exit(main())
