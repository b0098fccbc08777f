"""Remove host state a cluster leaves behind: mounts, network interfaces, cgroups.

Each function is idempotent and does nothing when there is nothing to remove, so `down` can run
any number of times, after a crash, or before anything was made. Parsers are pure and tested on
sample text; the functions that act take the root paths as arguments so tests can use a tmpdir.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterable
from pathlib import Path

CGROUP_MOUNT = Path("/sys/fs/cgroup")


# --- mounts ------------------------------------------------------------------------------------


def _unescape_mountinfo(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as 3-digit octal (``\\040``)."""
    out = []
    i = 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) + 0 and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_points(mountinfo: str) -> list[str]:
    """Mount points listed in ``/proc/<pid>/mountinfo`` text (field 5)."""
    points = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            points.append(_unescape_mountinfo(fields[4]))
    return points


def mounts_under(mountinfo: str, root: Path) -> list[str]:
    """Mount points at or below ``root``, deepest first (the order to unmount them in)."""
    prefix = str(root).rstrip("/")
    found = {p for p in mount_points(mountinfo) if p == prefix or p.startswith(prefix + "/")}
    return sorted(found, key=lambda p: (p.count("/"), p), reverse=True)


def unmount_under(root: Path, mountinfo_path: Path = Path("/proc/self/mountinfo")) -> list[str]:
    """Lazily unmount everything mounted at or below ``root``; return what was unmounted.

    Lazy (MNT_DETACH) because a dying container may still hold a file open; repeats until
    nothing is left, since one path may carry stacked mounts.
    """
    done: list[str] = []
    for _ in range(10):
        try:
            points = mounts_under(mountinfo_path.read_text(), root)
        except OSError:
            return done
        if not points:
            break
        for p in points:
            res = subprocess.run(["umount", "-l", p], capture_output=True, text=True)
            if res.returncode == 0:
                done.append(p)
    return done


# --- network interfaces ------------------------------------------------------------------------


def links_with_master(ip_link_output: str, master: str) -> list[str]:
    """Interface names enslaved to ``master`` in ``ip -o link show`` output."""
    names = []
    for line in ip_link_output.splitlines():
        parts = line.split()
        if len(parts) < 2 or f" master {master} " not in f" {line} ":
            continue
        names.append(parts[1].rstrip(":").split("@")[0])
    return names


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def delete_links(names: Iterable[str]) -> list[str]:
    """Delete the named interfaces (bridges, dummies) and the veths attached to each bridge."""
    removed: list[str] = []
    for name in names:
        if not link_exists(name):
            continue
        out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
        for veth in links_with_master(out, name):
            if subprocess.run(["ip", "link", "del", veth], capture_output=True).returncode == 0:
                removed.append(veth)
        if subprocess.run(["ip", "link", "del", name], capture_output=True).returncode == 0:
            removed.append(name)
    return removed


# --- cgroups -----------------------------------------------------------------------------------


def cgroup_hierarchies(root: Path = CGROUP_MOUNT) -> list[Path]:
    """Every mounted hierarchy directory under ``root`` (v1 controllers, named, and unified)."""
    if not root.is_dir():
        return []
    if (root / "cgroup.controllers").exists():  # pure cgroup v2 host: one hierarchy
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())


def cgroup_dirs(hierarchy: Path, rel: str) -> list[Path]:
    """``hierarchy/rel`` and everything below it, deepest first."""
    top = hierarchy / rel.strip("/")
    if not top.is_dir():
        return []
    found = [Path(d) for d, _, _ in os.walk(top)]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def remove_cgroup_tree(rel: str, root: Path = CGROUP_MOUNT) -> list[Path]:
    """Kill whatever still runs in ``/<rel>`` in every hierarchy, then rmdir it deepest first."""
    removed: list[Path] = []
    for h in cgroup_hierarchies(root):
        for d in cgroup_dirs(h, rel):
            for pid in _cgroup_pids(d):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        for d in cgroup_dirs(h, rel):
            # rmdir on a cgroup fails while tasks linger for a moment after SIGKILL: retry.
            for _ in range(50):
                try:
                    d.rmdir()
                    removed.append(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    import time

                    time.sleep(0.1)
    return removed


def _cgroup_pids(d: Path) -> list[int]:
    try:
        return [int(x) for x in (d / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def create_cgroup(rel: str, root: Path = CGROUP_MOUNT) -> list[Path]:
    """Create ``/<rel>`` in every hierarchy (the kubelet refuses a cgroupRoot that is missing).

    A new cgroup-v1 cpuset starts with no CPUs and no memory nodes, which makes it unusable:
    copy the parent's values down.
    """
    made = []
    for h in cgroup_hierarchies(root):
        parent = h
        for part in Path(rel.strip("/")).parts:
            d = parent / part
            if not d.exists():
                d.mkdir()
                made.append(d)
                for f in ("cpuset.cpus", "cpuset.mems"):
                    src = parent / f
                    if src.exists():
                        with contextlib.suppress(OSError):
                            (d / f).write_text(src.read_text().strip() or "\n")
            parent = d
    return made
