"""Debian root file systems made with debootstrap, cached as tars, imported into Docker.

Nothing can be pulled from a registry here, but Debian's package mirror is reachable, so the
bases every image needs are assembled locally: ``base`` (small: Python for the plugin, iptables
and conntrack for kube-proxy) and ``node`` (systemd as PID 1, what kind's node containers run).
A rootfs is cached under ``paths.cache_dir()/kind/rootfs`` keyed by its package list, so it is
made once per machine; the tar is normalized (sorted, mtimes clamped) so equal package sets give
equal image ids on import.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from fakegpu import fsutil, hostpkgs, paths
from fakegpu.cluster.process import CommandError, run
from fakegpu.errors import FakegpuError, MissingPrerequisite

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"


@dataclass(frozen=True)
class Rootfs:
    name: str  # "base" | "node"
    packages: tuple[str, ...]
    variant: str = "minbase"

    @property
    def key(self) -> str:
        text = f"{SUITE} {self.variant} {' '.join(sorted(self.packages))}"
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def image(self) -> str:
        """The Docker image name an import of this rootfs gets."""
        return f"fakegpu.local/debian-{self.name}:{SUITE}-{self.key}"


BASE = Rootfs("base", (
    "ca-certificates", "python3", "python3-venv", "iptables", "conntrack", "iproute2",
))
NODE = Rootfs("node", (
    # What a kind node's systemd, containerd, kubelet and kubeadm use (mount, nsenter, iptables,
    # conntrack, socat for port-forward, ethtool), plus python3 for the runtime wrapper.
    "systemd", "systemd-sysv", "dbus", "ca-certificates", "iproute2", "iptables", "nftables",
    "conntrack", "ethtool", "socat", "util-linux", "mount", "kmod", "procps", "libseccomp2",
    "python3", "bash", "curl", "less",
))


def cache_root() -> Path:
    return paths.cache_dir() / "kind" / "rootfs"


def tar_path(fs: Rootfs) -> Path:
    return cache_root() / f"{fs.name}-{fs.key}.tar"


def ensure_tar(fs: Rootfs, console: Console | None = None) -> Path:
    """The rootfs as a tar in the cache, running debootstrap when it is not there yet."""
    dest = tar_path(fs)
    if dest.is_file():
        return dest
    console = console or Console(stderr=True)
    if os.geteuid() != 0:
        raise MissingPrerequisite("debootstrap needs root")
    if shutil.which("debootstrap") is None:
        hostpkgs.ensure(("debootstrap",), why="assembling the kind node rootfs", console=console)
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{fs.name}-", dir=dest.parent))
    log = dest.with_suffix(".log")
    try:
        root = work / "root"
        console.print(f"debootstrap {SUITE} ({fs.name}: {len(fs.packages)} extra packages; "
                      f"log {log})")
        with log.open("w") as out:
            res = subprocess.run(
                ["debootstrap", f"--variant={fs.variant}", f"--include={','.join(fs.packages)}",
                 SUITE, str(root), MIRROR],
                stdout=out, stderr=subprocess.STDOUT, check=False)
        if res.returncode != 0:
            raise FakegpuError(f"debootstrap of the {fs.name} rootfs failed; log {log}")
        _trim(root)
        # Clamp mtimes and sort entries: a re-made rootfs of the same packages imports equal.
        tmp = work / "rootfs.tar"
        run(["tar", "--sort=name", "--mtime=@0", "--numeric-owner", "--xattrs",
             "-C", str(root), "-cf", str(tmp), "."], timeout=900)
        fsutil.move_into_place(tmp, dest)
    except CommandError as err:
        raise FakegpuError(f"packing the {fs.name} rootfs failed: {err}") from err
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest


def _trim(root: Path) -> None:
    """Drop what an image never needs: apt lists and caches, docs, man pages, machine id."""
    for rel in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc",
                "usr/share/man", "usr/share/info", "var/log"):
        target = root / rel
        if target.is_dir():
            for child in target.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                elif child.name != "lock":
                    child.unlink()
    # systemd makes a fresh machine id at first boot when the file is empty.
    mid = root / "etc/machine-id"
    if mid.exists():
        mid.write_text("")


def image_present(docker: Path, image: str) -> bool:
    res = subprocess.run([str(docker), "image", "inspect", image], capture_output=True,
                         check=False)
    return res.returncode == 0


def ensure_image(docker: Path, fs: Rootfs, console: Console | None = None) -> str:
    """The rootfs imported into Docker as ``fs.image`` (a no-op when present)."""
    if image_present(docker, fs.image):
        return fs.image
    tar = ensure_tar(fs, console)
    run([str(docker), "import", "--change", "CMD [\"/bin/bash\"]", str(tar), fs.image],
        timeout=900)
    return fs.image
