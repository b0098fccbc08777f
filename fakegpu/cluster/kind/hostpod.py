"""A kind worker's fake GPU node pod (the chart's fakeNodes DaemonSet, fakegpu/node/host.py),
where that node's NVML state lives (rendered there at start, whichever driver runs on it):
which pod it is, running fakegpu in it against that state, and checking that state is the
host's copy. All through the Kubernetes API (the pod list and the exec stream,
``fakegpu.kube.pods``): no kubectl process for work the user does not see.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fakegpu.cluster.driverchart import HOST_ROOT
from fakegpu.cluster.kind.state import KindState
from fakegpu.deploy.manifests import NAMESPACE
from fakegpu.errors import FakegpuError
from fakegpu.kube import api as kubeapi
from fakegpu.kube import pods as kpods

# Where the pod keeps its node's NVML state: the chart's nvmlStateHostPath, below the
# fakeNodes.hostRoot it mounts at its own path.
STATE_DIR_IN_POD = f"{HOST_ROOT}/nvml"
CONTAINER = "host"
EXEC_TIMEOUT_S = 120.0


def is_host(pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` is a fake node pod that is not going away (its container is ``host``)."""
    return not pod["metadata"].get("deletionTimestamp") and any(
        c.get("name") == CONTAINER for c in pod["spec"].get("containers") or [])


def host_pod(pods: Sequence[dict[str, Any]], node: str) -> str | None:
    """The name of ``node``'s running fake node pod (the newest, should a changed topology
    roll them). Pure. Other pods of the namespace (fakegpu's plugins, IMEX daemons) have no
    container named ``host``."""
    running = [p for p in pods if p["spec"].get("nodeName") == node
               and p["status"].get("phase") == "Running" and is_host(p)]
    if not running:
        return None
    return str(max(running, key=lambda p: p["metadata"].get("creationTimestamp") or "")
               ["metadata"]["name"])


def _named(pods: Sequence[dict[str, Any]], cluster: str, node: str) -> str:
    """``host_pod``, or a one-line error naming the node when it has none running."""
    pod = host_pod(pods, node)
    if pod is None:
        raise FakegpuError(f"node {node!r} of cluster {cluster!r} has no running fake node pod "
                           f"(namespace {NAMESPACE})")
    return pod


def run_fakegpu(st: KindState, node: str, args: Sequence[str]
                ) -> subprocess.CompletedProcess[str]:
    """``fakegpu <args> --state <the node's state>`` in its fake node pod; output and exit
    code are the command's (as ``Provider.node_nvml`` promises)."""
    command = ["/opt/fakegpu/bin/python", "-m", "fakegpu", *args,
               "--state", f"{STATE_DIR_IN_POD}/{node}.state"]
    with kubeapi.session(st.kubeconfig) as api:
        pod = _named(kubeapi.pods(api, NAMESPACE), st.name, node)
        res = kpods.exec_(api, NAMESPACE, pod, command, container=CONTAINER,
                          timeout=EXEC_TIMEOUT_S, check=False)
    return subprocess.CompletedProcess(command, res.returncode, res.stdout, res.stderr)


def check_states(st: KindState, on_host: Mapping[str, Path]) -> None:
    """Each node's state in its fake node pod is byte for byte ``on_host[node]``: suites read
    GPU identities from the host's copy, so a difference would make them compare against the
    wrong machine."""
    with kubeapi.session(st.kubeconfig) as api:
        pods = kubeapi.pods(api, NAMESPACE)
        for node, path in on_host.items():
            inside = kpods.exec_(api, NAMESPACE, _named(pods, st.name, node),
                                 ["sha256sum", f"{STATE_DIR_IN_POD}/{node}.state"],
                                 container=CONTAINER, timeout=EXEC_TIMEOUT_S).stdout.split()[0]
            here = hashlib.sha256(path.read_bytes()).hexdigest()
            if inside != here:
                raise FakegpuError(f"node {node}: the fake node pod's NVML state differs from "
                                   f"the one rendered on the host ({inside[:12]} != "
                                   f"{here[:12]})")
