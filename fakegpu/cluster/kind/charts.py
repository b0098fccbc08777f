"""kind: what runs on the nodes, installed with Helm: fake GPU nodes, then a DRA driver on them.

Every kind cluster gets two releases, in this order:

1. ``fakegpu-nodes``: fakegpu's chart with ``driver.enabled=false`` and ``fakeNodes.enabled``:
   on every worker a pod renders the node's NVML state and builds the NVIDIA host a driver
   expects (``fakegpu/node/host.py``); faults are injected there (``hostpod.py``). The install
   waits until each worker's pod is Ready (its host built).
2. the DRA driver, the same way whoever made it (``driver_release``, then ``install``):
   fakegpu's own (release ``fakegpu``: its chart, its image, values from the cluster's
   settings) or another vendor's (``--plugin-chart``: release ``dra-driver`` in namespace
   ``dra-driver``, the vendor's values files, its images loaded into the workers first).
   Either finds the node's state where step 1 left it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakegpu.cluster.driverchart import HOST_ROOT
from fakegpu.cluster.kind import config, hostpod
from fakegpu.cluster.kind.state import KindState
from fakegpu.cluster.process import WaitPolicy, run, wait_until
from fakegpu.deploy import chart_dir, manifests
from fakegpu.kube import api as kubeapi

CHART = chart_dir()  # the chart in the package (a link to deploy/helm/fakegpu in a checkout)
RELEASE = manifests.RELEASE  # fakegpu's driver; the embedded provider renders its objects too
NAMESPACE = manifests.NAMESPACE
NODES_RELEASE = "fakegpu-nodes"
# Where each worker carries the tools prepared claims' containers get (chart values
# nvmlInContainers.*): fakegpu's static nvidia-smi and the fake libnvidia-ml.so.1.
NODE_TOOLS = {"nvidiaSmi": f"{HOST_ROOT}/bin/nvidia-smi",
              "library": f"{HOST_ROOT}/lib/libnvidia-ml.so.1"}


@dataclass(frozen=True)
class Release:
    """One Helm release: what ``helm upgrade --install`` gets."""

    name: str
    chart: str
    namespace: str
    args: tuple[str, ...]  # values: --set ..., -f FILE ...
    images: tuple[str, ...] = ()  # loaded into the workers before the install


def _common(st: KindState) -> list[str]:
    """What both of fakegpu's releases are given: the topology, the image, the workers."""
    repo, tag = st.plugin_image.rsplit(":", 1)
    return ["--set-file", f"topology={st.topology}", "--set", f"image.repository={repo}",
            "--set", f"image.tag={tag}",
            "--set-string", f"nodeSelector.{config.WORKER_LABEL.replace('.', chr(92) + '.')}"
                            "=true"]


def nodes_release(st: KindState) -> Release:
    return Release(NODES_RELEASE, str(CHART), NAMESPACE, (
        *_common(st), "--set", "driver.enabled=false", "--set", "fakeNodes.enabled=true"))


def nic_values(nic_driver: str) -> list[str]:
    """The chart's settings for the cluster's NIC driver ("" runs none)."""
    if not nic_driver:
        return ["--set", "nics.enabled=false"]
    return ["--set", f"nics.driverName={nic_driver}"]


def driver_release(st: KindState) -> Release:
    """The cluster's DRA driver: the vendor's chart as given, else fakegpu's own."""
    vendor = st.driver_chart()
    if vendor is not None:
        return Release(vendor.release, vendor.chart, vendor.namespace,
                       tuple(a for f in vendor.values for a in ("-f", f)), vendor.images)
    return Release(RELEASE, str(CHART), NAMESPACE, (
        *_common(st), "--set", f"driverName={st.driver}",
        # The IMEX daemon pods (ComputeDomains) run the workload image every node has.
        "--set", f"computeDomains.daemonImage={st.workload_image}",
        "--set", "nvmlInContainers.enabled=true",
        *(a for key, path in NODE_TOOLS.items()
          for a in ("--set", f"nvmlInContainers.{key}={path}")),
        *nic_values(st.nic_driver)))


def install(helm: Path, st: KindState, release: Release,
            load_image: Callable[[str], None]) -> None:
    for image in release.images:
        load_image(image)
    run([str(helm), "upgrade", "--install", release.name, release.chart, "--kubeconfig",
         str(st.kubeconfig), "-n", release.namespace, "--create-namespace", *release.args],
        timeout=300)


def _ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def hosts_ready(pods: Sequence[dict[str, Any]], workers: Sequence[str]) -> list[str]:
    """The workers whose fake node pod is not Ready yet (empty: all are). Pure."""
    ready = {p["spec"].get("nodeName") for p in pods if hostpod.is_host(p) and _ready(p)}
    return [w for w in workers if w not in ready]


def wait_hosts(st: KindState, policy: WaitPolicy) -> None:
    def all_ready() -> bool:
        with kubeapi.session(st.kubeconfig) as api:
            return not hosts_ready(kubeapi.pods(api, NAMESPACE), st.workers)

    wait_until("a Ready fake node pod (its NVIDIA host built) on every worker", all_ready,
               policy)
