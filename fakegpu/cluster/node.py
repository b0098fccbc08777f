"""One worker node on the host: its own containerd, kubelet, CNI network and fakegpu plugin.

A kubelet kills runtime pods it does not own, so every node has its own containerd (root,
state, socket, runc root, CNI and CDI dirs). Each kubelet has its own root dir, cgroup root and
an address of its own on a host interface (the kubelet refuses a loopback node IP), where it
serves its usual ports (10250, healthz 10248) so the apiserver reaches it for logs and exec.

The render_* functions are pure (tested without a host); start_* functions act.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from fakegpu.cluster.controlplane import BinaryPaths
from fakegpu.cluster.process import (
    ProcessRecord,
    WaitPolicy,
    run,
    spawn,
    wait_until,
)

KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248
MAX_SOCKET_PATH = 107  # sun_path is 108 bytes including the terminating NUL


class NodeBinaries(BinaryPaths, Protocol):
    """What a worker needs of ``fakegpu.cluster.binaries.Binaries``."""

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
    def kubelet_config(self) -> Path:
        return self.root / "kubelet.yaml"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.root / "kubelet.kubeconfig"

    @property
    def plugin_kubeconfig(self) -> Path:
        return self.root / "plugin.kubeconfig"

    @property
    def plugin_state_dir(self) -> Path:
        return self.root / "plugin"

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
            self.kubelet_root / "device-plugins" / "kubelet.sock",
        ]


def longest_socket_path(layout: NodeLayout, driver: str) -> tuple[Path, int]:
    path = max(layout.socket_paths(driver), key=lambda p: len(os.fsencode(p)))
    return path, len(os.fsencode(path))


# --- pure renderers ----------------------------------------------------------------------------


def _toml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid TOML basic string


def render_containerd_config(
    layout: NodeLayout, bins: NodeBinaries, pause_ref: str, runc: Path | None = None
) -> str:
    """containerd 2.x config (version 3) confined to the node's directories.

    ``runc`` replaces ``bins.runc`` (see ``write_runc_wrapper``).
    """
    d = layout.containerd_dir
    return "\n".join([
        "version = 3",
        f"root = {_toml_str(str(d / 'root'))}",
        f"state = {_toml_str(str(d / 'state'))}",
        "",
        "[grpc]",
        f"  address = {_toml_str(str(layout.containerd_socket))}",
        "",
        "[ttrpc]",
        f"  address = {_toml_str(str(layout.containerd_socket) + '.ttrpc')}",
        "",
        "[plugins]",
        "  [plugins.'io.containerd.internal.v1.opt']",
        f"    path = {_toml_str(str(d / 'opt'))}",
        # NRI listens on a fixed host path (/var/run/nri/nri.sock): nodes would collide.
        "  [plugins.'io.containerd.nri.v1.nri']",
        "    disable = true",
        "  [plugins.'io.containerd.cri.v1.images']",
        "    snapshotter = 'overlayfs'",
        "    [plugins.'io.containerd.cri.v1.images'.pinned_images]",
        f"      sandbox = {_toml_str(pause_ref)}",
        "  [plugins.'io.containerd.cri.v1.runtime']",
        # CDI is always on in containerd 2.x; the spec dirs are the node's own.
        f"    cdi_spec_dirs = [{_toml_str(str(layout.cdi_dir))}]",
        # Keep network namespaces under the node's state dir, not the shared /var/run/netns.
        "    netns_mounts_under_state_dir = true",
        # Hosts whose capability bounding set lacks CAP_SYS_RESOURCE cannot lower
        # oom_score_adj (the pause container asks for -998): clamp it to containerd's own.
        "    restrict_oom_score_adj = true",
        "    [plugins.'io.containerd.cri.v1.runtime'.containerd]",
        "      default_runtime_name = 'runc'",
        "      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]",
        "        runtime_type = 'io.containerd.runc.v2'",
        "        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]",
        # No systemd on this host: cgroupfs, as the kubelet's cgroupDriver.
        "          SystemdCgroup = false",
        f"          BinaryName = {_toml_str(str(runc or bins.runc))}",
        f"          Root = {_toml_str(str(d / 'runc'))}",
        "    [plugins.'io.containerd.cri.v1.runtime'.cni]",
        f"      bin_dirs = [{_toml_str(str(bins.cni_bin_dir))}]",
        f"      conf_dir = {_toml_str(str(layout.cni_conf_dir))}",
        "  [plugins.'io.containerd.grpc.v1.cri']",
        "    stream_server_address = '127.0.0.1'",
        "    stream_server_port = '0'",
        "",
    ])


def render_cni_config(layout: NodeLayout) -> str:
    """A bridge network per node. No ipMasq/portmap: the host has no iptables."""
    conf = {
        "cniVersion": "1.0.0",
        "name": layout.cni_network,
        "plugins": [
            {
                "type": "bridge",
                "bridge": layout.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": layout.pod_subnet}]],
                    # Default route via the bridge: other nodes' pods and the host are routed.
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(layout.cni_ipam_dir),
                },
            }
        ],
    }
    return json.dumps(conf, indent=2) + "\n"


def render_kubelet_config(
    layout: NodeLayout,
    *,
    ca: Path,
    serving_cert: Path,
    serving_key: Path,
    gates: Mapping[str, bool],
) -> str:
    cfg: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": layout.ip,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": layout.ip,
        "healthzPort": KUBELET_HEALTHZ_PORT,
        "tlsCertFile": str(serving_cert),
        "tlsPrivateKeyFile": str(serving_key),
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca)},
        },
        # Only holders of a cert from our CA reach the kubelet at all (x509 above).
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "imageServiceEndpoint": f"unix://{layout.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": layout.cgroup_root,
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "failCgroupV1": False,
        "failSwapOn": False,
        "resolvConf": str(layout.resolv_conf),
        "podLogsDir": str(layout.pod_logs_dir),
        "volumePluginDir": str(layout.root / "volume-plugins"),
        # Several kubelets share one disk that may be fairly full: never evict for it, and
        # never garbage-collect images (they were imported, nothing can pull them back).
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%",
                         "nodefs.inodesFree": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "registerNode": True,
        "featureGates": dict(sorted(gates.items())),
    }
    return yaml.safe_dump(cfg, sort_keys=False)


# --- actions -----------------------------------------------------------------------------------


def write_node_files(
    layout: NodeLayout, bins: NodeBinaries, pause_ref: str, kubelet_cfg: str
) -> None:
    for d in (layout.root, layout.containerd_dir, layout.cni_conf_dir, layout.cni_ipam_dir,
              layout.cdi_dir, layout.kubelet_root, layout.plugin_state_dir, layout.log_dir,
              layout.pod_logs_dir, layout.nvml_state.parent):
        d.mkdir(parents=True, exist_ok=True)
    runc = None if runc_has_seccomp(bins.runc) else write_runc_wrapper(
        layout.root / "runc-wrapper", bins.runc)
    layout.containerd_config.write_text(render_containerd_config(layout, bins, pause_ref, runc))
    (layout.cni_conf_dir / "10-fakegpu.conflist").write_text(render_cni_config(layout))
    layout.kubelet_config.write_text(kubelet_cfg)
    # No cluster DNS: pods get a resolver that answers nothing rather than the host's.
    layout.resolv_conf.write_text("nameserver 127.0.0.1\noptions ndots:1\n")


def runc_has_seccomp(runc: Path) -> bool:
    """Whether this runc can apply seccomp profiles (``runc features`` lists linux.seccomp)."""
    res = run([str(runc), "features"], timeout=30, check=False)
    try:
        return bool(json.loads(res.stdout).get("linux", {}).get("seccomp", {}).get("enabled"))
    except ValueError:
        return False


_RUNC_WRAPPER = """#!{python} -S
# Written by fakegpu. The kubelet asks for the RuntimeDefault seccomp profile on every pod
# sandbox, and this runc was built without seccomp: drop the profile from the bundle, then run
# the real runc with the same arguments.
import json, os, sys
REAL = {real!r}
args = sys.argv[1:]
for i, a in enumerate(args):
    bundle = args[i + 1] if a in ("--bundle", "-b") and i + 1 < len(args) else (
        a.split("=", 1)[1] if a.startswith("--bundle=") else None)
    if bundle is None:
        continue
    path = os.path.join(bundle, "config.json")
    try:
        with open(path) as f:
            spec = json.load(f)
        if spec.get("linux", {{}}).pop("seccomp", None) is not None:
            with open(path + ".fakegpu", "w") as f:
                json.dump(spec, f)
            os.replace(path + ".fakegpu", path)
    except OSError:
        pass
    break
os.execv(REAL, [REAL, *args])
"""


def write_runc_wrapper(path: Path, real: Path) -> Path:
    """An executable that strips seccomp from OCI bundles, then execs ``real`` (the runc)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_RUNC_WRAPPER.format(python=sys.executable, real=str(real)))
    path.chmod(0o755)
    return path


def _host_path(bins: NodeBinaries) -> str:
    dirs = {str(bins.containerd.parent), str(bins.containerd_shim_runc_v2.parent),
            str(bins.runc.parent)}
    return ":".join([*sorted(dirs), "/usr/local/sbin", "/usr/local/bin", "/usr/sbin",
                     "/usr/bin", "/sbin", "/bin"])


def start_containerd(layout: NodeLayout, bins: NodeBinaries, policy: WaitPolicy) -> ProcessRecord:
    env = {"PATH": _host_path(bins), "HOME": os.environ.get("HOME", "/root")}
    rec = spawn(f"containerd/{layout.name}",
                [str(bins.containerd), "--config", str(layout.containerd_config)],
                layout.log_dir / "containerd.log", env=env)
    wait_until(f"containerd of node {layout.name} (socket {layout.containerd_socket})",
               lambda: cri_ready(layout, bins), policy, watch=[rec])
    return rec


def cri_ready(layout: NodeLayout, bins: NodeBinaries) -> bool:
    # A failure raises CommandError: the wait reports the last one if it times out.
    run([str(bins.crictl), "--runtime-endpoint", f"unix://{layout.containerd_socket}",
         "--timeout", "5s", "info"], timeout=15)
    return True


def start_kubelet(layout: NodeLayout, bins: NodeBinaries) -> ProcessRecord:
    return spawn(f"kubelet/{layout.name}", [
        str(bins.kubelet),
        f"--config={layout.kubelet_config}",
        f"--kubeconfig={layout.kubelet_kubeconfig}",
        f"--root-dir={layout.kubelet_root}",
        f"--cert-dir={layout.root / 'kubelet-pki'}",
        f"--hostname-override={layout.name}",
        f"--node-ip={layout.ip}",
        "--v=2",
    ], layout.log_dir / "kubelet.log", env={"PATH": _host_path(bins),
                                            "HOME": os.environ.get("HOME", "/root")})


def kubelet_healthy(layout: NodeLayout) -> bool:
    url = f"http://{layout.ip}:{KUBELET_HEALTHZ_PORT}/healthz"
    with urllib.request.urlopen(url, timeout=5) as r:
        return bool(r.status == 200)


def start_plugin(
    layout: NodeLayout,
    driver: str,
    nvml_env: Mapping[str, str],
    *,
    extra_args: Sequence[str] = (),
) -> ProcessRecord:
    env = dict(os.environ)
    env.update(nvml_env)
    return spawn(f"plugin/{layout.name}", [
        sys.executable, "-m", "fakegpu", "plugin", "run",
        "--node-name", layout.name,
        "--driver-name", driver,
        "--kubeconfig", str(layout.plugin_kubeconfig),
        "--kubelet-root", str(layout.kubelet_root),
        "--cdi-root", str(layout.cdi_dir),
        "--state-dir", str(layout.plugin_state_dir),
        *extra_args,
    ], layout.log_dir / "plugin.log", env=env)


def shim_pids(layout: NodeLayout) -> list[int]:
    """containerd-shim processes serving this node's containerd (by their -address argument)."""
    from fakegpu.cluster.process import pids_matching

    sock = str(layout.containerd_socket)

    def belongs(argv: list[str]) -> bool:
        if "containerd-shim" not in os.path.basename(argv[0]):
            return False
        return any(a == sock or a == f"unix://{sock}" for a in argv) or any(
            a.startswith("-address=") and a.split("=", 1)[1] in (sock, f"unix://{sock}")
            for a in argv
        )

    return pids_matching(belongs)


def stop_pods(layout: NodeLayout, bins: NodeBinaries) -> None:
    """Stop and remove every pod sandbox through CRI, so CNI DEL frees IPs and veths.

    Best effort: containerd may already be gone; `down` kills what is left afterwards.
    """
    ep = ["--runtime-endpoint", f"unix://{layout.containerd_socket}", "--timeout", "20s"]
    res = run([str(bins.crictl), *ep, "pods", "-q"], timeout=30, check=False)
    if res.returncode != 0:
        return
    for pod in res.stdout.split():
        run([str(bins.crictl), *ep, "stopp", pod], timeout=40, check=False)
        run([str(bins.crictl), *ep, "rmp", "-f", pod], timeout=40, check=False)
