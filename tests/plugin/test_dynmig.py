"""Dynamic MIG on the fake NVML library: discovery publishes every placement with counters,
prepare-time creation lands exactly at the placement, destruction and restart reconcile.

Each scenario runs in a fresh process (pynvml binds libnvidia-ml.so.1 once per process) on a
node rendered from a topology; what it checks is read back through pynvml, as nvidia-smi would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fakegpu.plugin import partitions

TOPOLOGY = """
name: dyn
nodes:
  - name: h100-dyn
    gpus:
      - product: H100-SXM5-80GB
        mig: {enabled: true}
      - product: H100-SXM5-80GB
"""

_PRELUDE = """
import json, sys
import pynvml
from fakegpu.plugin import discovery, dynmig, partitions

inv = discovery.discover(dynamic_mig=True)
by_name = inv.by_name()
mig = dynmig.DynamicMig(lambda: by_name)

def instances():
    pynvml.nvmlInit()
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            for gi, info in dynmig._instances(h):
                out.append([i, int(info.profileId), int(info.placement.start),
                            int(info.placement.size)])
        return sorted(out)
    finally:
        pynvml.nvmlShutdown()
"""


def _node(tmp_path: Path) -> dict[str, str]:
    from fakegpu.nvml import env, state
    from fakegpu.topology.load import load_topology

    (tmp_path / "dyn.yaml").write_text(TOPOLOGY)
    path = state.render(load_topology(tmp_path / "dyn.yaml"), "h100-dyn", tmp_path / "s.bin")
    return {**os.environ, **env.env(path)}


def _run(environ: dict[str, str], body: str) -> Any:
    out = subprocess.run([sys.executable, "-c", _PRELUDE + body], env=environ,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_discovery_publishes_the_gpu_and_every_placement_with_counters(tmp_path: Path) -> None:
    environ = _node(tmp_path)
    got = _run(environ, """
import dataclasses
print(json.dumps({"devices": [dataclasses.asdict(d) for d in inv.devices],
                  "sets": [[n, dict(c)] for n, c in inv.counter_sets]}))
""")
    devices = got["devices"]
    # Both H100s support MIG (one has it on, one off): both are partitionable, each whole and
    # as 25 placements (1g.10gb x7, 1g.10gb+me x7, 1g.20gb x4, 2g.20gb x3, 3g.40gb x2,
    # 4g.40gb, 7g.80gb), all named as NVIDIA names them.
    assert sorted(n for n, _ in got["sets"]) == ["gpu-0-counter-set", "gpu-1-counter-set"]
    for minor in (0, 1):
        mine = [d for d in devices if d["minor"] == minor]
        assert [d["name"] for d in mine if d["type"] == "gpu"] == [f"gpu-{minor}"]
        parts = [d for d in mine if d["type"] == "mig"]
        assert len(parts) == 25
        assert all(d["uuid"] == "" and d["mig"]["gi_id"] == -1 for d in parts)
        assert f"gpu-{minor}-mig-1g10gb-19-6" in {d["name"] for d in parts}
        assert f"gpu-{minor}-mig-7g80gb-0-0" in {d["name"] for d in parts}
        counters = dict(got["sets"][minor][1])
        whole = next(d for d in mine if d["type"] == "gpu")
        assert dict(map(tuple, whole["consumes"])) == counters
        for d in parts:
            used = dict(map(tuple, d["consumes"]))
            start, size = d["mig"]["placement_start"], d["mig"]["placement_size"]
            assert {k for k in used if k.startswith("memory-slice-")} == {
                f"memory-slice-{i}" for i in range(start, start + size)}
            assert partitions.fits(counters, [used])
            assert not partitions.fits(counters, [used, counters])


def test_create_lands_at_the_placement_destroy_removes_it(tmp_path: Path) -> None:
    environ = _node(tmp_path)
    got = _run(environ, """
made = [mig.create(by_name[n]) for n in ("gpu-0-mig-1g10gb-19-3", "gpu-0-mig-3g40gb-9-4",
                                          "gpu-1-mig-1g10gb-19-0")]
after_create = instances()
again = mig.create(by_name["gpu-0-mig-1g10gb-19-3"])  # a retried prepare: taken over
after_again = instances()
# NVML's view of the MIG devices: their UUIDs and GPU instances.
pynvml.nvmlInit()
seen = {}
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    for k in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(h)):
        try:
            m = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, k)
        except pynvml.NVMLError:
            continue
        u = pynvml.nvmlDeviceGetUUID(m)
        seen[u.decode() if isinstance(u, bytes) else u] = int(pynvml.nvmlDeviceGetGpuInstanceId(m))
pynvml.nvmlShutdown()
errors = mig.destroy(["gpu-0-mig-3g40gb-9-4", "gpu-0"])
print(json.dumps({"made": [[d.uuid, d.mig.gi_id] for d in made], "again": again.uuid,
                  "after_create": after_create, "after_again": after_again, "seen": seen,
                  "errors": errors, "after_destroy": instances()}))
""")
    # 1g.10gb is GI profile 19, 3g.40gb 9, each exactly where the device name says; GPU 1
    # had MIG off: create turned it on first.
    assert got["after_create"] == [[0, 9, 4, 4], [0, 19, 3, 1], [1, 19, 0, 1]]
    assert got["after_again"] == got["after_create"]  # nothing created twice
    assert got["again"] == got["made"][0][0]
    for uuid, gi in got["made"]:
        assert uuid.startswith("MIG-") and got["seen"][uuid] == gi
    assert got["errors"] == []
    assert got["after_destroy"] == [[0, 19, 3, 1], [1, 19, 0, 1]]


def test_a_failed_create_is_the_claims_error_and_leaves_nothing(tmp_path: Path) -> None:
    environ = _node(tmp_path)
    got = _run(environ, """
mig.create(by_name["gpu-0-mig-4g40gb-5-0"])
before = instances()
try:
    mig.create(by_name["gpu-0-mig-2g20gb-14-2"])  # overlaps the 4g at memory slices 2-3
    error = ""
except dynmig.PartitionError as err:
    error = str(err)
print(json.dumps({"before": before, "error": error, "after": instances()}))
""")
    assert "gpu-0-mig-2g20gb-14-2" in got["error"] and "memory slice 2" in got["error"]
    assert got["after"] == got["before"] == [[0, 5, 0, 4]]


def test_reconcile_keeps_owned_instances_and_destroys_the_rest(tmp_path: Path) -> None:
    environ = _node(tmp_path)
    got = _run(environ, """
for n in ("gpu-0-mig-1g10gb-19-0", "gpu-0-mig-1g10gb-19-1", "gpu-1-mig-7g80gb-0-0"):
    mig.create(by_name[n])
# An operator's instance nobody claimed, beside them.
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
p = pynvml.c_nvmlGpuInstancePlacement_t(); p.start, p.size = 4, 4
import ctypes; pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, 9, ctypes.byref(p))
pynvml.nvmlShutdown()
destroyed = mig.reconcile(["gpu-0-mig-1g10gb-19-1", "gpu-1-mig-7g80gb-0-0", "gpu-0"])
print(json.dumps({"destroyed": len(destroyed), "after": instances(),
                  "second": len(mig.reconcile(["gpu-0-mig-1g10gb-19-1",
                                               "gpu-1-mig-7g80gb-0-0"]))}))
""")
    assert got["after"] == [[0, 19, 1, 1], [1, 0, 0, 8]]
    assert got["destroyed"] == 2 and got["second"] == 0


_DRIVER = """
import copy, pathlib
from fakegpu.plugin.driver import Devices, Driver, DriverConfig
from fakegpu.kubeletplugin.claims import ClaimRef

state, cdi_root = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])

class Claims:
    def __init__(self):
        self.claims = {}
    def add(self, name, uid, devices):
        self.claims[name] = {"metadata": {"name": name, "namespace": "ns", "uid": uid},
                             "status": {"allocation": {"devices": {"results": [
                                 {"request": "mig", "driver": "gpu.fakegpu.dev",
                                  "pool": "node-a", "device": d} for d in devices]}}}}
    def get_claim(self, namespace, name):
        return copy.deepcopy(self.claims[name])
    def replace_claim_status(self, claim):
        pass

claims = Claims()

def driver(time_sliced=None):
    devices = Devices(lambda: discovery.discover(dynamic_mig=True, time_sliced=time_sliced))
    return Driver(DriverConfig(driver="gpu.fakegpu.dev", node="node-a", state_dir=state,
                               cdi_root=cdi_root, dynamic_mig=True), claims, devices)

def ref(name, uid):
    return ClaimRef("ns", name, uid)

def spec_env(uid):
    spec = json.loads(next(cdi_root.glob(f"*{uid}*.json")).read_text())
    return [e for e in spec["containerEdits"]["env"] if e.startswith("NVIDIA_VISIBLE_DEVICES=")]
"""


def _run_driver(environ: dict[str, str], tmp_path: Path, body: str) -> Any:
    (tmp_path / "state").mkdir(exist_ok=True)
    (tmp_path / "cdi").mkdir(exist_ok=True)
    out = subprocess.run([sys.executable, "-c", _PRELUDE + _DRIVER + body,
                          str(tmp_path / "state"), str(tmp_path / "cdi")], env=environ,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_prepare_creates_the_partition_the_pod_sees_unprepare_destroys_it(
        tmp_path: Path) -> None:
    environ = _node(tmp_path)
    got = _run_driver(environ, tmp_path, """
d = driver()
claims.add("a", "uid-a", ["gpu-0-mig-1g10gb-19-2", "gpu-0-mig-3g40gb-9-4"])
claims.add("bad", "uid-bad", ["gpu-0-mig-1g10gb-19-0", "gpu-0-mig-2g20gb-14-4"])
res = d.prepare([ref("a", "uid-a"), ref("bad", "uid-bad")])
created = instances()
env = spec_env("uid-a")
again = d.prepare([ref("a", "uid-a")])  # the kubelet asks again: answered, nothing new
after_again = instances()
un = d.unprepare([ref("a", "uid-a")])
print(json.dumps({"error_a": res["uid-a"].error, "error_bad": res["uid-bad"].error,
                  "created": created, "env": env, "after_again": after_again,
                  "again": again["uid-a"].error, "un": un, "after": instances()}))
""")
    assert got["error_a"] == ""
    # The second claim's 2g at slices 4-5 collides with the first claim's 3g (4-7): the
    # scheduler would never allocate that, but a failure must stay that claim's own, and its
    # 1g (made first) is destroyed again.
    assert "gpu-0-mig-2g20gb-14-4" in got["error_bad"]
    assert got["created"] == [[0, 9, 4, 4], [0, 19, 2, 1]]
    [env] = got["env"]
    uuids = env.split("=", 1)[1].split(",")
    assert len(uuids) == 2 and all(u.startswith("MIG-") for u in uuids)
    assert got["again"] == "" and got["after_again"] == got["created"]
    assert got["un"] == {"uid-a": ""}
    assert got["after"] == []


def test_a_restart_keeps_instances_of_prepared_claims_and_destroys_the_rest(
        tmp_path: Path) -> None:
    environ = _node(tmp_path)
    first = _run_driver(environ, tmp_path, """
d = driver()
claims.add("a", "uid-a", ["gpu-1-mig-2g20gb-14-0"])
res = d.prepare([ref("a", "uid-a")])
# As if a prepare was killed between creating its instance and writing its record.
mig.create(by_name["gpu-1-mig-1g10gb-19-6"])
print(json.dumps({"error": res["uid-a"].error, "before": instances()}))
""")
    assert first["error"] == ""
    assert first["before"] == [[1, 14, 0, 2], [1, 19, 6, 1]]
    second = _run_driver(environ, tmp_path, """
d = driver()  # a new plugin process: recover() reconciles
print(json.dumps({"after": instances(), "env": spec_env("uid-a")}))
""")
    assert second["after"] == [[1, 14, 0, 2]]
    assert second["env"] and second["env"][0].split("=", 1)[1].startswith("MIG-")


AMPERE = """
name: dyn-a100
nodes:
  - name: a100-dyn
    gpus:
      - product: A100-SXM4-40GB
        mig: {enabled: true, dynamic: true}
      - product: A100-SXM4-40GB
        mig: {dynamic: true}
"""


def test_an_ampere_gpu_is_partitions_with_mig_on_and_whole_with_mig_off(tmp_path: Path) -> None:
    # As NVIDIA's driver: before Hopper, MIG mode changes need a GPU reset, so it is never
    # switched for a claim: MIG on means partitions only, MIG off a plain GPU.
    from fakegpu.nvml import env, state
    from fakegpu.topology.load import load_topology

    (tmp_path / "a.yaml").write_text(AMPERE)
    path = state.render(load_topology(tmp_path / "a.yaml"), "a100-dyn", tmp_path / "s.bin")
    got = _run({**os.environ, **env.env(path)}, """
print(json.dumps({"devices": [[d.name, d.type, bool(d.consumes)] for d in inv.devices],
                  "sets": [n for n, _ in inv.counter_sets]}))
""")
    assert got["sets"] == ["gpu-0-counter-set"]
    gpu0 = [d for d in got["devices"] if d[0].startswith("gpu-0")]
    assert gpu0 and all(kind == "mig" and consumes for _, kind, consumes in gpu0)
    assert [d for d in got["devices"] if d[0].startswith("gpu-1")] == [["gpu-1", "gpu", False]]


def test_a_claim_for_the_whole_hopper_gpu_turns_mig_off(tmp_path: Path) -> None:
    environ = _node(tmp_path)  # GPU 0: H100 with MIG on
    got = _run_driver(environ, tmp_path, """
d = driver()
claims.add("w", "uid-w", ["gpu-0"])
res = d.prepare([ref("w", "uid-w")])
pynvml.nvmlInit()
mode = pynvml.nvmlDeviceGetMigMode(pynvml.nvmlDeviceGetHandleByIndex(0))[0]
pynvml.nvmlShutdown()
print(json.dumps({"error": res["uid-w"].error, "mode": mode, "env": spec_env("uid-w")}))
""")
    assert got["error"] == "" and got["mode"] == 0
    assert got["env"][0].split("=", 1)[1].startswith("GPU-")


def test_a_prepare_killed_between_create_and_record_is_reconciled_and_created_once(
        tmp_path: Path) -> None:
    environ = _node(tmp_path)
    (tmp_path / "state").mkdir()
    (tmp_path / "cdi").mkdir()
    # The plugin dies (SIGKILL) right after creating the MIG device, before its record.
    killed = subprocess.run([sys.executable, "-c", _PRELUDE + _DRIVER + """
import os, signal
from fakegpu.kubeletplugin import checkpoint
d = driver()
claims.add("k", "uid-k", ["gpu-0-mig-2g20gb-14-2"])
checkpoint.Records.stage = lambda self, claim: os.kill(os.getpid(), signal.SIGKILL)
d.prepare([ref("k", "uid-k")])
""", str(tmp_path / "state"), str(tmp_path / "cdi")], env=environ, capture_output=True,
        text=True, timeout=120, check=False)
    assert killed.returncode == -9, killed.stderr[-2000:]
    got = _run_driver(environ, tmp_path, """
left = instances()
d = driver()  # the restarted plugin
after_start = instances()
claims.add("k", "uid-k", ["gpu-0-mig-2g20gb-14-2"])
res = d.prepare([ref("k", "uid-k")])  # the kubelet asks again
print(json.dumps({"left": left, "after_start": after_start, "error": res["uid-k"].error,
                  "after": instances(), "env": spec_env("uid-k")}))
""")
    assert got["left"] == [[0, 14, 2, 2]]  # the killed prepare's instance
    assert got["after_start"] == []  # no claim owns it: destroyed at start
    assert got["error"] == "" and got["after"] == [[0, 14, 2, 2]]  # made once, again
    assert got["env"][0].split("=", 1)[1].startswith("MIG-")


def test_a_time_sliced_gpu_offers_shares_and_mig_devices_in_disjoint_groups(
        tmp_path: Path) -> None:
    environ = _node(tmp_path)
    got = _run(environ, """
def view(inv):
    return [[d.name, d.type, d.memory_bytes, dict(d.consumes), list(d.compat_groups),
             d.time_slice, d.time_slices, d.uuid] for d in inv.devices]
sliced = discovery.discover(dynamic_mig=True, time_sliced={0: 4})
nvidia = discovery.discover(True, dynamic_mig=True, time_sliced={0: 4})
print(json.dumps({"plain": view(inv), "sliced": view(sliced), "nvidia": view(nvidia),
                  "sets": [[n, dict(c)] for n, c in sliced.counter_sets]}))
""")
    memory = dict(got["sets"])["gpu-0-counter-set"][partitions.counter_name("memory")]
    sliced = {d[0]: d for d in got["sliced"]}
    shares = [d for d in got["sliced"] if d[5] >= 0]
    assert [d[0] for d in shares] == [f"gpu-0-ts-{k}" for k in range(4)]
    whole = sliced["gpu-0"]
    for _name, kind, size, consumes, groups, _k, n, uuid in shares:
        # A quarter of the counter set's memory, in whole MiB; the whole GPU's UUID.
        assert kind == "gpu" and n == 4 and groups == ["time-sliced"] and uuid == whole[7]
        assert size == consumes[partitions.counter_name("memory")] == memory // 4 >> 20 << 20
        assert list(consumes) == [partitions.counter_name("memory")]
    parts0 = [d for d in got["sliced"] if d[0].startswith("gpu-0-mig-")]
    parts1 = [d for d in got["sliced"] if d[0].startswith("gpu-1-mig-")]
    assert parts0 and all(d[4] == ["mig"] for d in parts0)
    assert parts1 and all(d[4] == [] for d in parts1)  # GPU 1 is not time-sliced
    assert whole[4] == [] and sliced["gpu-1"][4] == []
    # Without the option, and in NVIDIA's shape (its driver has no such device), unchanged.
    assert got["plain"] == [[*d[:4], [], *d[5:]] for d in got["sliced"] if d[5] < 0]
    assert not any(d[5] >= 0 or d[4] for d in got["nvidia"])


def test_a_share_turns_mig_off_and_a_mig_device_waits_for_the_shares_and_back(
        tmp_path: Path) -> None:
    environ = _node(tmp_path)  # GPU 0: H100 with MIG on
    got = _run_driver(environ, tmp_path, """
d = driver({0: 4})
def mode():
    pynvml.nvmlInit()
    try:
        return pynvml.nvmlDeviceGetMigMode(pynvml.nvmlDeviceGetHandleByIndex(0))[0]
    finally:
        pynvml.nvmlShutdown()
claims.add("s1", "uid-s1", ["gpu-0-ts-0"])
claims.add("s2", "uid-s2", ["gpu-0-ts-1"])
claims.add("m", "uid-m", ["gpu-0-mig-1g10gb-19-0"])
claims.add("s3", "uid-s3", ["gpu-0-ts-2"])
out = {}
res = d.prepare([ref("s1", "uid-s1"), ref("s2", "uid-s2")])
out["shares"] = [res["uid-s1"].error, res["uid-s2"].error, mode(), spec_env("uid-s1")]
out["mig_beside_shares"] = [d.prepare([ref("m", "uid-m")])["uid-m"].error, instances()]
d.unprepare([ref("s1", "uid-s1"), ref("s2", "uid-s2")])
out["mig_alone"] = [d.prepare([ref("m", "uid-m")])["uid-m"].error, instances(), mode()]
out["share_beside_mig"] = [d.prepare([ref("s3", "uid-s3")])["uid-s3"].error, mode()]
print(json.dumps(out))
""")
    e1, e2, mode, env = got["shares"]
    assert e1 == e2 == "" and mode == 0  # MIG off: the GPU is time-sliced whole
    assert env[0].split("=", 1)[1].startswith("GPU-")
    error, left = got["mig_beside_shares"]
    # What the scheduler's compatibility groups prevent, refused on the node too, naming why.
    assert "time-sliced shares are prepared (gpu-0-ts-0, gpu-0-ts-1)" in error and left == []
    assert got["mig_alone"] == ["", [[0, 19, 0, 1]], 1]
    error, mode = got["share_beside_mig"]
    assert "cannot turn MIG off on gpu-0-ts-2" in error and mode == 1
