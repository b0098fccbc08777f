"""``podresources``: a static client of the kubelet's PodResources API for the workload image.

What a monitoring agent (a GPU exporter, say) does to map devices to pods: call the kubelet's
``/var/lib/kubelet/pod-resources/kubelet.sock`` (List, Get, GetAllocatableResources of
``v1.PodResourcesLister``). The busybox workload image has no Python and no gRPC library, so the
client is a small C program (``csrc/podresources.c``) built statically like nvidia-smi and
carried at IN_IMAGE; it prints each reply as JSON. With the gates
KubeletPodResourcesDynamicResources and KubeletPodResourcesGet (featuregates.py) the reply lists
each container's DRA claims: claim name and namespace, driver, pool, device and CDI device IDs.
"""

from __future__ import annotations

from pathlib import Path

from fakegpu import nvidiasmi

NAME = "podresources"
HERE = Path(__file__).resolve().parent
SOURCE = HERE / "csrc" / "podresources.c"
IN_IMAGE = "/usr/bin/podresources"  # where the workload image holds it
# Where the kubelet serves the API, relative to its root directory (--root-dir).
SOCKET_IN_KUBELET_ROOT = Path("pod-resources") / "kubelet.sock"


def build(out_dir: Path) -> Path:
    """Compile ``out_dir/podresources`` (replaced atomically) and return its path."""
    return nvidiasmi.build_static(SOURCE, NAME, out_dir)


def _stale(binary: Path) -> bool:
    return not binary.is_file() or SOURCE.stat().st_mtime > binary.stat().st_mtime


def path() -> Path:
    """The executable, built if missing or older than its source."""
    return nvidiasmi.cached_program(HERE, NAME, _stale, build)
