"""One renderer for a node's container runtime, on every provider: containerd's config, the CNI
network and the runc wrapper.

An embedded node is a containerd among others on one host; a kind node is a container of its
own. They need the same settings (CDI, the pinned sandbox image, runc through the wrapper where
the host needs it, a bridge network) and differ only in values: where files live, the cgroup
driver, masquerading. The embedded provider fills :class:`Containerd` through
``node.render_containerd_config``, the kind node image through ``kind.nodefiles``; both come
here. TOML is built from dicts with tomli-w, never from strings.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import tomli_w

from fakegpu import fsutil
from fakegpu.cluster import runc_wrapper
from fakegpu.errors import FakegpuError

CRI_RUNTIME = "io.containerd.cri.v1.runtime"
CRI_IMAGES = "io.containerd.cri.v1.images"


@dataclass(frozen=True)
class Private:
    """Where a containerd sharing its host with other nodes keeps everything of its own."""

    root: Path
    state: Path
    socket: Path
    opt: Path
    runc_root: Path


@dataclass(frozen=True)
class Containerd:
    pause_image: str  # pinned: nothing can pull it back once garbage collected
    runc: str  # the runc containerd calls: the real one, or the wrapper in front of it
    systemd_cgroup: bool  # kind nodes run systemd; embedded nodes use cgroupfs
    cni_bin_dirs: tuple[str, ...]
    cni_conf_dir: str
    cdi_spec_dirs: tuple[str, ...]
    private: Private | None = None  # None: a node of its own (the host's default paths)


def containerd_config(c: Containerd) -> str:
    """containerd 2.x config (version 3)."""
    runc_options: dict[str, Any] = {"BinaryName": c.runc, "SystemdCgroup": c.systemd_cgroup}
    runtime: dict[str, Any] = {
        # On by default in containerd 2.x; named so an older containerd fails loudly.
        "enable_cdi": True,
        "cdi_spec_dirs": list(c.cdi_spec_dirs),
        "containerd": {
            "default_runtime_name": "runc",
            "runtimes": {"runc": {"runtime_type": "io.containerd.runc.v2",
                                  "options": runc_options}},
        },
        "cni": {"bin_dirs": list(c.cni_bin_dirs), "conf_dir": c.cni_conf_dir},
    }
    plugins: dict[str, Any] = {
        CRI_IMAGES: {"snapshotter": "overlayfs", "pinned_images": {"sandbox": c.pause_image}},
        CRI_RUNTIME: runtime,
    }
    doc: dict[str, Any] = {"version": 3}
    if c.private is not None:
        p = c.private
        doc.update({"root": str(p.root), "state": str(p.state),
                    "grpc": {"address": str(p.socket)},
                    "ttrpc": {"address": f"{p.socket}.ttrpc"}})
        runc_options["Root"] = str(p.runc_root)
        runtime.update({
            # Network namespaces under the node's state dir, not the shared /var/run/netns.
            "netns_mounts_under_state_dir": True,
            # Without CAP_SYS_RESOURCE in the bounding set nothing may lower its oom_score_adj
            # (the pause container asks for -998): clamp it to containerd's own.
            "restrict_oom_score_adj": True,
        })
        plugins.update({
            "io.containerd.internal.v1.opt": {"path": str(p.opt)},
            # NRI listens on a fixed host path (/var/run/nri/nri.sock): nodes would collide.
            "io.containerd.nri.v1.nri": {"disable": True},
            # Streaming (exec, attach, port-forward) on loopback, a free port per node.
            "io.containerd.grpc.v1.cri": {"stream_server_address": "127.0.0.1",
                                          "stream_server_port": "0"},
        })
    doc["plugins"] = plugins
    return tomli_w.dumps(doc)


def cni_conflist(name: str, bridge: str, subnet: str, *, masquerade: bool,
                 ipam_dir: Path | None = None) -> str:
    """A bridge network handing out ``subnet``; the default route goes through the bridge, so
    the host routes to other nodes' pods. With ``masquerade`` (kind: pods reach beyond the
    node network) also NAT and port mappings; without it (embedded) neither."""
    ipam: dict[str, Any] = {"type": "host-local", "ranges": [[{"subnet": subnet}]],
                            "routes": [{"dst": "0.0.0.0/0"}]}
    if ipam_dir is not None:
        ipam["dataDir"] = str(ipam_dir)
    plugins: list[dict[str, Any]] = [
        {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": masquerade,
         "hairpinMode": True, "ipam": ipam}]
    if masquerade:
        plugins.append({"type": "portmap", "capabilities": {"portMappings": True}})
    return json.dumps({"cniVersion": "1.0.0", "name": name, "plugins": plugins}, indent=2) + "\n"


# --- the runc wrapper ----------------------------------------------------------------------------


def missing_caps() -> set[str]:
    """Capabilities a container may ask for that no process on this host can hold."""
    status = Path("/proc/self/status").read_text()
    return runc_wrapper.unavailable(runc_wrapper.bounding_set(status))


def seccomp_supported(runc: Path) -> bool:
    """Whether ``runc`` was built with seccomp (``runc features``: linux.seccomp.enabled)."""
    try:
        out = subprocess.run([str(runc), "features"], capture_output=True, text=True,
                             timeout=30, check=False)
        seccomp = json.loads(out.stdout).get("linux", {}).get("seccomp") or {}
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return True  # an old runc without `features` (Debian's 1.1 has both): leave filters be
    return bool(seccomp.get("enabled"))


def wrapper_text(real_runc: str, *, seccomp: bool, python: str = "/usr/bin/python3") -> str:
    """runc_wrapper.py with the real runc, its seccomp support and the interpreter baked in."""
    source = resources.files("fakegpu.cluster").joinpath("runc_wrapper.py").read_text()
    # Both paths also go into the file's sh part, in double quotes or bare: plain paths only.
    for path in (real_runc, *python.split(" ")):
        if not re.fullmatch(r"[\w./+-]+", path):
            raise FakegpuError(f"runc wrapper: {path!r} is not a plain path")
    replacements = {
        'REAL_RUNC = "/usr/sbin/runc"  # replaced at install time':
            f"REAL_RUNC = {real_runc!r}",
        "SECCOMP_SUPPORTED = True  # replaced at install time":
            f"SECCOMP_SUPPORTED = {seccomp!r}",
        'exec /usr/bin/python3 "$0" "$@"': f'exec {python} "$0" "$@"',
        'exec "${FAKEGPU_REAL_RUNC:-/usr/sbin/runc}" "$@"':
            f'exec "${{FAKEGPU_REAL_RUNC:-{real_runc}}}" "$@"',
    }
    for marker, value in replacements.items():
        if marker not in source:
            raise FakegpuError(f"runc_wrapper.py lost its line {marker!r}")
        source = source.replace(marker, value, 1)
    return source


def install_wrapper(dest: Path, real_runc: Path, *, seccomp: bool | None = None,
                    python: str | None = None) -> Path:
    """Write the wrapper in front of ``real_runc`` as an executable file (atomically: a
    runtime may be exec'ing the old one). ``seccomp`` None: ask the runc; ``python`` None: the
    system python3 where there is one (the wrapper needs nothing else), else this one."""
    if python is None:
        python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) \
            else f"{sys.executable} -S"
    if seccomp is None:
        seccomp = seccomp_supported(real_runc)
    text = wrapper_text(str(real_runc), seccomp=seccomp, python=python)
    return fsutil.atomic_write(dest, text, mode=0o755)
