"""The files fakegpu puts into its kind node image besides binaries: the entrypoint, systemd
units, containerd and crictl configs. Written for fakegpu (kind's own base image cannot be pulled
here); they honour the contract kind's ``create`` relies on:

- the container runs ``/usr/local/bin/entrypoint /sbin/init``; kind waits until the node's log
  says "detected cgroup v1" or systemd reached the multi-user target;
- ``/kind/version`` names the Kubernetes version; kubeadm, kubelet and kubectl are on PATH;
- kubelet.service waits for kubeadm's ``/var/lib/kubelet/config.yaml`` and reads
  ``kubeadm-flags.env``; kind's kubeadm config puts pods under cgroup root ``/kubelet``; on a
  cgroup v1 host the entrypoint switches containerd (and through the CRI the kubelet) to the
  cgroupfs driver, see ENTRYPOINT;
- containerd reads ``/etc/containerd/config.toml``, which kind patches
  (``containerdConfigPatches``) and then restarts containerd.
"""

from __future__ import annotations

from fakegpu.cluster import nodeconfig

WRAPPER_PATH = "/usr/local/bin/fakegpu-runc"
REAL_RUNC_PATH = "/usr/local/sbin/runc"

ENTRYPOINT = r"""#!/bin/bash
# fakegpu kind node entrypoint: prepare the container for systemd + kubelet, then exec init.
set -o errexit -o nounset -o pipefail
log() { echo "fakegpu-node: $*" >&2; }

# The kubelet's bidirectional mounts (and CSI) need shared propagation below /.
mount --make-rshared /

if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
  log "detected cgroup v2"
else
  log "detected cgroup v1"
  # kind's kubelet config roots pods at cgroup /kubelet (kubelet.slice with the systemd driver)
  # so a nested kubelet never touches cgroups it does not own. Create that root in every
  # hierarchy and pin it with a self bind mount: systemd would otherwise remove the empty
  # directory before the kubelet starts. Private propagation keeps these mounts in here.
  mount --make-rprivate /sys/fs/cgroup
  for sub in /sys/fs/cgroup/*; do
    [[ -L "$sub" ]] && continue          # cpu,cpuacct style aliases
    mountpoint -q "$sub" || continue
    for root in kubelet kubelet.slice; do
      mkdir -p "$sub/$root"
      if [[ "$sub" == */cpuset ]]; then
        # An empty cpuset rejects every task (ENOSPC): inherit the parent's.
        cat "$sub/cpuset.cpus" > "$sub/$root/cpuset.cpus"
        cat "$sub/cpuset.mems" > "$sub/$root/cpuset.mems"
      fi
      mountpoint -q "$sub/$root" || mount --bind "$sub/$root" "$sub/$root"
    done
  done
  # cgroupfs, not systemd, drives pod cgroups on v1. systemd's v1 driver applies a container's
  # device rules by rewriting them wholesale, so runc freezes the container around every such
  # update; on a loaded host the freeze does not settle in time and the pod fails to start
  # ("error setting cgroup config for procHooks process: unable to freeze"). The cgroupfs
  # driver applies device rules without freezing. The kubelet takes its driver from containerd
  # (CRI RuntimeConfig, GA and locked on since 1.34), so this one setting moves both.
  sed -i -E 's/^([[:space:]]*SystemdCgroup[[:space:]]*=[[:space:]]*)true/\1false/' \
    "${FAKEGPU_CONTAINERD_CONFIG:-/etc/containerd/config.toml}"
fi

# Every node needs its own machine id (kubelet and journald use it) and product uuid.
rm -f /etc/machine-id
systemd-machine-id-setup >/dev/null 2>&1
if [[ -r /sys/class/dmi/id/product_uuid ]]; then
  cat /proc/sys/kernel/random/uuid > /kind/product_uuid
  mount -o ro,bind /kind/product_uuid /sys/class/dmi/id/product_uuid
fi

exec "$@"
"""

KUBELET_SLICE = """\
[Unit]
Description=The slice of the kubelet and the pods it runs
Before=slices.target
"""

KUBELET_SERVICE = """\
[Unit]
Description=kubelet (configured by kubeadm)
# kubeadm writes the config on init/join; until then there is nothing to run.
ConditionPathExists=/var/lib/kubelet/config.yaml
After=containerd.service
Wants=containerd.service

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
RestartSec=1s
StartLimitInterval=0
CPUAccounting=true
MemoryAccounting=true
Slice=kubelet.slice
KillMode=process

[Install]
WantedBy=multi-user.target
"""

# The arguments kubeadm expects the unit to pass (it writes kubeadm-flags.env on init/join).
KUBELET_KUBEADM_DROPIN = "\n".join((
    "[Service]",
    'Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/'
    'bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"',
    'Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"',
    "EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env",
    "EnvironmentFile=-/etc/default/kubelet",
    "ExecStart=",
    "ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS "
    "$KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS",
    "",
))

CONTAINERD_SERVICE = """\
[Unit]
Description=containerd
After=network.target local-fs.target
StartLimitIntervalSec=0

[Service]
ExecStart=/usr/local/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=1
LimitNPROC=infinity
LimitCORE=infinity
LimitNOFILE=infinity
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target
"""

CRICTL_YAML = "runtime-endpoint: unix:///run/containerd/containerd.sock\n"

SYSCTL = """\
# Pod traffic is routed between node containers.
net.ipv4.ip_forward = 1
"""

DEFAULT_STORAGE = """\
# No provisioner image can be pulled here: a default class without dynamic provisioning.
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
"""


def containerd_config(pause_image: str) -> str:
    """containerd 2.x in a node image: CDI on, runc through the wrapper (nodeconfig renders it,
    as for embedded nodes). SystemdCgroup is true as rendered; on a cgroup v1 host ENTRYPOINT
    switches it off before containerd starts."""
    return nodeconfig.containerd_config(nodeconfig.Containerd(
        pause_image=pause_image,
        # Privileged pods ask for capabilities this host's bounding set may lack.
        runc=WRAPPER_PATH, systemd_cgroup=True,
        cni_bin_dirs=("/opt/cni/bin",), cni_conf_dir="/etc/cni/net.d",
        cdi_spec_dirs=("/etc/cdi", "/var/run/cdi")))


def cni_conflist(pod_cidr: str) -> str:
    """The node's pod network: a bridge with host-local addresses from the node's podCIDR.

    Routes to the other nodes' podCIDRs are added on each node by the provider (kindnetd's job
    in stock kind; its image cannot be pulled here).
    """
    return nodeconfig.cni_conflist("fakegpu", "fgk0", pod_cidr, masquerade=True)
