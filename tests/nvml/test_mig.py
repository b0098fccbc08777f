"""MIG through the real pynvml: capacity and overlap rules as the hardware enforces them,
instances visible to every process on the node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fakegpu.topology.model import MigGpuInstanceProfile, Topology

from .conftest import py_json, render_node, topology

pytestmark = pytest.mark.integration

HELPERS = """
import json, sys
import pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)

def code(fn, *args):
    try:
        fn(*args)
        return 0
    except n.NVMLError as err:
        return err.value

def gi_id(enum):
    return n.nvmlDeviceGetGpuInstanceProfileInfo(h, enum).id

def create(enum, count):
    pid = gi_id(enum)
    made, refused = [], 0
    for _ in range(count):
        try:
            made.append(n.nvmlDeviceCreateGpuInstance(h, pid))
        except n.NVMLError as err:
            refused = err.value
    return made, refused

def destroy(gis):
    for gi in gis:
        n.nvmlGpuInstanceDestroy(gi)
"""

ROUND_TRIP = HELPERS + """
out = {}
out["set"] = int(getattr(n.nvmlDeviceSetMigMode(h, n.NVML_DEVICE_MIG_ENABLE), "value", 0))
out["mode"] = list(n.nvmlDeviceGetMigMode(h))
out["max"] = n.nvmlDeviceGetMaxMigDeviceCount(h)
profiles = {}
for enum in range(n.NVML_GPU_INSTANCE_PROFILE_COUNT):
    try:
        v1 = n.nvmlDeviceGetGpuInstanceProfileInfo(h, enum, version=1)
        v2 = n.nvmlDeviceGetGpuInstanceProfileInfo(h, enum, version=2)
    except (n.NVMLError_NotSupported, n.NVMLError_InvalidArgument):  # past driver 580's count
        continue
    count = n.c_uint(0)
    n.nvmlDeviceGetGpuInstancePossiblePlacements(h, v2.id, None, n.byref(count))
    arr = (n.c_nvmlGpuInstancePlacement_t * count.value)()
    n.nvmlDeviceGetGpuInstancePossiblePlacements(h, v2.id, arr, n.byref(count))
    profiles[enum] = {"name": v2.name.decode() if isinstance(v2.name, bytes) else v2.name,
                      "v1": [v1.id, v1.sliceCount, v1.instanceCount, v1.multiprocessorCount,
                             v1.memorySizeMB],
                      "v2": [v2.id, v2.sliceCount, v2.instanceCount, v2.multiprocessorCount,
                             v2.memorySizeMB],
                      "placements": [[p.start, p.size] for p in arr]}
out["profiles"] = profiles
one = 0
out["capacity_1g"] = n.nvmlDeviceGetGpuInstanceRemainingCapacity(h, gi_id(one))
seven, refused = create(one, 8)
out["seven"] = len(seven)
out["eighth"] = refused
# destroy frees: remove one, a new one fits again where it was
info = n.nvmlGpuInstanceGetInfo(seven[3])
freed_start = info.placement.start
n.nvmlGpuInstanceDestroy(seven[3])
again = n.nvmlDeviceCreateGpuInstance(h, gi_id(one))
out["again_start"] = [freed_start, n.nvmlGpuInstanceGetInfo(again).placement.start]
destroy(seven[:3] + seven[4:] + [again])
three, refused3 = create(2, 2)
out["three_three"] = [len(three), refused3]
# a 4g cannot join two 3g (no memory slices left)
out["three_then_four"] = code(n.nvmlDeviceCreateGpuInstance, h, gi_id(3))
destroy(three)
four, refused4 = create(3, 2)
out["four_four"] = [len(four), refused4]
destroy(four)
# explicit placements: legal, illegal, overlapping
pl = n.c_nvmlGpuInstancePlacement_t(); pl.start, pl.size = 4, 4
a = n.nvmlDeviceCreateGpuInstanceWithPlacement(h, gi_id(2), n.byref(pl))
bad = n.c_nvmlGpuInstancePlacement_t(); bad.start, bad.size = 3, 4
out["illegal"] = code(n.nvmlDeviceCreateGpuInstanceWithPlacement, h, gi_id(2), n.byref(bad))
ov = n.c_nvmlGpuInstancePlacement_t(); ov.start, ov.size = 4, 2
out["overlap"] = code(n.nvmlDeviceCreateGpuInstanceWithPlacement, h, gi_id(1), n.byref(ov))
# compute instance -> MIG device
ci_info = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(a, n.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
                                                         n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
ci = n.nvmlGpuInstanceCreateComputeInstance(a, ci_info.id)
out["gi_in_use"] = code(n.nvmlGpuInstanceDestroy, a)
mig = n.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
parent = n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
again = n.nvmlDeviceGetHandleByUUID(n.nvmlDeviceGetUUID(mig))
out["mig"] = {"is_mig": n.nvmlDeviceIsMigDeviceHandle(mig),
              "parent_uuid": n.nvmlDeviceGetUUID(parent),
              "uuid": n.nvmlDeviceGetUUID(mig),
              "gi": n.nvmlDeviceGetGpuInstanceId(mig),
              "gi_info": n.nvmlGpuInstanceGetInfo(a).id,
              "ci": n.nvmlDeviceGetComputeInstanceId(mig),
              "mem": n.nvmlDeviceGetMemoryInfo(mig).total,
              "name": n.nvmlDeviceGetName(mig),
              "by_uuid": n.nvmlDeviceIsMigDeviceHandle(again),
              "next": code(n.nvmlDeviceGetMigDeviceHandleByIndex, h, 1)}
n.nvmlComputeInstanceDestroy(ci)
n.nvmlGpuInstanceDestroy(a)
out["disable"] = int(getattr(n.nvmlDeviceSetMigMode(h, n.NVML_DEVICE_MIG_DISABLE), "value", 0))
n.nvmlShutdown()
print(json.dumps(out, default=lambda x: x.value))
"""


def _profile(topo: Topology, enum: int) -> MigGpuInstanceProfile:
    mig = topo.nodes[0].gpus[0].product.mig
    assert mig is not None
    p = next(p for p in mig.profiles if p.id == enum)
    return p


@pytest.mark.parametrize("fixture", ["dgx-h100", "hgx-h200"])
def test_mig_round_trip(fixture: str, tmp_path: Path) -> None:
    topo = topology(fixture)
    gpu = topo.nodes[0].gpus[0]
    mig = gpu.product.mig
    assert mig is not None
    path = render_node(tmp_path, topo, topo.nodes[0].name)
    out: dict[str, Any] = py_json(path, ROUND_TRIP)
    assert out["set"] == 0 and out["mode"] == [1, 1]
    assert out["max"] == mig.max_gpu_instances
    assert {int(k) for k in out["profiles"]} == {p.id for p in mig.profiles}
    for enum, seen in out["profiles"].items():
        p = _profile(topo, int(enum))
        assert seen["name"] == f"MIG {p.name}"  # NVML's name, as nvidia-smi mig -lgip shows it
        assert seen["v1"] == seen["v2"]
        assert seen["v2"][1:] == [p.slice_count, p.instance_count, p.sm_count, p.memory_mib]
        assert seen["placements"] == [[pl.start, pl.size] for pl in p.placements]
    one = _profile(topo, 0)
    assert out["capacity_1g"] == one.instance_count == 7
    assert out["seven"] == 7
    assert out["eighth"] == 23  # NVML_ERROR_INSUFFICIENT_RESOURCES
    assert out["again_start"][0] == out["again_start"][1]
    assert out["three_three"] == [2, 0]
    assert out["three_then_four"] == 23
    assert out["four_four"] == [1, 23]
    assert out["illegal"] == 2  # not one of the profile's placements
    assert out["overlap"] == 23
    assert out["gi_in_use"] == 19  # NVML_ERROR_IN_USE while a compute instance exists
    m = out["mig"]
    assert m["is_mig"] == 1 and m["by_uuid"] == 1
    assert m["parent_uuid"] == gpu.uuid
    assert m["uuid"].startswith("MIG-") and len(m["uuid"]) == 40
    assert m["gi"] == m["gi_info"] and m["ci"] == 0
    assert m["mem"] == _profile(topo, 2).memory_mib * 1024 * 1024
    assert m["name"] == f"{gpu.product.name} MIG {_profile(topo, 2).name}"
    assert m["next"] == 6  # NVML_ERROR_NOT_FOUND: only one MIG device
    assert out["disable"] == 0


CREATE_AND_KEEP = HELPERS + """
n.nvmlDeviceSetMigMode(h, n.NVML_DEVICE_MIG_ENABLE)
made, _ = create(2, 1)
ci = n.nvmlGpuInstanceCreateComputeInstance(made[0], n.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE)
print(json.dumps(n.nvmlDeviceGetUUID(n.nvmlDeviceGetMigDeviceHandleByIndex(h, 0))))
"""

OBSERVE = HELPERS + """
mode = list(n.nvmlDeviceGetMigMode(h))
mig = n.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
gis = (n.c_nvmlGpuInstance_t * 8)()
count = n.c_uint(8)
n.nvmlDeviceGetGpuInstances(h, gi_id(2), gis, n.byref(count))
refused = code(n.nvmlDeviceCreateGpuInstance, h, gi_id(4))  # 7g no longer fits
print(json.dumps({"mode": mode, "uuid": n.nvmlDeviceGetUUID(mig), "gis": count.value,
                  "7g": refused}))
"""


@pytest.mark.parametrize("fixture", ["dgx-h100", "hgx-h200"])
def test_second_process_sees_mig_change(fixture: str, tmp_path: Path) -> None:
    topo = topology(fixture)
    path = render_node(tmp_path, topo, topo.nodes[0].name)
    uuid = py_json(path, CREATE_AND_KEEP)
    seen = py_json(path, OBSERVE)
    assert seen == {"mode": [1, 1], "uuid": uuid, "gis": 1, "7g": 23}


def test_prerendered_instances(tmp_path: Path) -> None:
    """MIG instances in the topology show up as MIG devices with their profiles."""
    topo = topology("mixed")
    node = next(n for n in topo.nodes if any(g.mig.instances for g in n.gpus))
    gpu = next(g for g in node.gpus if g.mig.instances)
    path = render_node(tmp_path, topo, node.name)
    code = f"""
import json, pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex({gpu.index})
out = []
for i in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
    try:
        m = n.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
    except n.NVMLError_NotFound:
        break
    gi = n.nvmlDeviceGetGpuInstanceById(h, n.nvmlDeviceGetGpuInstanceId(m))
    info = n.nvmlGpuInstanceGetInfo(gi)
    # nvml.h: a MIG handle's index is the one GetMigDeviceHandleByIndex takes for it
    out.append([n.nvmlDeviceGetName(m), info.placement.start, n.nvmlDeviceGetIndex(m)])
print(json.dumps(out, default=lambda x: x.value))
"""
    got = py_json(path, code)
    assert got == [[f"{gpu.product.name} MIG {i.profile}", i.placement_start, k]
                   for k, i in enumerate(gpu.mig.instances)]


def test_profile_info_reads_the_callers_struct_version(tmp_path: Path) -> None:
    """v2 and v3 layouts are filled; an unknown version is refused before the profile lookup.
    As read on a real H200 (driver 580.159.04, 2026-12-04): the name carries NVIDIA's "MIG "
    prefix, the version field comes back 0, a bad version (0 too) is INVALID_ARGUMENT, and an
    index past driver 580's profile count (3_SLICE_GFX, 0x11) is INVALID_ARGUMENT."""
    topo = topology("dgx-h100")
    path = render_node(tmp_path, topo, topo.nodes[0].name)
    out = py_json(path, HELPERS + """
import ctypes
fn = n._nvmlGetFunctionPointer("nvmlDeviceGetGpuInstanceProfileInfoV")
byid = n._nvmlGetFunctionPointer("nvmlDeviceGetGpuInstanceProfileInfoByIdV")
info = n.c_nvmlGpuInstanceProfileInfo_v2_t()
info.version = n.nvmlGpuInstanceProfileInfo_v2
ok = fn(h, 0, ctypes.byref(info))
bad = n.c_nvmlGpuInstanceProfileInfo_v2_t()
bad.version = 0x07000098
name = info.name.decode() if isinstance(info.name, bytes) else info.name
returned = info.version
zero = n.c_nvmlGpuInstanceProfileInfo_v2_t()
zero.version = 0
gfx = n.c_nvmlGpuInstanceProfileInfo_v2_t()
print(json.dumps({"ok": ok, "name": name, "returned_version": returned,
                  "bad": fn(h, 0, ctypes.byref(bad)), "zero": fn(h, 0, ctypes.byref(zero)),
                  "bad_unknown_id": byid(h, 9999, ctypes.byref(bad)),
                  "good_unknown_id": byid(h, 9999, ctypes.byref(info)),
                  "gfx": fn(h, 0x11, ctypes.byref(gfx)),
                  "all_me_2": fn(h, 0x10, ctypes.byref(gfx))}))
""")
    first = topo.nodes[0].gpus[0].product.mig.profiles[0]  # type: ignore[union-attr]
    assert out["ok"] == 0 and out["name"] == f"MIG {first.name}"
    assert out["returned_version"] == 0
    assert out["bad"] == out["zero"] == out["bad_unknown_id"] == 2  # NVML_ERROR_INVALID_ARGUMENT
    assert out["good_unknown_id"] == 2
    assert out["gfx"] == 2 and out["all_me_2"] == 3  # INVALID_ARGUMENT / NOT_SUPPORTED
