"""Bad input never crashes the host process: NULLs, garbage handles, bad state files."""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import pytest

from fakegpu.nvml import build, gen_stubs, state

from .conftest import py_json, render_node, run_python, topology

pytestmark = pytest.mark.integration

FUZZ = """
import ctypes, json, sys
lib = ctypes.CDLL("libnvidia-ml.so.1")
names, handle_first = json.loads(open(%r).read())
skip = {"nvmlInit", "nvmlInit_v2", "nvmlInitWithFlags", "nvmlShutdown", "nvmlErrorString"}
before = {}
for name in names:
    if name in skip: continue
    fn = getattr(lib, name); fn.restype = ctypes.c_int
    before[name] = fn(None, None, None, None, None, None)
assert lib.nvmlInit_v2() == 0
garbage = (ctypes.c_ubyte * 4096)(*([0xFF] * 4096))
out = ctypes.create_string_buffer(4096)
after, bad_handle = {}, {}
for name in names:
    if name in skip: continue
    fn = getattr(lib, name); fn.restype = ctypes.c_int
    after[name] = fn(None, None, None, None, None, None)
    if name in handle_first:
        bad_handle[name] = fn(ctypes.byref(garbage), 0, ctypes.byref(out), ctypes.byref(out), 0, 0)
print(json.dumps({"before": before, "after": after, "bad_handle": bad_handle}))
"""


def test_null_and_garbage_arguments(tmp_path: Path) -> None:
    topo = topology("dgx-h100")
    path = render_node(tmp_path, topo, topo.nodes[0].name)
    decls = gen_stubs.declarations(build.find_header())
    names = sorted(d.name for d in decls)
    handle_types = ("nvmlDevice_t ", "nvmlGpuInstance_t ", "nvmlComputeInstance_t ")
    handle_first = [d.name for d in decls if d.params.startswith(handle_types)]
    assert len(handle_first) > 200
    names_file = tmp_path / "names.json"
    names_file.write_text(json.dumps([names, handle_first]))
    got = py_json(path, FUZZ % str(names_file), timeout=120)
    # before init: everything answers UNINITIALIZED
    assert {k: v for k, v in got["before"].items() if v != 1} == {}
    # after init: with NULL everywhere nothing succeeds, nothing crashes
    assert {k: v for k, v in got["after"].items() if v == 0} == {}
    for name in ("nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetName",
                 "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetMigMode",
                 "nvmlDeviceGetGpuFabricInfoV", "nvmlEventSetWait_v2", "nvmlGpuInstanceGetInfo",
                 "nvmlSystemGetDriverVersion", "nvmlDeviceGetHandleByUUID"):
        assert got["after"][name] == 2, name  # NVML_ERROR_INVALID_ARGUMENT
    # a pointer that is not one of our handles is refused, never dereferenced
    assert {k: v for k, v in got["bad_handle"].items() if v not in (2, 3)} == {}


def test_out_of_range_and_errors(tmp_path: Path) -> None:
    topo = topology("hgx-h200")
    path = render_node(tmp_path, topo, topo.nodes[0].name)
    code = """
import json, pynvml as n
n.nvmlInit()
def code(fn, *a):
    try:
        fn(*a); return 0
    except n.NVMLError as e:
        return e.value
h = n.nvmlDeviceGetHandleByIndex(0)
print(json.dumps({
  "index": code(n.nvmlDeviceGetHandleByIndex, 8),
  "uuid": code(n.nvmlDeviceGetHandleByUUID, "GPU-00000000-0000-0000-0000-000000000000"),
  "pci": code(n.nvmlDeviceGetHandleByPciBusId, "not-a-bus-id"),
  "link": code(n.nvmlDeviceGetNvLinkState, h, 36),
  "profile": code(n.nvmlDeviceGetGpuInstanceProfileInfo, h, 99),
  "strings": [n.nvmlErrorString(i) for i in range(0, 31)] + [n.nvmlErrorString(999)],
}))
"""
    got = py_json(path, code)
    assert got["index"] == 2 and got["link"] == 2 and got["profile"] == 2
    assert got["uuid"] == 6 and got["pci"] == 2
    assert all(s and s != "Unknown Error" for s in got["strings"][:31])
    assert got["strings"][-1] == "Unknown Error"


INIT = """
import json, sys, pynvml as n
try:
    n.nvmlInit()
    print(json.dumps(0))
except n.NVMLError as e:
    print(json.dumps(e.value))
"""


@pytest.mark.parametrize("damage,code,reason", [
    ("missing", 9, "cannot open"),
    ("foreign", 999, "not a fakegpu state file"),
    ("truncated", 999, "size mismatch"),
    ("corrupt", 999, "checksum"),
    ("version", 18, "layout"),
])
def test_bad_state_file_fails_init(tmp_path: Path, damage: str, code: int, reason: str) -> None:
    topo = topology("dgx-a100")
    path = render_node(tmp_path, topo, topo.nodes[0].name)
    data = bytearray(path.read_bytes())
    if damage == "missing":
        path.unlink()
    elif damage == "foreign":
        path.write_bytes(b"#!/bin/sh\necho hello\n" * 500)
    elif damage == "truncated":
        path.write_bytes(bytes(data[:-100]))
    elif damage == "corrupt":
        off = ctypes.sizeof(state.Header) + state.GpuStatic.uuid.offset + 5
        data[off] ^= 0x01
        path.write_bytes(bytes(data))
    elif damage == "version":
        data[state.Header.layout_version.offset] = 99
        path.write_bytes(bytes(data))
    quiet = run_python(path, INIT)
    assert json.loads(quiet.stdout) == code and quiet.stderr == ""
    loud = run_python(path, INIT, extra_env={"FAKEGPU_NVML_DEBUG": "1"})
    assert json.loads(loud.stdout) == code
    lines = loud.stderr.strip().splitlines()
    assert len(lines) == 1 and reason in lines[0]


def test_init_flags_and_refcount(tmp_path: Path) -> None:
    topo = topology("dgx-a100")
    path = render_node(tmp_path, topo, topo.nodes[0].name)
    code = """
import json, os, pynvml as n
def c(fn, *a):
    try:
        r = fn(*a); return 0 if r is None else r
    except n.NVMLError as e:
        return -e.value
out = {}
n.nvmlInit(); n.nvmlInit()
out["count"] = n.nvmlDeviceGetCount()
n.nvmlShutdown()
out["after_one"] = c(n.nvmlDeviceGetCount)
n.nvmlShutdown()
out["after_two"] = c(n.nvmlDeviceGetCount)
out["extra"] = c(n.nvmlShutdown)
os.environ["FAKEGPU_NVML_STATE"] = "/nonexistent/state"
out["plain"] = c(n.nvmlInit)
out["no_gpus"] = c(n.nvmlInitWithFlags, n.NVML_INIT_FLAG_NO_GPUS)
out["no_gpus_count"] = c(n.nvmlDeviceGetCount)
print(json.dumps(out))
"""
    got = py_json(path, code)
    assert got == {"count": 8, "after_one": 8, "after_two": -1, "extra": -1, "plain": -9,
                   "no_gpus": 0, "no_gpus_count": 0}
