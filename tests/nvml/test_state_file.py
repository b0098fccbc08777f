"""The state file under abuse: corrupt dynamic records, truncation and replacement while a
client runs, and read-only readers. No signal may ever reach the client; NVML codes only."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from fakegpu.nvml import env, state

from .conftest import py_json, render_node, run_python, topology

pytestmark = pytest.mark.integration

UNKNOWN, GPU_IS_LOST, NO_PERMISSION, INVALID_ARGUMENT, NOT_FOUND = 999, 15, 4, 2, 6


def patch_dynamic(path: Path, gpu: int, edit: object) -> None:
    """Edit one GPU's dynamic record in place (it is not covered by the checksum)."""
    data = bytearray(path.read_bytes())
    off = ctypes.sizeof(state.Header) + gpu * ctypes.sizeof(state.GpuRecord) + \
        state.GpuRecord.d.offset
    dyn = state.GpuDynamic.from_buffer(data, off)
    edit(dyn)  # type: ignore[operator]
    del dyn
    with open(path, "r+b") as handle:
        handle.write(data)


CORRUPT = """
import json, sys, pynvml as n
n.nvmlInit()
def code(fn, *a):
    try:
        fn(*a); return 0
    except n.NVMLError as e:
        return e.value
h = n.nvmlDeviceGetHandleByIndex(0)
pid = n.nvmlDeviceGetGpuInstanceProfileInfo(h, n.NVML_GPU_INSTANCE_PROFILE_1_SLICE).id
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.readline()  # the record is corrupted now
print(json.dumps({
  "capacity": code(n.nvmlDeviceGetGpuInstanceRemainingCapacity, h, pid),
  "create": code(n.nvmlDeviceCreateGpuInstance, h, pid),
  "name": code(n.nvmlDeviceGetName, h),
  "handle": code(n.nvmlDeviceGetHandleByIndex, 0),
  "other_gpu": code(n.nvmlDeviceGetName, n.nvmlDeviceGetHandleByIndex(1)),
}))
"""


@pytest.mark.parametrize("field,value", [
    ("profile_index", 0xFFFFFFF0), ("profile_index", 16), ("start", 0xFFFFFFFF),
    ("ci_profile", 0x7FFFFFFF), ("mig_current", 7),
])
def test_corrupt_dynamic_record_answers_unknown(tmp_path: Path, field: str, value: int) -> None:
    """issue 15: gis[].profile_index was used unchecked in gi_fits and crashed the client."""
    topo = topology("dgx-h100")
    path = render_node(tmp_path, topo, topo.nodes[0].name)

    def edit(d: state.GpuDynamic) -> None:
        d.mig_current = d.mig_pending = 1
        gi = d.gis[0]
        gi.active, gi.id, gi.profile_index, gi.start, gi.size = 1, 1, 0, 0, 1
        if field == "ci_profile":
            gi.cis[0].active, gi.cis[0].nvml_profile = 1, value
        elif field == "mig_current":
            d.mig_current = value
        else:
            setattr(gi, field, value)

    proc = subprocess.Popen([sys.executable, "-c", CORRUPT], env=dict(os.environ, **env.env(path)),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    patch_dynamic(path, 0, edit)
    out, err = proc.communicate("\n", timeout=60)
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == {
        "capacity": UNKNOWN, "create": UNKNOWN, "name": UNKNOWN, "handle": UNKNOWN,
        "other_gpu": 0}


# A client that keeps calling while the file is vandalised, until told to stop; it reports
# the codes it saw and, allowing its 100 ms re-check of the path, what it answers at the end.
LOOP = """
import json, os, sys, time, pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
codes = {}
sys.stdout.write("ready\\n"); sys.stdout.flush()
while not os.path.exists(sys.argv[1]):
    try:
        n.nvmlDeviceGetMigMode(h); n.nvmlDeviceGetMemoryInfo(h); n.nvmlDeviceGetName(h)
        n.nvmlDeviceGetCount()
        code = 0
    except n.NVMLError as e:
        code = e.value
    codes[code] = codes.get(code, 0) + 1
for _ in range(50):
    try:
        last = n.nvmlDeviceGetName(h)
        break
    except n.NVMLError as e:
        last = e.value
        time.sleep(0.05)
print(json.dumps({"codes": codes, "last": last}))
"""


def start_loop(path: Path, stop: Path) -> subprocess.Popen[str]:
    environ = dict(os.environ, **env.env(path))
    proc = subprocess.Popen([sys.executable, "-c", LOOP, str(stop)], env=environ,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def finish(proc: subprocess.Popen[str], stop: Path) -> dict[str, Any]:
    stop.touch()
    out, err = proc.communicate(timeout=60)
    stop.unlink()
    assert proc.returncode == 0, f"client died with {proc.returncode}: {err}"
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def test_truncate_and_copy_over_live_file(tmp_path: Path) -> None:
    """issue 15: `truncate -s 0` / `cp other.state` on the live file killed clients (SIGBUS)."""
    topo = topology("dgx-h100")
    path = render_node(tmp_path, topo, topo.nodes[0].name)
    other = state.render(topology("hgx-h200"), "hgx-h200-0", tmp_path / "other.state")
    saved = tmp_path / "saved.state"
    stop = tmp_path / "stop"
    shutil.copyfile(path, saved)
    proc = start_loop(path, stop)
    for _ in range(20):
        os.truncate(path, 0)
        time.sleep(0.02)
        shutil.copyfile(saved, path)  # in place: same node again, the client continues
        time.sleep(0.02)
    got = finish(proc, stop)
    # it called while the file was truncated (the guard answered) and survived it
    assert set(got["codes"]) == {"0", str(GPU_IS_LOST)}
    assert got["last"] == topo.nodes[0].gpus[0].product.name

    proc = start_loop(path, stop)
    shutil.copyfile(other, path)  # another node's file in place: the GPUs are gone
    time.sleep(0.3)
    got = finish(proc, stop)
    assert got["last"] == GPU_IS_LOST


def test_rerender_moves_running_clients(tmp_path: Path) -> None:
    """issue 15: a re-render (rename) left running clients silently on the old file."""
    topo = topology("dgx-h100")
    path = render_node(tmp_path, topo, topo.nodes[0].name)
    code = """
import json, os, sys, pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
before = n.nvmlDeviceGetMigMode(h)[0]
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.readline()
after = n.nvmlDeviceGetMigMode(h)[0]
sys.stdout.write("moved\\n"); sys.stdout.flush()
sys.stdin.readline()
try:
    lost = n.nvmlDeviceGetName(h)
except n.NVMLError as e:
    lost = e.value
print(json.dumps([before, after, lost]))
"""
    environ = dict(os.environ, **env.env(path))
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=environ,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    # the same node re-rendered with MIG on: the client follows the new file
    mig_on = topology("dgx-h100")
    data = bytearray(state.render_bytes(mig_on, mig_on.nodes[0]))
    off = ctypes.sizeof(state.Header) + state.GpuRecord.d.offset
    dyn = state.GpuDynamic.from_buffer(data, off)
    dyn.mig_current = dyn.mig_pending = 1
    del dyn
    old_fd = os.open(path, os.O_RDWR)
    from fakegpu.fsutil import atomic_write
    atomic_write(path, bytes(data))
    state._retire(old_fd)
    os.close(old_fd)
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == "moved\n"  # before the next render, not after it
    # now another node's file at the path: GPU_IS_LOST, not the other node's GPU
    state.render(topology("hgx-h200"), "hgx-h200-0", path)
    proc.stdin.write("\n")
    proc.stdin.flush()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == [0, 1, GPU_IS_LOST]


def test_render_retires_the_replaced_file(tmp_path: Path) -> None:
    topo = topology("dgx-h100")
    path = render_node(tmp_path, topo, topo.nodes[0].name)
    old = os.open(path, os.O_RDONLY)
    try:
        render_node(tmp_path, topo, topo.nodes[0].name)
        assert os.pread(old, 8, 0) == bytes(8)  # clients of the old file notice
        assert path.read_bytes()[:8] == state.MAGIC
        assert oct(path.stat().st_mode & 0o777) == oct(0o644)
    finally:
        os.close(old)


READER = """
import json, pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
def code(fn, *a):
    try:
        fn(*a); return 0
    except n.NVMLError as e:
        return e.value
print(json.dumps({
  "count": n.nvmlDeviceGetCount(),
  "name": n.nvmlDeviceGetName(h),
  "mig": list(n.nvmlDeviceGetMigMode(h)),
  "set_mig": code(n.nvmlDeviceSetMigMode, h, 1),
  "persistence": code(n.nvmlDeviceSetPersistenceMode, h, 1),
}))
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to run a reader as nobody")
def test_non_root_reader(request: pytest.FixtureRequest) -> None:
    """issue 15: NVML opened the file read-write, so a non-root reader got NO_PERMISSION."""
    topo = topology("dgx-h100")
    shared = Path(tempfile.mkdtemp(prefix="fakegpu-reader-"))  # pytest's tmp is root-only
    shared.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(shared, ignore_errors=True))
    path = render_node(shared, topo, topo.nodes[0].name)
    assert path.stat().st_mode & 0o777 == 0o644 and path.stat().st_uid == 0
    libdir = env.libdir()
    environ = dict(os.environ, **env.env(path), HOME="/tmp")
    site = [p for p in sys.path if p]
    environ["PYTHONPATH"] = os.pathsep.join(site)
    proc = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
         READER], env=environ, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"count": 8, "name": topo.nodes[0].gpus[0].product.name, "mig": [0, 0],
                   "set_mig": NO_PERMISSION, "persistence": NO_PERMISSION}
    assert os.access(libdir, os.R_OK)
    # the root writer still changes it, and the reader sees the change
    assert py_json(path, READER)["set_mig"] == 0
    proc = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
         READER], env=environ, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["mig"] == [1, 1]


def test_mig_count_follows_mode(tmp_path: Path) -> None:
    """issue 15: a MIG-off GPU answered 7 for the max MIG device count, then INVALID_STATE."""
    topo = topology("mixed")
    path = render_node(tmp_path, topo, "a100-0")
    code = """
import json, pynvml as n
n.nvmlInit()
def code(fn, *a):
    try:
        fn(*a); return 0
    except n.NVMLError as e:
        return e.value
out = []
for i in range(4):
    h = n.nvmlDeviceGetHandleByIndex(i)
    out.append([n.nvmlDeviceGetMaxMigDeviceCount(h),
                code(n.nvmlDeviceGetMigDeviceHandleByIndex, h, 0),
                code(n.nvmlDeviceGetMigDeviceHandleByIndex, h, 3)])
print(json.dumps(out))
"""
    # GPU 0: MIG on, 3 instances; 1: MIG on, none; 2 and 3: MIG off
    assert py_json(path, code) == [[7, 0, NOT_FOUND], [7, NOT_FOUND, NOT_FOUND],
                                   [0, INVALID_ARGUMENT, INVALID_ARGUMENT],
                                   [0, INVALID_ARGUMENT, INVALID_ARGUMENT]]
    assert run_python(path, "import pynvml").returncode == 0


def test_file_of_an_older_layout_is_rendered_again(tmp_path: Path) -> None:
    """Layout 2 (addressing mode) refuses older files: ensure_state renders them again."""
    topo = topology("dgx-h100")
    path = render_node(tmp_path, topo, topo.nodes[0].name)
    data = bytearray(path.read_bytes())
    data[state.Header.layout_version.offset] = 1
    path.write_bytes(bytes(data))
    assert state.read_header(path).layout_version == 1
    env.ensure_state(topo, topo.nodes[0].name, path)
    assert state.read_header(path).layout_version == state.LAYOUT_VERSION
    assert py_json(path, "import pynvml as n; n.nvmlInit(); print(n.nvmlDeviceGetCount())") == 8
