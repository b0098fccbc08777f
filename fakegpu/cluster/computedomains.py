"""ComputeDomains on the embedded provider: the compute-domain plugin beside each GPU node's
fakegpu plugin, and the controller, all host processes like the provider's other components.

The kind provider runs the same commands from the Helm chart (a second plugin container and
a Deployment). Process names: ``cd-plugin/<node>`` and ``cd-controller``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from fakegpu.cluster.node import NodeLayout
from fakegpu.cluster.process import ProcessRecord, spawn
from fakegpu.deploy.manifests import NAMESPACE

PLUGIN = "cd-plugin"
CONTROLLER = "cd-controller"


def domain(gpu_driver: str) -> str:
    """The ComputeDomain names' domain for a GPU driver (gpu.nvidia.com -> nvidia.com)."""
    return gpu_driver.removeprefix("gpu.")


def start_plugin(layout: NodeLayout, gpu_driver: str, nvml_env: Mapping[str, str]
                 ) -> ProcessRecord:
    """The node's compute-domain plugin; NVML as the node's GPU plugin sees it (the fabric)."""
    env = {**os.environ, **nvml_env}
    return spawn(f"{PLUGIN}/{layout.name}", [
        sys.executable, "-m", "fakegpu", "computedomain", "plugin",
        "--node-name", layout.name,
        "--domain", domain(gpu_driver),
        "--kubeconfig", str(layout.plugin_kubeconfig),
        "--kubelet-root", str(layout.kubelet_root),
        "--cdi-root", str(layout.cdi_dir),
        "--state-dir", str(layout.root / PLUGIN),
    ], layout.log_dir / f"{PLUGIN}.log", env=env)


def start_controller(kubeconfig: Path, gpu_driver: str, image: str, log_dir: Path
                     ) -> ProcessRecord:
    return spawn(CONTROLLER, [
        sys.executable, "-m", "fakegpu", "computedomain", "controller",
        "--domain", domain(gpu_driver),
        "--namespace", NAMESPACE,
        "--daemon-image", image,
        "--kubeconfig", str(kubeconfig),
    ], log_dir / f"{CONTROLLER}.log")
