"""Run another vendor's kubelet plugin on an embedded node, on the host it expects.

``fakegpu cluster up --plugin-bin PATH`` starts, per node::

    unshare --mount -- python -m fakegpu.cluster.embedded.pluginhost
        --host-dir D --state S -- PATH ARGS

In that mount namespace of its own (private propagation: nothing leaks to the host or the
other nodes) this builds the node's NVIDIA host directory from the NVML state
(``nvidiahost``), binds its ``proc/driver`` over ``/proc/driver`` and its ``proc/devices`` over
``/proc/devices``, shows the node's sysfs view of its PCIe tree under ``/sys`` (where the
plugin reads each GPU's PCIe root and NUMA node: ``show_pcie_tree``), binds ``--templates``
at ``/templates`` when given (``show_templates``), starts the plugin as a
child and, while it runs, keeps the MIG capability files current: the plugin's own creates
write them at once (the library, given FAKEGPU_NVML_CAPS_DIR), and for other writers this
polls the state file's generation (a seqlock bumped by every write) and re-syncs when it
moved. A signal to the process group
(``process.terminate``) reaches the plugin too; this exits with the plugin's status.

Nodes without GPUs (no state file) get no host directory: the plugin runs as it is.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from fakegpu.errors import FakegpuError, MissingPrerequisite
from fakegpu.node import nvidiahost as nh

POLL_SECONDS = 0.05  # how late a capability file may follow another process's change
CAPS_ENV = "FAKEGPU_NVML_CAPS_DIR"  # read by the fake library (nvml/csrc/caps.c)
TEMPLATES = Path("/templates")  # where NVIDIA's plugin image keeps its manifest templates


def wrapper_argv(host_dir: Path, state: Path | None, plugin: Sequence[str],
                 templates: Path | None = None) -> list[str]:
    """The command line that runs ``plugin`` under this module in a new mount namespace."""
    own = ["--host-dir", str(host_dir)] + (["--state", str(state)] if state else []) + \
        (["--templates", str(templates)] if templates else [])
    return ["unshare", "--mount", "--propagation", "private", "--", sys.executable, "-m",
            "fakegpu.cluster.embedded.pluginhost", *own, "--", *plugin]


def mount(*args: str | Path) -> None:
    """``mount ARGS`` in this (the plugin's) mount namespace; a failure is one line."""
    res = subprocess.run(["mount", *map(str, args)], capture_output=True, text=True,
                         timeout=30, check=False)
    if res.returncode != 0:
        raise MissingPrerequisite(f"cannot mount {' '.join(map(str, args))} in the plugin's "
                                  f"mount namespace: {res.stderr.strip()}")


def show_pcie_tree(view: Path, stage: Path, sys_root: Path = Path("/sys")) -> None:
    """Show the node's sysfs view of its PCIe tree at ``sys_root``, for this namespace only.

    A plugin that reads where a GPU sits from sysfs (NVIDIA's: the link
    ``/sys/bus/pci/devices/<bus id>`` into ``/sys/devices/pci<root>/...``, and ``numa_node``
    there) must find the fake GPUs' bus ids there. sysfs takes no new directories, so
    ``devices`` becomes a tmpfs holding the host's own entries again (bound back from
    ``stage``: the CPUs, NUMA nodes and virtual devices stay as they were) beside the view's
    root complexes, which replace a host root of the same name; ``bus/pci/devices`` is the
    view's."""
    devices = sys_root / "devices"
    # The root complexes only: the host's CPUs and NUMA nodes (devices/system) stay its own.
    roots = {p.name for p in (view / "devices").iterdir() if p.name.startswith("pci")}
    stage.mkdir(parents=True, exist_ok=True)
    mount("--bind", devices, stage)
    mount("-t", "tmpfs", "-o", "mode=0755", "fakegpu-sysfs-devices", devices)
    for entry in sorted(stage.iterdir()):
        if entry.name in roots:
            continue
        place = devices / entry.name
        if entry.is_dir():
            place.mkdir()
        else:
            place.touch()
        mount("--bind", entry, place)
    for root in sorted(roots):
        (devices / root).mkdir()
        mount("--bind", view / "devices" / root, devices / root)
    mount("--bind", view / "bus" / "pci" / "devices", sys_root / "bus" / "pci" / "devices")
    subprocess.run(["umount", str(stage)], capture_output=True, timeout=30, check=False)


def show_templates(source: Path, target: Path = TEMPLATES) -> None:
    """Bind ``source`` at ``target`` in this namespace: a plugin image's fixed path (NVIDIA's
    ``/templates``). Only the empty mount point is made on the host's root."""
    try:
        target.mkdir(exist_ok=True)
    except OSError as err:
        raise MissingPrerequisite(f"cannot make the mount point {target} for "
                                  f"--plugin-templates: {err.strerror}") from err
    mount("--bind", source, target)


def prepare(host: nh.HostDir, state: Path) -> nh.HostFacts:
    """Build the host directory, bind it over /proc and the node's PCIe tree over /sys (in the
    current mount namespace)."""
    from fakegpu import nvidiasmi
    from fakegpu.nvml import env as nvml_env
    from fakegpu.nvml import sysfs

    facts = nh.read_facts(state)
    real_devices = Path("/proc/devices").read_text()
    nh.build(host, facts, library=nvml_env.library_path(), nvidia_smi=nvidiasmi.path(),
             host_proc_devices=real_devices, state=state)
    mount("--bind", host.proc_driver, "/proc/driver")
    mount("--bind", host.proc_devices, "/proc/devices")
    view = sysfs.path_for(state)
    if view.is_dir():  # a node with a known tree
        show_pcie_tree(view, host.root / "sys-devices")
    return facts


def keep_current(host: nh.HostDir, state: Path, child: subprocess.Popen[bytes],
                 seen: tuple[int, int]) -> int:
    """Re-sync the capability files whenever the state file changes, until ``child`` exits."""
    nh.follow(host, state, seen, lambda: child.poll() is None,
              lambda text: print(f"fakegpu pluginhost: {text}", flush=True), POLL_SECONDS)
    return int(child.wait())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fakegpu.cluster.embedded.pluginhost")
    parser.add_argument("--host-dir", type=Path, required=True)
    parser.add_argument("--state", type=Path, default=None)
    parser.add_argument("--templates", type=Path, default=None)
    parser.add_argument("plugin", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    plugin = args.plugin[1:] if args.plugin[:1] == ["--"] else args.plugin
    if not plugin:
        parser.error("no plugin command after --")
    host = nh.HostDir(args.host_dir)
    seen = (0, 0)
    if args.templates is not None:
        try:
            show_templates(args.templates)
        except FakegpuError as err:
            print(f"fakegpu pluginhost: {err}", file=sys.stderr, flush=True)
            return err.exit_code
    if args.state is not None and args.state.is_file():
        try:
            facts = prepare(host, args.state)
        except FakegpuError as err:  # one line in the plugin's log, not a traceback
            print(f"fakegpu pluginhost: {err}", file=sys.stderr, flush=True)
            return err.exit_code
        seen = (nh.read_generation(args.state)[0], facts.generation)
        print(f"fakegpu pluginhost: driver root {host.driver_root} (driver "
              f"{facts.driver_version}, {len(facts.gpus)} GPUs)", flush=True)
    # The library writes an instance's capability files as it creates it, as the driver does:
    # NVIDIA's plugin reads them the moment its create returns (dynamic MIG).
    env = dict(os.environ)
    if args.state is not None:
        env[CAPS_ENV] = str(host.capabilities)
    child = subprocess.Popen(plugin, env=env)
    # The group gets terminate()'s signals; the plugin handles them, this waits for it.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    if args.state is None or not args.state.is_file():
        return child.wait()
    return keep_current(host, args.state, child, seen)


if __name__ == "__main__":
    sys.exit(main())
