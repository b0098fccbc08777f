"""The host's inotify limits, which every node of either provider draws on.

The limits are per user and host-wide: at the usual default of 128 instances a few nodes use
them up, and containerd's CRI plugin and the kubelets fail obscurely. Both providers check
them before a bring-up (kind's nodes are containers of the same user).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fakegpu.errors import MissingPrerequisite

INOTIFY_SYSCTLS = Path("/proc/sys/fs/inotify")
# Measured on a 4-node cluster on this kind of host: per node the kubelet holds 6 inotify
# instances and ~700 watches before any pod (cAdvisor watches each cgroup it tracks, so watches
# grow with pods), containerd 2 instances; the plugin none; the control plane ~10 instances.
# Rounded up generously: running out shows up late and obscurely (see FATAL_LOG_LINES).
INOTIFY_INSTANCES_PER_NODE = 16
INOTIFY_INSTANCES_CONTROL_PLANE = 24
INOTIFY_WATCHES_PER_NODE = 8192
INOTIFY_WATCHES_CONTROL_PLANE = 1024
# What kind's "known issues" page recommends; raising at least that far leaves room for the
# next cluster (or a kind one) on the same host.
INOTIFY_RECOMMENDED = {"max_user_instances": 512, "max_user_watches": 524288}


@dataclass(frozen=True)
class InotifyUse:
    instances: int
    watches: int


def inotify_in_use(uid: int = 0, proc: Path = Path("/proc")) -> InotifyUse:
    """inotify instances and watches held by processes of effective user ``uid``.

    The kernel counts both per user (the effective uid of the creator). A descriptor inherited
    by a child is seen twice: an overestimate, which is the safe side.
    """
    instances = watches = 0
    for pid in os.listdir(proc):
        if not pid.isdigit():
            continue
        try:
            status = (proc / pid / "status").read_text()
            euid = next(int(line.split()[2]) for line in status.splitlines()
                        if line.startswith("Uid:"))
            if euid != uid:
                continue
            fds = os.listdir(proc / pid / "fd")
        except (OSError, StopIteration, ValueError, IndexError):
            continue  # gone, or not ours to read
        for fd in fds:
            try:
                if os.readlink(proc / pid / "fd" / fd) != "anon_inode:inotify":
                    continue
                info = (proc / pid / "fdinfo" / fd).read_text()
            except OSError:
                continue
            instances += 1
            watches += sum(1 for line in info.splitlines() if line.startswith("inotify wd:"))
    return InotifyUse(instances, watches)


def inotify_need(nodes: int, in_use: InotifyUse) -> dict[str, int]:
    """The fs.inotify limits a cluster of ``nodes`` workers needs, on top of what is in use."""
    return {
        "max_user_instances": in_use.instances + INOTIFY_INSTANCES_CONTROL_PLANE
        + INOTIFY_INSTANCES_PER_NODE * nodes,
        "max_user_watches": in_use.watches + INOTIFY_WATCHES_CONTROL_PLANE
        + INOTIFY_WATCHES_PER_NODE * nodes,
    }


def ensure_inotify(need: Mapping[str, int], sysctls: Path = INOTIFY_SYSCTLS) -> list[str]:
    """Raise each fs.inotify.<name> below ``need[name]``; return one line per change.

    Raised to the larger of the need and kind's recommendation. A limit that cannot be raised
    (not root, read-only /proc/sys in a container) is a MissingPrerequisite naming the sysctl
    and the value: without it containerd loses its CRI plugin and kubelets exit.
    """
    changed = []
    for name, want in need.items():
        path = sysctls / name
        try:
            have = int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError) as err:
            raise MissingPrerequisite(f"cannot read fs.inotify.{name} ({path}): {err}") from err
        if have >= want:
            continue
        new = max(want, INOTIFY_RECOMMENDED.get(name, 0))
        try:
            path.write_text(f"{new}\n")
        except OSError as err:
            raise MissingPrerequisite(
                f"fs.inotify.{name} is {have}, this cluster needs at least {want} and it "
                f"cannot be raised here ({err.strerror or err}): run `sysctl -w "
                f"fs.inotify.{name}={new}` as root on the host"
            ) from err
        changed.append(f"raised host setting fs.inotify.{name} from {have} to {new} "
                       f"(this cluster needs about {want}; kind recommends the same)")
    return changed

