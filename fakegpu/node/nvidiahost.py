"""The host NVIDIA's gpu-kubelet-plugin expects, built from a node's fake NVML state.

NVIDIA's plugin (NVIDIA/k8s-dra-driver-gpu, ``cmd/gpu-kubelet-plugin``) does not stop at NVML:

- it finds ``libnvidia-ml.so.1`` and ``nvidia-smi`` under ``--nvidia-driver-root``, and the
  container toolkit it embeds looks for ``libnvidia-ml.so.<driver version>`` in that directory
  to put the driver's libraries into CDI specs (v25.12.0's also needs a ``libcuda.so.*``
  there, or it writes no spec at all);
- its CDI specs name ``dev/nvidia<minor>``, ``nvidiactl``, ``nvidia-uvm`` and
  ``nvidia-uvm-tools`` under the driver root's ``dev/`` (it stats them for their numbers);
- for a MIG device it reads ``/proc/driver/nvidia/capabilities/gpu<m>/mig/gi<g>/access`` and
  ``.../ci<c>/access`` (the nvidia-caps minors) and the ``nvidia-caps`` major in
  ``/proc/devices``;
- it copies ``/usr/bin/nvidia-cdi-hook`` unless ``--nvidia-cdi-hook-path`` names one.

A node's *host directory* holds all of it: ``driver/`` (the driver root: the fake library and
the fake nvidia-smi, device nodes, a no-op nvidia-cdi-hook, an MPS control program) and
``proc/`` (``driver/`` and
``devices``), which ``pluginhost`` binds over ``/proc/driver`` and ``/proc/devices`` in the
plugin's own mount namespace. Device nodes are made with the real numbers so CDI specs carry
them, and are never opened: the fake library is what answers.

The real driver creates a MIG instance's capability files with the instance. Here the fake
library does the same for the processes given FAKEGPU_NVML_CAPS_DIR (the plugin: its create
returns with the files in place), and ``sync_capabilities`` follows the NVML state file (its
seqlock generation changes with every write) for every other writer, so the files come and go
with the instances.

One module, a little over 400 lines, on purpose: it is the one description of that host (what
NVIDIA's plugin reads, its numbering, the state's reading under the seqlock and the writing),
and each half is the other's test oracle; split, the minors' layout would live in two places.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import re
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fakegpu import fsutil
from fakegpu.errors import FakegpuError, MissingPrerequisite
from fakegpu.nvml import state as st

NVIDIA_MAJOR = 195  # /dev/nvidia<minor> and nvidiactl (minor 255): fixed by the driver
NVIDIACTL_MINOR = 255
# The nvidia-caps minors (the driver's /proc/driver/nvidia-caps/mig-minors): 1 config,
# 2 monitor, then per GPU 15 GPU instances of 1 access minor + 8 compute instances each.
CAPS_FIRST_GI_MINOR = 3
CAPS_GIS_PER_GPU = 15
CAPS_CIS_PER_GI = 8
# Dynamic character majors are handed out from the top of this range down (fs/char_dev.c),
# which is where nvidia-uvm and nvidia-caps end up on real hosts.
DYNAMIC_MAJORS = range(511, 233, -1)
CAP_MODE = 0o444  # DeviceFileMode of the access files: the driver's default (292)
GENERATION_OFFSET = st.Header.generation.offset
STATE_FIRMWARE_NAME = "gsp_fakegpu_nvml_state.bin"  # the library looks for it (store.c)


@dataclass(frozen=True)
class MigInstance:
    gi: int
    cis: tuple[int, ...]


@dataclass(frozen=True)
class HostGpu:
    minor: int
    mig_enabled: bool
    instances: tuple[MigInstance, ...] = ()


@dataclass(frozen=True)
class HostFacts:
    """What the host layout is built from: read from one state file at one generation."""

    driver_version: str
    gpus: tuple[HostGpu, ...]
    generation: int = 0


@dataclass(frozen=True)
class Majors:
    uvm: int
    caps: int


@dataclass(frozen=True)
class HostDir:
    """Where one node's host files live (``root`` is per node, e.g. ``<node>/nvhost``)."""

    root: Path

    @property
    def driver_root(self) -> Path:
        """``--nvidia-driver-root`` and ``--container-driver-root`` alike."""
        return self.root / "driver"

    @property
    def lib_dir(self) -> Path:
        return self.driver_root / "usr" / "lib64"

    @property
    def bin_dir(self) -> Path:
        return self.driver_root / "usr" / "bin"

    @property
    def dev_dir(self) -> Path:
        return self.driver_root / "dev"

    @property
    def cdi_hook(self) -> Path:
        """For ``--nvidia-cdi-hook-path``: runc runs it as a hook, and it does nothing."""
        return self.bin_dir / "nvidia-cdi-hook"

    @property
    def mps_control(self) -> Path:
        """``nvidia-cuda-mps-control``, which NVIDIA's MPS daemon Deployment runs from the
        driver root (``MPS_CONTROL``)."""
        return self.bin_dir / "nvidia-cuda-mps-control"

    @property
    def proc_driver(self) -> Path:
        """Bound over /proc/driver in the plugin's mount namespace."""
        return self.root / "proc" / "driver"

    @property
    def capabilities(self) -> Path:
        return self.proc_driver / "nvidia" / "capabilities"

    @property
    def proc_devices(self) -> Path:
        """Bound over /proc/devices in the plugin's mount namespace."""
        return self.root / "proc" / "devices"


class StateReadError(FakegpuError):
    """The state file could not be read consistently (a writer kept it busy)."""


# --- reading the state ---------------------------------------------------------------------------


def read_generation(path: Path) -> tuple[int, int]:
    """(inode, seqlock generation) of a state file: changes with every write or re-render."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        raw = os.pread(fd, 8, GENERATION_OFFSET)
        return os.fstat(fd).st_ino, int.from_bytes(raw, "little")
    finally:
        os.close(fd)


def read_facts(path: Path, *, tries: int = 200) -> HostFacts:
    """The driver version, GPU minors, MIG modes and live instances in the state file.

    Read under the library's seqlock protocol (the generation is even and unchanged across
    the copy), as the library's own readers do, so a torn write is never seen.
    """
    size = ctypes.sizeof(st.Header)
    for _ in range(tries):
        data = path.read_bytes()
        if len(data) < size:
            raise StateReadError(f"{path}: too short for a fakegpu state file")
        header = st.Header.from_buffer_copy(data)
        if header.magic != st.MAGIC.rstrip(b"\0"):
            raise StateReadError(f"{path}: not a fakegpu state file (magic {header.magic!r})")
        if header.generation & 1:
            time.sleep(0.005)  # a writer is inside; try again
            continue
        gpus = [_gpu(data, header, i) for i in range(header.gpu_count)]
        # The copy is consistent if no write began while it was taken.
        if read_generation(path)[1] != header.generation:
            continue
        return HostFacts(driver_version=header.driver_version.decode(),
                         gpus=tuple(gpus), generation=int(header.generation))
    raise StateReadError(f"{path}: no consistent read in {tries} tries (a writer kept it busy)")


def _gpu(data: bytes, header: st.Header, index: int) -> HostGpu:
    start = header.header_size + index * header.gpu_size
    rec = st.GpuRecord.from_buffer_copy(data[start:start + ctypes.sizeof(st.GpuRecord)])
    mig = bool(rec.s.mig_capable) and bool(rec.d.mig_current)
    instances = tuple(
        MigInstance(gi=int(gi.id), cis=tuple(sorted(int(ci.id) for ci in gi.cis if ci.active)))
        for gi in rec.d.gis if gi.active) if mig else ()
    return HostGpu(minor=int(rec.s.minor), mig_enabled=mig,
                   instances=tuple(sorted(instances, key=lambda i: i.gi)))


# --- pure renderers ------------------------------------------------------------------------------


def gi_minor(gpu_minor: int, gi: int) -> int:
    """The nvidia-caps minor of GPU instance ``gi`` of the GPU with minor ``gpu_minor``."""
    return CAPS_FIRST_GI_MINOR + gpu_minor * CAPS_GIS_PER_GPU * (1 + CAPS_CIS_PER_GI) \
        + gi * (1 + CAPS_CIS_PER_GI)


def ci_minor(gpu_minor: int, gi: int, ci: int) -> int:
    return gi_minor(gpu_minor, gi) + 1 + ci


def access_text(minor: int) -> str:
    """An ``access`` file as the driver writes it (the plugin reads the minor from it)."""
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: {CAP_MODE}\nDeviceFileModify: 1\n"


def capability_files(facts: HostFacts) -> dict[str, str]:
    """Relative path under ``capabilities/`` -> content, for every live MIG instance."""
    files: dict[str, str] = {}
    for gpu in facts.gpus:
        for inst in gpu.instances:
            base = f"gpu{gpu.minor}/mig/gi{inst.gi}"
            files[f"{base}/access"] = access_text(gi_minor(gpu.minor, inst.gi))
            for ci in inst.cis:
                files[f"{base}/ci{ci}/access"] = access_text(ci_minor(gpu.minor, inst.gi, ci))
    return files


_CHAR_LINE = re.compile(r"^\s*(\d+)\s+(\S+)\s*$")


def used_char_majors(proc_devices: str) -> dict[str, int]:
    """Name -> major of the character devices in a /proc/devices text."""
    out: dict[str, int] = {}
    section = ""
    for line in proc_devices.splitlines():
        if line.endswith(":"):
            section = line
            continue
        m = _CHAR_LINE.match(line)
        if section == "Character devices:" and m:
            out[m.group(2)] = int(m.group(1))
    return out


def choose_majors(proc_devices: str) -> Majors:
    """nvidia-uvm's and nvidia-caps' majors: the host's own if it has them, else the two
    highest free dynamic majors (where the kernel would put them)."""
    used = used_char_majors(proc_devices)
    taken = set(used.values())
    free = [m for m in DYNAMIC_MAJORS if m not in taken]
    uvm = used.get("nvidia-uvm") or free.pop(0)
    caps = used.get("nvidia-caps") or next(m for m in free if m != uvm)
    return Majors(uvm=uvm, caps=caps)


def render_proc_devices(proc_devices: str, majors: Majors) -> str:
    """The host's /proc/devices with the NVIDIA character devices a driver would add."""
    wanted = [(NVIDIA_MAJOR, "nvidia-frontend"), (majors.uvm, "nvidia-uvm"),
              (majors.caps, "nvidia-caps")]
    have = used_char_majors(proc_devices)
    add = [(m, n) for m, n in wanted if n not in have]
    lines = proc_devices.splitlines()
    out: list[str] = []
    section = ""
    char: list[tuple[int, str]] = []
    for line in lines:
        if line.endswith(":"):
            if section == "Character devices:":
                out += _char_lines(char, add)
            section = line
            out.append(line)
            continue
        m = _CHAR_LINE.match(line)
        if section == "Character devices:" and m:
            char.append((int(m.group(1)), m.group(2)))
        elif section != "Character devices:" or line.strip():
            out.append(line)  # the section's blank line is rendered with it
    if section == "Character devices:":
        out += _char_lines(char, add)
    if not any(line == "Character devices:" for line in lines):
        out = ["Character devices:", *_char_lines([], add), "", *out]
    return "\n".join(out) + "\n"


def _char_lines(char: list[tuple[int, str]], add: list[tuple[int, str]]) -> list[str]:
    # Sorted by major as the kernel lists them; a blank line ends the section.
    return [f"{m:3d} {n}" for m, n in sorted([*char, *add])] + [""]


def device_nodes(facts: HostFacts, majors: Majors) -> dict[str, tuple[int, int]]:
    """Name under ``dev/`` -> (major, minor) of each device node the plugin stats."""
    nodes = {f"nvidia{g.minor}": (NVIDIA_MAJOR, g.minor) for g in facts.gpus}
    nodes["nvidiactl"] = (NVIDIA_MAJOR, NVIDIACTL_MINOR)
    nodes["nvidia-uvm"] = (majors.uvm, 0)
    nodes["nvidia-uvm-tools"] = (majors.uvm, 1)
    return nodes


# --- building it ---------------------------------------------------------------------------------


# The MPS control program as NVIDIA's MPS daemon Deployment drives it (from its container,
# with the driver root's usr/bin on PATH and CUDA_MPS_{PIPE,LOG}_DIRECTORY set): ``-d`` starts
# the daemon, which makes its control pipe and control.log and returns; commands on stdin go to
# the daemon, which logs each. There is no CUDA here, so no MPS server ever starts.
MPS_CONTROL = """#!/bin/sh
# fakegpu: nvidia-cuda-mps-control (docs/nvidia-driver.md)
pipe=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}
logs=${CUDA_MPS_LOG_DIRECTORY:-/var/log/nvidia-mps}
log() { echo "[$(date -u '+%Y-%m-%d %H:%M:%S') Control $$] $*" >> "$logs/control.log"; }
case "$1" in
-d)
    mkdir -p "$pipe" "$logs"
    [ -p "$pipe/control" ] || mkfifo "$pipe/control"
    log "Starting control daemon using socket $pipe/control${2:+ (multi-user)}"
    exit 0 ;;
"")
    [ -p "$pipe/control" ] || { echo "Cannot find MPS control daemon process" >&2; exit 1; }
    while read -r line; do
        [ -n "$line" ] && log "Cmd:$line"
    done
    exit 0 ;;
*)
    echo "nvidia-cuda-mps-control: unknown option $1" >&2
    exit 1 ;;
esac
"""


def build(host: HostDir, facts: HostFacts, *, library: Path, nvidia_smi: Path,
          host_proc_devices: str, state: Path | None = None) -> Majors:
    """Write the whole host directory for ``facts`` (and, given the node's ``state``, the link
    that carries it into containers); idempotent. Returns the majors used."""
    majors = choose_majors(host_proc_devices)
    host.lib_dir.mkdir(parents=True, exist_ok=True)
    host.bin_dir.mkdir(parents=True, exist_ok=True)
    host.dev_dir.mkdir(parents=True, exist_ok=True)
    # A real copy, not a link out of the root: the plugin resolves links and takes the
    # library's directory as the driver's library directory.
    versioned = host.lib_dir / f"libnvidia-ml.so.{facts.driver_version}"
    _copy_if_changed(library, versioned, mode=0o755)
    _symlink(host.lib_dir / "libnvidia-ml.so.1", versioned.name)
    # Located, never loaded by the plugin; a container that loads it gets "invalid ELF header":
    # there is no fake CUDA, only NVML.
    libcuda = host.lib_dir / f"libcuda.so.{facts.driver_version}"
    if not libcuda.is_file():
        fsutil.atomic_write(libcuda, "fakegpu: no CUDA driver, only NVML (libnvidia-ml.so.1)\n")
    _copy_if_changed(nvidia_smi, host.bin_dir / "nvidia-smi", mode=0o755)
    for path, text in ((host.cdi_hook, "#!/bin/sh\n# fakegpu: nothing to link or cache\nexit 0\n"),
                       (host.mps_control, MPS_CONTROL)):
        if not path.is_file() or path.read_text() != text:
            fsutil.atomic_write(path, text, mode=0o755)
    for name, (major, minor) in device_nodes(facts, majors).items():
        _mknod(host.dev_dir / name, major, minor)
    host.proc_devices.parent.mkdir(parents=True, exist_ok=True)
    fsutil.atomic_write(host.proc_devices, render_proc_devices(host_proc_devices, majors))
    sync_capabilities(host, facts)
    if state is not None:
        link_state(host, facts, state)
    return majors


def state_in_firmware(host: HostDir, facts: HostFacts) -> Path:
    """Where containers find the node's state: among the driver's GSP firmware files.

    NVIDIA's container toolkit mounts ``lib/firmware/nvidia/<version>/gsp*.bin`` of the driver
    root into every GPU container it writes a CDI spec for; the fake library, given no
    FAKEGPU_NVML_STATE, opens this name there (nvml/csrc/store.c), so NVML in a pod NVIDIA's
    plugin prepared reaches the node's fake GPUs, and shows those whose device nodes the pod has.
    """
    return (host.driver_root / "lib" / "firmware" / "nvidia" / facts.driver_version
            / STATE_FIRMWARE_NAME)


def link_state(host: HostDir, facts: HostFacts, state: Path) -> None:
    """A hard link, not a symlink: the toolkit mounts the path it finds, and a link out of the
    driver root would be resolved to a path outside it. Re-made when the state file is
    replaced (a new inode)."""
    target = state_in_firmware(host, facts)
    target.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        if os.path.samefile(target, state):
            return
    staged = target.with_name(f".{target.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        staged.unlink()
    try:
        os.link(state, staged)
    except OSError as err:
        raise MissingPrerequisite(f"cannot link the NVML state {state} into the driver root "
                                  f"({target}): {err.strerror}; it must be on the same "
                                  "filesystem") from None
    fsutil.move_into_place(staged, target)


def follow(host: HostDir, state: Path, seen: tuple[int, int], alive: Callable[[], bool],
           say: Callable[[str], None], poll_s: float) -> None:
    """While ``alive()``: re-link the state into the driver root when the file is replaced
    (containers started from then on get the new one) and re-sync the MIG capability files
    whenever its generation moves (``seen``: the (inode, generation) already synced)."""
    while alive():
        time.sleep(poll_s)
        try:
            now = read_generation(state)
            if now == seen:
                continue
            facts = read_facts(state)
            if now[0] != seen[0]:
                link_state(host, facts, state)
            if sync_capabilities(host, facts, functools.partial(_at, state, facts.generation)):
                say(f"MIG capability files now {sorted(capability_files(facts))}")
            seen = (now[0], facts.generation)
        except (OSError, FakegpuError) as err:
            # Re-rendered or busy: the next poll reads it again.
            say(f"state not read ({err}); retrying")


def _at(state: Path, generation: int) -> bool:
    """Whether ``state`` is still at ``generation`` (nothing written since it was read)."""
    return read_generation(state)[1] == generation


def sync_capabilities(host: HostDir, facts: HostFacts,
                      still_current: Callable[[], bool] = lambda: True) -> bool:
    """Make ``capabilities/`` hold exactly the files of ``facts``' live MIG instances.

    New files first, stale ones after, so a file never vanishes while still wanted. The fake
    library writes a new instance's files itself as it creates it (FAKEGPU_NVML_CAPS_DIR), so
    a file missing from ``facts`` may be newer than them: one goes only while
    ``still_current()`` says the state has not moved since ``facts`` were read. Returns
    whether anything changed.
    """
    want = capability_files(facts)
    root = host.capabilities
    root.mkdir(parents=True, exist_ok=True)
    changed = False
    for rel, text in want.items():
        path = root / rel
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            fsutil.atomic_write(path, text, mode=CAP_MODE)
            changed = True
    for path in sorted(root.rglob("access"), reverse=True):
        if path.relative_to(root).as_posix() not in want:
            if not still_current():
                break  # the next sync reads the newer state
            path.unlink()
            changed = True
    _remove_empty_dirs(root)
    return changed


def _remove_empty_dirs(root: Path) -> None:
    # Deepest first, so a GI's directory goes once its CIs' have gone; the root stays.
    for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts),
                    reverse=True):
        with contextlib.suppress(OSError):
            d.rmdir()


def _copy_if_changed(src: Path, dest: Path, *, mode: int) -> None:
    if dest.is_file() and dest.stat().st_size == src.stat().st_size \
            and dest.read_bytes() == src.read_bytes():
        return
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.copyfile(src, tmp)
    os.chmod(tmp, mode)
    fsutil.move_into_place(tmp, dest)


def _symlink(link: Path, target: str) -> None:
    if link.is_symlink() and os.readlink(link) == target:
        return
    with contextlib.suppress(FileNotFoundError):
        link.unlink()
    link.symlink_to(target)


def _mknod(path: Path, major: int, minor: int) -> None:
    want = os.makedev(major, minor)
    with contextlib.suppress(FileNotFoundError):
        info = path.lstat()
        if stat.S_ISCHR(info.st_mode) and info.st_rdev == want:
            return
        path.unlink()
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, want)
    except PermissionError as err:
        raise MissingPrerequisite(f"cannot create the device node {path} ({major}:{minor}): "
                                  f"{err.strerror}; NVIDIA's plugin needs it (run as root "
                                  "with CAP_MKNOD)") from None

