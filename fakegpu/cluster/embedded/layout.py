"""Where one embedded node keeps everything: directories, sockets, address, cgroup.

``NodeLayout`` is pure (paths only): the provider's state derives it from the cluster's slot
and the node's index (``state.node_layout``); nothing here touches the host.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from fakegpu.cluster.embedded.controlplane import BinaryPaths

# Fixed in the kubelet (pkg/kubelet/apis/deviceplugin): --root-dir does not move it.
HOST_DEVICE_PLUGINS = Path("/var/lib/kubelet/device-plugins")
KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248
MAX_SOCKET_PATH = 107  # sun_path is 108 bytes including the terminating NUL


class NodeBinaries(BinaryPaths, Protocol):
    """What a worker needs of ``fakegpu.cluster.artifacts.binaries.Binaries``."""

    @property
    def kubelet(self) -> Path: ...
    @property
    def containerd(self) -> Path: ...
    @property
    def containerd_shim_runc_v2(self) -> Path: ...
    @property
    def ctr(self) -> Path: ...
    @property
    def runc(self) -> Path: ...
    @property
    def crictl(self) -> Path: ...
    @property
    def cni_bin_dir(self) -> Path: ...


@dataclass(frozen=True)
class NodeLayout:
    """Where one node's files live and how it is addressed. Derived, never stored twice."""

    cluster: str
    name: str  # Kubernetes node name (from the topology)
    index: int
    root: Path  # short on purpose: unix socket paths live below it
    ip: str  # the node's InternalIP, on the cluster's address interface
    pod_subnet: str  # e.g. 10.244.0.0/24
    bridge: str  # CNI bridge interface name (<= 15 bytes)

    @property
    def cgroup_root(self) -> str:
        return f"/fakegpu-{self.cluster}-{self.index}"

    @property
    def containerd_dir(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd.toml"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def device_plugins_dir(self) -> Path:
        """Mounted on HOST_DEVICE_PLUGINS in the kubelet's own mount namespace."""
        return self.root / "device-plugins"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet.yaml"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.root / "kubelet.kubeconfig"

    @property
    def plugin_kubeconfig(self) -> Path:
        return self.root / "plugin.kubeconfig"

    @property
    def plugin_token(self) -> Path:
        """The plugin's service account token, bound to this node (see embedded/install.py)."""
        return self.root / "plugin.token"

    @property
    def plugin_state_dir(self) -> Path:
        return self.root / "plugin"

    @property
    def nic_state_dir(self) -> Path:
        """The NIC plugin's records; its path also names the node's NIC links (nic/netdev.py)."""
        return self.root / "nic-plugin"

    @property
    def nvml_state(self) -> Path:
        return self.root / "nvml" / "node.state"

    @property
    def resolv_conf(self) -> Path:
        return self.root / "resolv.conf"

    @property
    def log_dir(self) -> Path:
        return self.root / "logs"

    @property
    def pod_logs_dir(self) -> Path:
        return self.root / "pods"

    @property
    def cni_network(self) -> str:
        return f"fakegpu-{self.cluster}-{self.index}"

    def socket_paths(self, driver: str) -> list[Path]:
        """Every unix socket this node uses, for the length check at validation time."""
        reg = self.kubelet_root / "plugins_registry"
        # The plugin adds "-<instance id>" for rolling updates and shortens it itself when
        # needed; reserve room for an 8-character id, its shortest form.
        return [
            self.containerd_socket,
            Path(f"{self.containerd_socket}.ttrpc"),
            reg / f"{driver}-xxxxxxxx-reg.sock",
            self.kubelet_root / "plugins" / driver / "dra-xxxxxxxx.sock",
            self.kubelet_root / "pod-resources" / "kubelet.sock",
            # The kubelet binds it as HOST_DEVICE_PLUGINS/kubelet.sock (see kubelet_argv),
            # but plugins outside its namespace would use this path.
            self.device_plugins_dir / "kubelet.sock",
        ]


def longest_socket_path(layout: NodeLayout, driver: str) -> tuple[Path, int]:
    path = max(layout.socket_paths(driver), key=lambda p: len(os.fsencode(p)))
    return path, len(os.fsencode(path))

