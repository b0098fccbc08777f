"""One worker node on the host: its own containerd, kubelet, CNI network and fakegpu plugin.

A kubelet kills runtime pods it does not own, so every node has its own containerd (root,
state, socket, runc root, CNI and CDI dirs). Each kubelet has its own root dir, cgroup root and
an address of its own on a host interface (the kubelet refuses a loopback node IP), where it
serves its usual ports (10250, healthz 10248) so the apiserver reaches it for logs and exec.

Every kubelet also binds the device-plugin registration socket at a path it does not derive
from --root-dir (/var/lib/kubelet/device-plugins/kubelet.sock, where it also keeps its device
checkpoint). Kubelets sharing that directory race (one removes the other's socket, then
"bind: address already in use") and share one checkpoint, so each kubelet runs in a mount
namespace of its own where that directory is a bind mount of the node's ``device-plugins/``
(see ``kubelet_argv``).

The render_* functions are pure (tested without a host); start_* functions act.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from fakegpu.cluster import nodeconfig
from fakegpu.cluster.embedded.layout import (
    HOST_DEVICE_PLUGINS,
    KUBELET_HEALTHZ_PORT,
    KUBELET_PORT,
    NodeBinaries,
    NodeLayout,
)
from fakegpu.cluster.external import ExternalPlugin
from fakegpu.cluster.process import (
    ProcessRecord,
    WaitPolicy,
    run,
    spawn,
    wait_until,
)

# --- pure renderers ----------------------------------------------------------------------------


def render_containerd_config(
    layout: NodeLayout, bins: NodeBinaries, pause_ref: str, runc: Path | None = None
) -> str:
    """containerd 2.x config confined to the node's directories (nodeconfig renders it, as
    for kind nodes). ``runc`` replaces ``bins.runc`` (the wrapper, see ``write_node_files``)."""
    d = layout.containerd_dir
    return nodeconfig.containerd_config(nodeconfig.Containerd(
        pause_image=pause_ref, runc=str(runc or bins.runc),
        # No systemd on this host: cgroupfs, as the kubelet's cgroupDriver.
        systemd_cgroup=False,
        cni_bin_dirs=(str(bins.cni_bin_dir),), cni_conf_dir=str(layout.cni_conf_dir),
        # The node's own CDI dir: the plugin of this node writes there.
        cdi_spec_dirs=(str(layout.cdi_dir),),
        private=nodeconfig.Private(root=d / "root", state=d / "state",
                                   socket=layout.containerd_socket, opt=d / "opt",
                                   runc_root=d / "runc")))


def render_cni_config(layout: NodeLayout) -> str:
    """A bridge network per node, without masquerading: the host routes between the nodes'
    bridges (and has no iptables to spare); IPAM state in the node's own directory."""
    return nodeconfig.cni_conflist(layout.cni_network, layout.bridge, layout.pod_subnet,
                                   masquerade=False, ipam_dir=layout.cni_ipam_dir)


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
              layout.pod_logs_dir, layout.nvml_state.parent, layout.device_plugins_dir):
        d.mkdir(parents=True, exist_ok=True)
    # Through the runc wrapper where this host needs it (a runc without seccomp, capabilities
    # missing from the bounding set): the one kind nodes and fakegpu's dockerd use.
    seccomp = nodeconfig.seccomp_supported(bins.runc)
    runc = write_runc_wrapper(layout.root / "runc-wrapper", bins.runc, seccomp=seccomp) \
        if not seccomp or nodeconfig.missing_caps() else None
    layout.containerd_config.write_text(render_containerd_config(layout, bins, pause_ref, runc))
    (layout.cni_conf_dir / "10-fakegpu.conflist").write_text(render_cni_config(layout))
    layout.kubelet_config.write_text(kubelet_cfg)
    # No cluster DNS: pods get a resolver that answers nothing rather than the host's.
    layout.resolv_conf.write_text("nameserver 127.0.0.1\noptions ndots:1\n")


def write_runc_wrapper(path: Path, real: Path, *, seccomp: bool = False) -> Path:
    """The runc wrapper in front of ``real`` for this node's containerd: it drops what this
    host cannot grant (seccomp when ``seccomp`` is False, missing capabilities, a too-low
    oomScoreAdj) from each spec, then execs ``real`` with the same arguments."""
    return nodeconfig.install_wrapper(path, real, seccomp=seccomp,
                                      python=f"{sys.executable} -S")


# Log lines after which a node component never becomes ready although it keeps running:
# containerd goes on serving without its CRI plugin (crictl then fails until the timeout), and
# the kubelet's or containerd's inotify watchers fail when the host's inotify limits are used up.
FATAL_LOG_LINES = (
    re.compile(r'msg="failed to load plugin".*\bid=io\.containerd\.(cri\.v1\.|grpc\.v1\.cri\b)'),
    re.compile(r"too many open files", re.IGNORECASE),
)


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
               lambda: cri_ready(layout, bins), policy, watch=[rec], fatal=FATAL_LOG_LINES)
    return rec


def cri_ready(layout: NodeLayout, bins: NodeBinaries) -> bool:
    # A failure raises CommandError: the wait reports the last one if it times out.
    run([str(bins.crictl), "--runtime-endpoint", f"unix://{layout.containerd_socket}",
         "--timeout", "5s", "info"], timeout=15)
    return True


# Run by `sh -c` inside the kubelet's new mount namespace, then replaced by the kubelet (exec:
# same pid, so the ProcessRecord stays valid). $1 is the node's device-plugins dir; the rest
# is the kubelet's argv.
#  - The mount holding HOST_DEVICE_PLUGINS is made private first (non-recursive: the shared
#    kubelet root below stays shared), so the bind stays in this namespace even on a host
#    whose / is a shared mount.
#  - unshare --propagation unchanged keeps the kubelet root in the host's peer group: the
#    volume mounts the kubelet makes there (secrets, configmaps, projected tokens) show up in
#    the host namespace, where containerd bind-mounts them into containers.
_KUBELET_NS_SCRIPT = f"""set -e
mkdir -p {HOST_DEVICE_PLUGINS}
mount --make-private "$(findmnt -n -o TARGET -T {HOST_DEVICE_PLUGINS})"
mount --bind "$1" {HOST_DEVICE_PLUGINS}
shift
exec "$@"
"""


def kubelet_argv(layout: NodeLayout, bins: NodeBinaries) -> list[str]:
    """The kubelet command line, wrapped to run in a mount namespace of its own (see above)."""
    kubelet = [
        str(bins.kubelet),
        f"--config={layout.kubelet_config}",
        f"--kubeconfig={layout.kubelet_kubeconfig}",
        f"--root-dir={layout.kubelet_root}",
        f"--cert-dir={layout.root / 'kubelet-pki'}",
        f"--hostname-override={layout.name}",
        f"--node-ip={layout.ip}",
        "--v=2",
    ]
    return [shutil.which("unshare") or "unshare", "--mount", "--propagation", "unchanged", "--",
            "/bin/sh", "-c", _KUBELET_NS_SCRIPT, "kubelet-mountns",
            str(layout.device_plugins_dir), *kubelet]


def share_kubelet_root(layout: NodeLayout, mountinfo: Path = Path("/proc/self/mountinfo")) -> None:
    """Make the kubelet root a shared mount (a bind onto itself first), once.

    Mounts under a shared mount propagate between its copies in every mount namespace: the
    kubelet's mounts under its root reach the host. `down` unmounts it with everything else
    under the cluster dir.
    """
    from fakegpu.cluster.cleanup import mount_points

    root = str(layout.kubelet_root)
    if root not in mount_points(mountinfo.read_text()):
        run(["mount", "--bind", root, root], timeout=30)
    run(["mount", "--make-shared", root], timeout=30)


def start_kubelet(layout: NodeLayout, bins: NodeBinaries) -> ProcessRecord:
    share_kubelet_root(layout)
    return spawn(f"kubelet/{layout.name}", kubelet_argv(layout, bins),
                 layout.log_dir / "kubelet.log",
                 env={"PATH": _host_path(bins), "HOME": os.environ.get("HOME", "/root")})


# What fakegpu's plugin logs each time a kubelet registers it (plugin/server.py).
PLUGIN_REGISTERED = "kubelet registered the plugin"


def log_size(log: Path) -> int:
    """Where a log ends now: ``written_since`` reads only what comes after."""
    try:
        return log.stat().st_size
    except FileNotFoundError:
        return 0


def written_since(log: Path, offset: int) -> str:
    """What ``log`` got after ``offset`` (``log_size`` taken earlier)."""
    with log.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


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
    instance_id: str = "",
) -> ProcessRecord:
    """Start the node's plugin. An ``instance_id`` (upgrades: two instances overlap) gives it
    sockets and a log file of its own; ``nvml_env`` may carry its version stamp too."""
    env = dict(os.environ)
    env.pop("POD_UID", None)  # the instance id is ours to give, never inherited
    env.update(nvml_env)
    # NVML and nvidia-smi inside prepared containers (plugin/nvmlmounts.py): a host process's
    # paths are the node's. nvidia-smi is built here, not during the first prepare.
    from fakegpu import nvidiasmi

    nvidiasmi.path()
    env[nvidiasmi.CDI_ENV] = "1"
    return spawn(f"plugin/{layout.name}", [
        sys.executable, "-m", "fakegpu", "plugin", "run",
        "--node", layout.name,
        "--driver", driver,
        "--kubeconfig", str(layout.plugin_kubeconfig),
        "--kubelet-root", str(layout.kubelet_root),
        "--cdi-root", str(layout.cdi_dir),
        "--state-dir", str(layout.plugin_state_dir),
        *(["--instance-id", instance_id] if instance_id else []),
        *extra_args,
    ], layout.log_dir / (f"plugin-{instance_id}.log" if instance_id else "plugin.log"), env=env)


def start_nic_plugin(layout: NodeLayout, nvml_env: Mapping[str, str],
                     driver: str, extra_args: Sequence[str] = ()) -> ProcessRecord:
    """The node's NIC plugin (fakegpu/nic) as ``driver`` (nic.fakegpu.dev, dra.net): it reads
    the node's sysfs view, which ``nvml_env`` points to (FAKEGPU_SYSFS), under the GPU
    plugin's service account; ``extra_args``: the topology's flags for it."""
    env = dict(os.environ)
    env.pop("POD_UID", None)
    env.update(nvml_env)
    return spawn(f"nic-plugin/{layout.name}", [
        sys.executable, "-m", "fakegpu", "nic", "run",
        "--node", layout.name, "--driver", driver,
        "--kubeconfig", str(layout.plugin_kubeconfig),
        "--kubelet-root", str(layout.kubelet_root),
        "--cdi-root", str(layout.cdi_dir),
        "--state-dir", str(layout.nic_state_dir),
        *extra_args,
    ], layout.log_dir / "nic-plugin.log", env=env)


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


def start_external_plugin(
    layout: NodeLayout,
    plugin: ExternalPlugin,
    nvml_env: Mapping[str, str],
    *,
    image: str,
    namespace: str,
) -> ProcessRecord:
    """Another vendor's kubelet plugin on this node, under ``pluginhost`` (its NVIDIA host from
    the node's NVML state, in a mount namespace of its own). Recorded as ``extplugin/<node>``."""
    from fakegpu.cluster.embedded.pluginhost import wrapper_argv
    from fakegpu.node.nvidiahost import HostDir

    host = HostDir(layout.root / "nvhost")
    state_dir = layout.root / "extplugin"
    state_dir.mkdir(parents=True, exist_ok=True)
    values = {
        "node": layout.name, "kubeconfig": str(layout.plugin_kubeconfig),
        "kubelet_root": str(layout.kubelet_root),
        "registrar_dir": str(layout.kubelet_root / "plugins_registry"),
        "plugins_dir": str(layout.kubelet_root / "plugins"),
        "cdi_root": str(layout.cdi_dir), "driver_root": str(host.driver_root),
        "state_dir": str(state_dir), "image": image, "namespace": namespace,
    }
    env = dict(os.environ)
    env.update(nvml_env)  # the fake library in the driver root reads the node's state file
    env.update(plugin.env)
    state = layout.nvml_state if layout.nvml_state.is_file() else None
    argv = wrapper_argv(host.root, state, plugin.argv(values), templates=plugin.templates)
    return spawn(f"extplugin/{layout.name}", argv, layout.log_dir / "extplugin.log", env=env)
