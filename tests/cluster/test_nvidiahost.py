"""The NVIDIA host another vendor's plugin gets on a fakegpu node (nvidiahost.py, pluginhost.py),
built from a rendered topology state into real files; MIG instances made and destroyed through
the fake NVML (pynvml in a subprocess) add and remove their capability files (issue 13)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fakegpu import nvidiasmi
from fakegpu.cluster.embedded.pluginhost import wrapper_argv
from fakegpu.node import nvidiahost as nh
from fakegpu.nvml import env as nvml_env
from fakegpu.nvml import state
from fakegpu.testkit.gpus import read_node_gpus
from fakegpu.topology.load import load_topology
from fakegpu.topology.packaged import FIXTURES

FIXTURE = FIXTURES / "nvidia-driver.yaml"
NODE = "nv-0"
HOST_DEVICES = """Character devices:
  1 mem
  4 tty
195 nvidia-frontend
509 nvidia-uvm

Block devices:
  7 loop
259 blkext
"""

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="device nodes (mknod) and mount namespaces need root")


@pytest.fixture()
def node_state(tmp_path: Path) -> Path:
    return state.render(load_topology(FIXTURE), NODE, tmp_path / f"{NODE}.state")


def pynvml(state_path: Path, code: str) -> object:
    """Run ``code`` with pynvml on the fake library for ``state_path``; its last line's JSON."""
    environ = {**os.environ, **nvml_env.env(state_path)}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environ,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


LIST_MIG = """
import json, pynvml as n
n.nvmlInit()
out = {"driver": n.nvmlSystemGetDriverVersion(), "gpus": []}
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    mig = []
    if n.nvmlDeviceGetMigMode(h)[0]:
        for k in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                m = n.nvmlDeviceGetMigDeviceHandleByIndex(h, k)
            except n.NVMLError:
                continue
            mig.append([n.nvmlDeviceGetGpuInstanceId(m), n.nvmlDeviceGetComputeInstanceId(m)])
    out["gpus"].append({"minor": n.nvmlDeviceGetMinorNumber(h), "mig": sorted(mig)})
print(json.dumps(out))
"""

MAKE_1G = """
import json, os, pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
profile = n.nvmlDeviceGetGpuInstanceProfileInfo(h, n.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
gi = n.nvmlDeviceCreateGpuInstance(h, profile.id)
info = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(
    gi, n.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
ci = n.nvmlGpuInstanceCreateComputeInstance(gi, info.id)
"""
CREATE_1G = MAKE_1G + """
print(json.dumps([n.nvmlGpuInstanceGetInfo(gi).id, n.nvmlComputeInstanceGetInfo(ci).id]))
"""

DESTROY = """
import json, pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
gi = n.nvmlDeviceGetGpuInstanceById(h, {gi})
n.nvmlComputeInstanceDestroy(n.nvmlGpuInstanceGetComputeInstanceById(gi, {ci}))
n.nvmlGpuInstanceDestroy(gi)
print(json.dumps("ok"))
"""


def facts_as_nvml_sees(facts: nh.HostFacts) -> dict[str, object]:
    return {"driver": facts.driver_version,
            "gpus": [{"minor": g.minor, "mig": sorted([i.gi, c] for i in g.instances
                                                      for c in i.cis)} for g in facts.gpus]}


def test_the_facts_are_what_nvml_reports(node_state: Path) -> None:
    facts = nh.read_facts(node_state)
    assert facts_as_nvml_sees(facts) == pynvml(node_state, LIST_MIG)
    assert facts.driver_version == "580.95.05"
    assert [g.mig_enabled for g in facts.gpus] == [True, False, False, True]
    assert len(facts.gpus[0].instances) == 2


def test_caps_minors_follow_the_drivers_numbering() -> None:
    # /proc/driver/nvidia-caps/mig-minors of the real driver: gpu0/gi0/access 3,
    # gpu0/gi0/ci0/access 4, gpu0/gi1/access 12, gpu1/gi0/access 138.
    assert nh.gi_minor(0, 0) == 3
    assert nh.ci_minor(0, 0, 0) == 4
    assert nh.ci_minor(0, 0, 7) == 11
    assert nh.gi_minor(0, 1) == 12
    assert nh.gi_minor(1, 0) == 138
    assert nh.access_text(12).splitlines() == [
        "DeviceFileMinor: 12", "DeviceFileMode: 292", "DeviceFileModify: 1"]


def test_proc_devices_gains_the_missing_nvidia_majors_only() -> None:
    majors = nh.choose_majors(HOST_DEVICES)
    assert majors.uvm == 509  # the host's own
    assert majors.caps == 511  # the highest free dynamic major
    text = nh.render_proc_devices(HOST_DEVICES, majors)
    chars = nh.used_char_majors(text)
    assert chars == {"mem": 1, "tty": 4, "nvidia-frontend": 195, "nvidia-uvm": 509,
                     "nvidia-caps": 511}
    assert text.count("nvidia-frontend") == 1
    # The block section is kept, after the blank line that ends the character one.
    assert text.endswith("511 nvidia-caps\n\nBlock devices:\n  7 loop\n259 blkext\n")


@needs_root
def test_build_writes_the_driver_root_and_proc_files(node_state: Path, tmp_path: Path) -> None:
    host = nh.HostDir(tmp_path / "nvhost")
    facts = nh.read_facts(node_state)
    library = nvml_env.library_path()
    majors = nh.build(host, facts, library=library, nvidia_smi=nvidiasmi.path(),
                      host_proc_devices=HOST_DEVICES)
    versioned = host.lib_dir / "libnvidia-ml.so.580.95.05"
    assert versioned.read_bytes() == library.read_bytes()
    # The plugin resolves libnvidia-ml.so.1 and takes the directory as the driver's: it
    # must stay inside the root.
    assert (host.lib_dir / "libnvidia-ml.so.1").resolve() == versioned.resolve()
    # NVIDIA's v25.12.0 refuses every CDI spec without a libcuda.so.* beside it (issue 27).
    assert (host.lib_dir / "libcuda.so.580.95.05").is_file()
    smi = host.bin_dir / "nvidia-smi"
    assert os.access(smi, os.X_OK)
    listing = subprocess.run([str(smi), "-L"], env={**os.environ, **nvml_env.env(node_state)},
                             capture_output=True, text=True, timeout=60, check=True).stdout
    assert listing.count("GPU ") == 4
    assert subprocess.run([str(host.cdi_hook), "update-ldcache"], check=False,
                          timeout=30).returncode == 0
    nodes = {p.name: (os.major(p.lstat().st_rdev), os.minor(p.lstat().st_rdev))
             for p in host.dev_dir.iterdir() if stat.S_ISCHR(p.lstat().st_mode)}
    assert nodes == {"nvidia0": (195, 0), "nvidia1": (195, 1), "nvidia2": (195, 2),
                     "nvidia3": (195, 3), "nvidiactl": (195, 255), "nvidia-uvm": (majors.uvm, 0),
                     "nvidia-uvm-tools": (majors.uvm, 1)}
    assert nh.used_char_majors(host.proc_devices.read_text())["nvidia-caps"] == majors.caps
    caps = sorted(p.relative_to(host.capabilities).as_posix()
                  for p in host.capabilities.rglob("access"))
    gis = [i.gi for i in facts.gpus[0].instances]
    assert caps == sorted([f"gpu{m}/mig/gi{i.gi}/{sub}access" for m in (0, 3)
                           for i in facts.gpus[m].instances for sub in ("", "ci0/")])
    first = host.capabilities / f"gpu0/mig/gi{gis[0]}/access"
    assert f"DeviceFileMinor: {nh.gi_minor(0, gis[0])}\n" in first.read_text()
    # Idempotent: a second build changes nothing and fails on nothing.
    before = {p: p.lstat().st_mtime_ns for p in host.root.rglob("*")}
    nh.build(host, facts, library=library, nvidia_smi=nvidiasmi.path(),
             host_proc_devices=HOST_DEVICES)
    assert {p for p in before if p.is_file() and not p.is_symlink()
            and p.lstat().st_mtime_ns != before[p] and p.name != "devices"} == set()


def test_capability_files_come_and_go_with_mig_instances(node_state: Path,
                                                        tmp_path: Path) -> None:
    host = nh.HostDir(tmp_path / "nvhost")
    nh.sync_capabilities(host, nh.read_facts(node_state))
    before = nh.read_generation(node_state)
    made_ids = pynvml(node_state, CREATE_1G)
    assert isinstance(made_ids, list)
    gi, ci = int(made_ids[0]), int(made_ids[1])
    assert nh.read_generation(node_state) != before  # what pluginhost polls
    assert nh.sync_capabilities(host, nh.read_facts(node_state))
    made = host.capabilities / f"gpu0/mig/gi{gi}/ci{ci}/access"
    assert made.read_text() == nh.access_text(nh.ci_minor(0, gi, ci))
    assert (host.capabilities / f"gpu0/mig/gi{gi}/access").is_file()
    assert not nh.sync_capabilities(host, nh.read_facts(node_state))  # nothing new
    pynvml(node_state, DESTROY.format(gi=gi, ci=ci))
    assert nh.sync_capabilities(host, nh.read_facts(node_state))
    assert not (host.capabilities / f"gpu0/mig/gi{gi}").exists()
    # The topology's own instances stay.
    assert len(list(host.capabilities.rglob("access"))) == 2 * (2 + 4)


@needs_root
@pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux unshare is not installed")
def test_the_plugin_sees_the_files_in_its_namespace_and_the_host_does_not(
        node_state: Path, tmp_path: Path) -> None:
    host_devices = Path("/proc/devices").read_text()
    gis = [i.gi for i in nh.read_facts(node_state).gpus[0].instances]
    probe = (f"cat /proc/driver/nvidia/capabilities/gpu0/mig/gi{gis[0]}/access; "
             "grep -c nvidia-caps /proc/devices")
    argv = wrapper_argv(tmp_path / "nvhost", node_state, ["sh", "-c", probe])
    proc = subprocess.run(argv, env={**os.environ, **nvml_env.env(node_state)},
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"DeviceFileMinor: {nh.gi_minor(0, gis[0])}" in proc.stdout
    assert proc.stdout.strip().endswith("1")
    # Private to the plugin's namespace: the host's /proc is as it was.
    assert Path("/proc/devices").read_text() == host_devices
    assert not Path("/proc/driver/nvidia/capabilities").exists() or "nvidia-caps" in host_devices


@needs_root
@pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux unshare is not installed")
def test_the_running_plugin_sees_an_instance_made_after_it_started(node_state: Path,
                                                                  tmp_path: Path) -> None:
    # The "plugin" waits until the new instance's two access files join the topology's 12 (two
    # per instance) in its namespace, then lists them. Not "more than 12": NVML makes the GPU
    # instance and the compute instance in two calls, and pluginhost may sync between them.
    caps = "/proc/driver/nvidia/capabilities"
    probe = (f"until [ $(find {caps} -name access | wc -l) -ge 14 ]; do sleep 0.05; done; "
             f"find {caps} -name access | sort")
    argv = wrapper_argv(tmp_path / "nvhost", node_state, ["sh", "-c", probe])
    wrapper = subprocess.Popen(argv, env={**os.environ, **nvml_env.env(node_state)},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)  # its group: the plugin goes with it
    try:
        # Only once the host is built and bound: from here only pluginhost's polling adds files.
        assert wrapper.stdout is not None
        assert "driver root" in wrapper.stdout.readline()
        made_ids = pynvml(node_state, CREATE_1G)
        assert isinstance(made_ids, list)
        out, _ = wrapper.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(wrapper.pid, signal.SIGKILL)
        wrapper.wait()
    assert wrapper.returncode == 0, out
    gi, ci = made_ids
    assert f"{caps}/gpu0/mig/gi{gi}/ci{ci}/access" in out.splitlines(), out


# Where each GPU sits, read the way NVIDIA's plugin reads it: the PCI bus id from NVML, then
# /sys as k8s.io/dynamic-resource-allocation's deviceattribute (the link's text) and go-nvlib's
# nvpci (numa_node, resource) read it, without FAKEGPU_SYSFS.
WHERE_GPUS_SIT = """
import json, os, pynvml as n
os.environ.pop("FAKEGPU_SYSFS", None)
n.nvmlInit()
out = {}
for i in range(n.nvmlDeviceGetCount()):
    bus = n.nvmlDeviceGetPciInfo(n.nvmlDeviceGetHandleByIndex(i)).busId
    bus = (bus.decode() if isinstance(bus, bytes) else bus)[-12:].lower()
    link = os.path.join("/sys/bus/pci/devices", bus)
    target = os.readlink(link)
    read = lambda name: open(os.path.join(link, name)).read().strip()
    out[bus] = {"target": target, "numa": read("numa_node"), "vendor": read("vendor"),
                "bars": [l.split() for l in read("resource").splitlines()],
                "system": os.path.isdir("/sys/devices/system/cpu")}
print(json.dumps(out))
"""


@needs_root
@pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux unshare is not installed")
def test_the_plugin_reads_where_each_gpu_sits_from_sys(node_state: Path, tmp_path: Path) -> None:
    """NVIDIA's plugin publishes pcieRoot and numaNode from /sys, not from NVML: in its
    namespace /sys shows the node's PCIe tree, the same roots and NUMA nodes fakegpu's own
    plugin publishes from the view; the host's /sys is untouched."""
    from fakegpu.kubeletplugin import pcie
    from fakegpu.nvml import sysfs

    host_links = sorted(os.listdir("/sys/bus/pci/devices"))
    script = tmp_path / "where.py"
    script.write_text(WHERE_GPUS_SIT)
    argv = wrapper_argv(tmp_path / "nvhost", node_state, [sys.executable, str(script)])
    proc = subprocess.run(argv, env={**os.environ, **nvml_env.env(node_state)},
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    view = str(sysfs.path_for(node_state))
    gpus = load_topology(FIXTURE).node(NODE).gpus
    assert len(seen) == len(gpus)
    for bus, found in seen.items():
        parts = found["target"].split("/")
        # deviceattribute: relative to bus/pci/devices, into devices/pci<root>/.../<bus id>
        assert parts[:4] == ["..", "..", "..", "devices"] and parts[-1] == bus, found
        assert parts[4] == pcie.pcie_root(bus, sysfs.NVIDIA_VENDOR, view) != ""
        assert int(found["numa"]) == pcie.numa_node(bus, sysfs.NVIDIA_VENDOR, view)
        assert found["vendor"] == sysfs.NVIDIA_VENDOR
        gpu = next(g for g in gpus if sysfs.bus_id(g.pci) == bus)
        start, end, _ = (int(v, 16) for v in found["bars"][1])
        assert len(found["bars"]) == 13 and end - start + 1 >= gpu.product.memory_mib << 20
        assert found["system"]  # the host's own devices stay in view
    assert sorted(os.listdir("/sys/bus/pci/devices")) == host_links


CREATE_CHECK_DESTROY = MAKE_1G + """
caps = os.environ.get("CAPS_ROOT") or os.environ["FAKEGPU_NVML_CAPS_DIR"]
g, c = n.nvmlGpuInstanceGetInfo(gi).id, n.nvmlComputeInstanceGetInfo(ci).id
files = {}
for rel in (f"gpu0/mig/gi{g}/access", f"gpu0/mig/gi{g}/ci{c}/access"):
    path = os.path.join(caps, rel)
    # read at once, as NVIDIA's plugin does
    files[rel] = open(path).read() if os.path.exists(path) else None
n.nvmlComputeInstanceDestroy(ci)
n.nvmlGpuInstanceDestroy(gi)
gone = not os.path.exists(os.path.join(caps, f"gpu0/mig/gi{g}"))
print(json.dumps({"gi": g, "ci": c, "files": files, "gone": gone}))
"""


def test_the_library_writes_an_instances_files_before_its_create_returns(
        node_state: Path, tmp_path: Path) -> None:
    """NVIDIA's plugin (dynamic MIG) reads the access files the moment its creates return: the
    library writes them then, with the minors the host renderer gives, and removes them with
    the destroy (no poller involved here)."""
    caps = tmp_path / "capabilities"
    environ = {**os.environ, **nvml_env.env(node_state), "FAKEGPU_NVML_CAPS_DIR": str(caps)}
    proc = subprocess.run([sys.executable, "-c", CREATE_CHECK_DESTROY], env=environ,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    gi, ci = seen["gi"], seen["ci"]
    assert seen["files"] == {f"gpu0/mig/gi{gi}/access": nh.access_text(nh.gi_minor(0, gi)),
                             f"gpu0/mig/gi{gi}/ci{ci}/access":
                                 nh.access_text(nh.ci_minor(0, gi, ci))}
    assert seen["gone"]
    made = tmp_path / "made"  # the same instance rendered by the host's poller: same files
    nh.sync_capabilities(nh.HostDir(made), nh.HostFacts(
        driver_version="", gpus=(nh.HostGpu(0, True, (nh.MigInstance(gi, (ci,)),)),)))
    assert stat.S_IMODE((made / "proc/driver/nvidia/capabilities" /
                         f"gpu0/mig/gi{gi}/access").stat().st_mode) == nh.CAP_MODE


@needs_root
@pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux unshare is not installed")
def test_the_plugins_own_create_finds_its_files_in_its_namespace(node_state: Path,
                                                                 tmp_path: Path) -> None:
    """Under pluginhost, as NVIDIA's plugin runs: create, read /proc/driver/... at once."""
    script = tmp_path / "plugin.py"
    script.write_text(CREATE_CHECK_DESTROY)
    argv = wrapper_argv(tmp_path / "nvhost", node_state, [sys.executable, str(script)])
    environ = {**os.environ, **nvml_env.env(node_state),
               "CAPS_ROOT": "/proc/driver/nvidia/capabilities"}
    proc = subprocess.run(argv, env=environ, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    gi, ci = seen["gi"], seen["ci"]
    assert seen["files"][f"gpu0/mig/gi{gi}/ci{ci}/access"] == \
        nh.access_text(nh.ci_minor(0, gi, ci))
    assert seen["gone"]


def _container_root(tmp_path: Path, node_state: Path, facts: nh.HostFacts,
                    nodes: dict[str, tuple[int, int]]) -> Path:
    """A directory laid out as a container NVIDIA's plugin prepared: the driver files its
    toolkit mounts (here: the state among the GSP firmware, nvidia-smi) and the device nodes
    of the claim; nothing names the state in the environment."""
    host = nh.HostDir(tmp_path / "nvhost")
    nh.build(host, facts, library=nvml_env.library_path(), nvidia_smi=nvidiasmi.path(),
             host_proc_devices=HOST_DEVICES, state=node_state)
    root = tmp_path / "container"
    firmware = nh.state_in_firmware(host, facts)
    inside = root / firmware.relative_to(host.driver_root)
    inside.parent.mkdir(parents=True)
    os.link(firmware, inside)  # a bind mount of the same file, for chroot
    shutil.copy(host.bin_dir / "nvidia-smi", root / "nvidia-smi")
    for name, (major, minor) in nodes.items():
        (root / "dev" / name).parent.mkdir(parents=True, exist_ok=True)
        os.mknod(root / "dev" / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    return root


def _smi_in(root: Path, *args: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_")}
    proc = subprocess.run(["chroot", str(root), "/nvidia-smi", *args], env=environ,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.splitlines()


@needs_root
def test_nvml_in_a_container_of_nvidias_plugin_sees_its_devices_only(node_state: Path,
                                                                      tmp_path: Path) -> None:
    """No FAKEGPU_NVML_STATE in such a container (NVIDIA's CDI spec sets none): the library
    finds the node's state where the toolkit mounts the driver's firmware, and shows the GPUs
    and MIG devices whose device nodes the container was given, as the real driver does."""
    facts = nh.read_facts(node_state)
    uuids = [g.uuid for g in read_node_gpus(node_state)]
    whole = _container_root(tmp_path / "whole", node_state, facts,
                            {"nvidia2": (nh.NVIDIA_MAJOR, 2),
                             "nvidiactl": (nh.NVIDIA_MAJOR, nh.NVIDIACTL_MINOR)})
    assert _smi_in(whole, "-L") == [f"GPU 0: NVIDIA A100-SXM4-40GB (UUID: {uuids[2]})"]
    gi = facts.gpus[0].instances[0]
    mig = _container_root(tmp_path / "mig", node_state, facts,
                          {"nvidia0": (nh.NVIDIA_MAJOR, 0),
                           f"nvidia-caps/nvidia-cap{nh.gi_minor(0, gi.gi)}": (509, 1),
                           f"nvidia-caps/nvidia-cap{nh.ci_minor(0, gi.gi, gi.cis[0])}":
                               (509, 2)})
    listed = _smi_in(mig, "-L")
    assert listed[0] == f"GPU 0: NVIDIA A100-SXM4-40GB (UUID: {uuids[0]})"
    assert len(listed) == 2 and listed[1].lstrip().startswith("MIG "), listed
    # No device node: no GPU, as in a container given none (the real nvidia-smi: exit 6).
    nothing = _container_root(tmp_path / "none", node_state, facts, {})
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_")}
    proc = subprocess.run(["chroot", str(nothing), "/nvidia-smi", "-L"], env=environ,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.stdout.strip() == "", proc.stdout


def _mps_control(host: nh.HostDir, tmp_path: Path, *args: str, stdin: str = ""
                 ) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "pipe"),
           "CUDA_MPS_LOG_DIRECTORY": str(tmp_path / "log")}
    return subprocess.run([str(host.mps_control), *args], input=stdin, env=env,
                          capture_output=True, text=True, timeout=30, check=False)


def test_the_mps_control_program_starts_its_daemon_and_takes_commands(
        node_state: Path, tmp_path: Path) -> None:
    """NVIDIA's MPS daemon Deployment runs ``nvidia-cuda-mps-control -d`` from the driver root,
    then pipes its settings in, and follows control.log: the fake answers each of those."""
    host = nh.HostDir(tmp_path / "nvhost")
    nh.build(host, nh.read_facts(node_state), library=nvml_env.library_path(),
             nvidia_smi=nvidiasmi.path(), host_proc_devices=HOST_DEVICES)
    refused = _mps_control(host, tmp_path, stdin="get_server_list\n")
    assert refused.returncode == 1 and "Cannot find MPS control daemon" in refused.stderr
    assert _mps_control(host, tmp_path, "-d").returncode == 0
    assert stat.S_ISFIFO((tmp_path / "pipe" / "control").stat().st_mode)
    sent = _mps_control(host, tmp_path, stdin="set_default_active_thread_percentage 50\n")
    assert sent.returncode == 0, sent.stderr
    log = (tmp_path / "log" / "control.log").read_text().splitlines()
    assert "Starting control daemon using socket" in log[0]
    assert log[1].endswith("] Cmd:set_default_active_thread_percentage 50")
    assert _mps_control(host, tmp_path, "-x").returncode == 1


@needs_root
@pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux unshare is not installed")
def test_the_plugins_templates_are_at_slash_templates_in_its_namespace_only(
        node_state: Path, tmp_path: Path) -> None:
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "mps-control-daemon.tmpl.yaml").write_text("kind: Deployment\n")
    argv = wrapper_argv(tmp_path / "nvhost", node_state,
                        ["cat", "/templates/mps-control-daemon.tmpl.yaml"], templates=templates)
    proc = subprocess.run(argv, env={**os.environ, **nvml_env.env(node_state)},
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("kind: Deployment")
    assert not Path("/templates/mps-control-daemon.tmpl.yaml").exists()
