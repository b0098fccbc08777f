"""The two container images a fakegpu cluster needs, built here because nothing can be pulled.

- the sandbox ("pause") image: ``pause.c`` compiled statically, named PAUSE_IMAGE, the name
  containerd 2.4 and Kubernetes 1.37 default to (so no node needs a pull, ever);
- a workload image with a shell: Debian's ``busybox-static`` (one static binary, fetched
  with ``apt-get download``) and a link per applet (sh, sleep, env, cat, ls, ...), plus
  fakegpu's static ``nvbandwidth`` (``fakegpu.bandwidth.program``) at /usr/bin/nvbandwidth
  and ``podresources`` (``fakegpu.podresources``, the kubelet PodResources client) at
  /usr/bin/podresources.

Archives are cached under ``paths.cache_dir()/images``, named by a fingerprint of their
inputs, so a changed pause.c or a new busybox makes a new archive and a warm cache costs
a stat. ``import_images`` loads archives into a node's containerd with ``ctr``.
"""

from __future__ import annotations

import hashlib
import io
import os
import platform
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from filelock import FileLock
from rich.console import Console

from fakegpu import __version__, fsutil, paths
from fakegpu.cluster.artifacts import oci
from fakegpu.errors import FakegpuError, MissingPrerequisite
from fakegpu.fsutil import atomic_write

# What containerd 2.4's CRI uses as sandbox image by default, and what Kubernetes 1.37
# (kubeadm's PauseVersion) names: configure nodes with this constant, not a literal.
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.2"
WORKLOAD_REPO = "fakegpu.local/workload"
# Bump when the way images are assembled changes: old archives are then not reused.
IMAGE_FORMAT = "1"
CRI_NAMESPACE = "k8s.io"
BUSYBOX_ENV = "FAKEGPU_BUSYBOX_DEB"  # a busybox-static .deb to use instead of apt-get's
_PAUSE_SOURCE = Path(__file__).with_name("pause.c")


@dataclass(frozen=True)
class Images:
    pause_ref: str
    pause_archive: Path
    workload_ref: str
    workload_archive: Path

    @property
    def archives(self) -> tuple[Path, Path]:
        return (self.pause_archive, self.workload_archive)


def workload_ref() -> str:
    # Versioned by fakegpu, never "latest": kubelets would then try to pull it.
    return f"{WORKLOAD_REPO}:{__version__}"


def images_dir() -> Path:
    return paths.cache_dir() / "images"


def host_arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def ensure_images(console: Console | None = None) -> Images:
    """Build (or reuse) both image archives; return their names and paths."""
    console = console or Console(stderr=True)
    root = images_dir()
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / ".lock")):
        pause = _ensure_pause(root, console)
        workload = _ensure_workload(root, console)
    return Images(PAUSE_IMAGE, pause, workload_ref(), workload)


def _say(console: Console, message: str) -> None:
    console.print(message, soft_wrap=True, highlight=False, markup=False)


def _fingerprint(*parts: bytes) -> str:
    digest = hashlib.sha256(IMAGE_FORMAT.encode())
    for part in parts:
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:16]


# --- pause ---------------------------------------------------------------------------------

def compile_pause(out: Path) -> None:
    """Compile pause.c into a static, stripped executable at ``out``."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise MissingPrerequisite(
            "building the pause image needs gcc: apt-get install gcc libc6-dev"
        )
    cmd = [cc, "-static", "-O2", "-s", "-Wall", "-Werror", "-o", str(out), str(_PAUSE_SOURCE)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        hint = " (static linking needs libc.a: apt-get install libc6-dev)" if (
            "-lc" in proc.stderr) else ""
        raise MissingPrerequisite(f"`{' '.join(cmd)}` failed: {last}{hint}")


def pause_archive_bytes(pause_binary: bytes, arch: str) -> bytes:
    layer = oci.layer_tar([oci.file("pause", pause_binary, 0o755)])
    # 65535 like upstream's pause: the sandbox never needs root inside.
    config = oci.ImageConfig(entrypoint=("/pause",), user="65535:65535", env=())
    return oci.build_archive(PAUSE_IMAGE, [layer], config, arch=arch)


def _ensure_pause(root: Path, console: Console) -> Path:
    source = _PAUSE_SOURCE.read_bytes()
    archive = root / f"pause-{_fingerprint(source, host_arch().encode())}.tar"
    if archive.is_file():
        return archive
    _say(console, f"building image {PAUSE_IMAGE} from {_PAUSE_SOURCE.name}")
    with tempfile.TemporaryDirectory() as work:
        binary = Path(work) / "pause"
        compile_pause(binary)
        atomic_write(archive, pause_archive_bytes(binary.read_bytes(), host_arch()))
    return archive


# --- workload ------------------------------------------------------------------------------

def busybox_deb(root: Path, console: Console) -> Path:
    """The busybox-static package: FAKEGPU_BUSYBOX_DEB, a cached one, or apt-get download."""
    if os.environ.get(BUSYBOX_ENV):
        given = Path(os.environ[BUSYBOX_ENV])
        if not given.is_file():
            raise FakegpuError(f"{BUSYBOX_ENV}={given} is not a file")
        return given
    debs = root / "debs"
    found = sorted(debs.glob("busybox-static_*.deb"))
    if found:
        return found[-1]
    apt = shutil.which("apt-get")
    if apt is None:
        raise MissingPrerequisite(
            "the workload image is made from Debian's busybox-static package: this host has "
            f"no apt-get; download the .deb and name it with {BUSYBOX_ENV}"
        )
    _say(console, "fetching Debian's busybox-static with apt-get download")
    debs.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=debs) as work:
        # --allow-unauthenticated is NOT used: apt verifies the package as it would install it.
        proc = subprocess.run([apt, "download", "busybox-static"], cwd=work,
                              capture_output=True, text=True, check=False)
        got = sorted(Path(work).glob("busybox-static_*.deb"))
        if proc.returncode != 0 or not got:
            last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise MissingPrerequisite(
                f"`apt-get download busybox-static` failed: {last} (try `apt-get update`)"
            )
        final = debs / got[0].name.replace("%3a", "_")
        fsutil.move_into_place(got[0], final)
    return final


def busybox_from_deb(deb: Path) -> bytes:
    """The /bin/busybox executable inside a busybox-static .deb (read with dpkg-deb)."""
    dpkg = shutil.which("dpkg-deb")
    if dpkg is None:
        raise MissingPrerequisite("reading the busybox-static package needs dpkg-deb")
    proc = subprocess.run([dpkg, "--fsys-tarfile", str(deb)], capture_output=True, check=False)
    if proc.returncode != 0:
        raise FakegpuError(f"dpkg-deb cannot read {deb}: {proc.stderr.decode(errors='replace')}")
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        for name in ("./bin/busybox", "bin/busybox", "./usr/bin/busybox"):
            try:
                member = tar.extractfile(name)
            except KeyError:
                continue
            if member is not None:
                return member.read()
    raise FakegpuError(f"{deb} holds no bin/busybox")


def busybox_applets(busybox: Path) -> list[str]:
    """The applets this busybox provides (it must run on this host: same architecture)."""
    proc = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=False)
    applets = sorted(a for a in proc.stdout.split() if a and "/" not in a and a != "busybox")
    if proc.returncode != 0 or "sh" not in applets:
        raise FakegpuError(f"`{busybox} --list` failed or lists no sh: {proc.stderr.strip()}")
    return applets


def workload_archive_bytes(busybox: bytes, applets: Sequence[str], arch: str, ref: str,
                           tools: Sequence[tuple[str, bytes]] = ()) -> bytes:
    """``tools``: (path in the image, static executable), e.g. the bandwidth program."""
    entries = [oci.file("bin/busybox", busybox, 0o755)]
    entries += [oci.symlink(f"bin/{a}", "busybox") for a in applets]
    entries += [
        oci.symlink("usr/bin/env", "/bin/busybox"),  # for `#!/usr/bin/env sh` scripts
        oci.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n"
                 b"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"),
        oci.file("etc/group", b"root:x:0:\nnogroup:x:65534:\n"),
        oci.directory("root", 0o700),
        oci.directory("tmp", 0o1777),
    ]
    entries += [oci.file(path.lstrip("/"), data, 0o755) for path, data in tools]
    config = oci.ImageConfig(cmd=("sh",))
    return oci.build_archive(ref, [oci.layer_tar(entries)], config, arch=arch)


def workload_tools() -> list[tuple[str, bytes]]:
    """Static programs the workload image carries besides busybox: fakegpu's simulated
    nvbandwidth (issue 12's bandwidth job) and the kubelet PodResources client
    (fakegpu.podresources), built from this tree."""
    from fakegpu import podresources
    from fakegpu.bandwidth import program

    return [(program.IN_IMAGE, program.path().read_bytes()),
            (podresources.IN_IMAGE, podresources.path().read_bytes())]


def _ensure_workload(root: Path, console: Console) -> Path:
    deb = busybox_deb(root, console)
    ref = workload_ref()
    tools = workload_tools()
    fingerprint = _fingerprint(deb.read_bytes(), ref.encode(), host_arch().encode(),
                               *(path.encode() + data for path, data in tools))
    archive = root / f"workload-{fingerprint}.tar"
    if archive.is_file():
        return archive
    _say(console, f"building image {ref} from {deb.name}")
    busybox = busybox_from_deb(deb)
    with tempfile.TemporaryDirectory() as work:
        exe = Path(work) / "busybox"
        exe.write_bytes(busybox)
        exe.chmod(0o755)
        applets = busybox_applets(exe)
    atomic_write(archive, workload_archive_bytes(busybox, applets, host_arch(), ref, tools))
    return archive


# --- import into a node's containerd -------------------------------------------------------

class HasCtr(Protocol):
    @property
    def ctr(self) -> Path: ...


def import_images(
    binaries: HasCtr,
    containerd_address: str | Path,
    archives: Sequence[Path],
    *,
    namespace: str = CRI_NAMESPACE,
) -> None:
    """Import image archives into the containerd at ``containerd_address`` (its socket).

    The CRI only sees images in namespace k8s.io; ``ctr`` also unpacks them for the default
    snapshotter, so the first pod needs no work.
    """
    for archive in archives:
        cmd = [str(binaries.ctr), "--address", str(containerd_address), "-n", namespace,
               "images", "import", "--platform", f"linux/{host_arch()}", str(archive)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
        if proc.returncode != 0:
            out = (proc.stderr or proc.stdout).strip().splitlines() or ["(no output)"]
            raise FakegpuError(f"`{' '.join(cmd)}` failed: {out[-1]}")
