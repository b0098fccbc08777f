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
from typing import Any

from kubernetes import client

from fakegpu import drivers, fsutil
from fakegpu.cluster.embedded.layout import NodeLayout
from fakegpu.cluster.kubeconfig import write_kubeconfig
from fakegpu.cluster.process import ProcessRecord, spawn
from fakegpu.deploy.manifests import NAMESPACE, RELEASE
from fakegpu.errors import FakegpuError

PLUGIN = "cd-plugin"
CONTROLLER = "cd-controller"
# The chart's service account of the controller (files/computedomain.yaml): the embedded
# controller runs with its token, so an RBAC gap fails here as on kind.
SERVICE_ACCOUNT = f"{RELEASE}-compute-domain-controller"
TOKEN_SECONDS = 365 * 24 * 3600


def domain(gpu_driver: str) -> str:
    """The ComputeDomain names' domain for a GPU driver (gpu.nvidia.com -> nvidia.com)."""
    return drivers.domain(gpu_driver)


def start_plugin(layout: NodeLayout, gpu_driver: str, nvml_env: Mapping[str, str]
                 ) -> ProcessRecord:
    """The node's compute-domain plugin; NVML as the node's GPU plugin sees it (the fabric)."""
    env = {**os.environ, **nvml_env}
    return spawn(f"{PLUGIN}/{layout.name}", [
        sys.executable, "-m", "fakegpu", "computedomain", "plugin",
        "--node", layout.name,
        "--domain", domain(gpu_driver),
        "--kubeconfig", str(layout.plugin_kubeconfig),
        "--kubelet-root", str(layout.kubelet_root),
        "--cdi-root", str(layout.cdi_dir),
        "--state-dir", str(layout.root / PLUGIN),
        "--namespace", NAMESPACE,  # the controller's: its daemon claims are made there
    ], layout.log_dir / f"{PLUGIN}.log", env=env)


def controller_credentials(api: client.ApiClient, directory: Path, *, server: str, ca: Path,
                           cluster: str) -> Path:
    """A kubeconfig with a token of the controller's service account (TokenRequest)."""
    core: Any = client.CoreV1Api(api)
    out = core.create_namespaced_service_account_token(
        SERVICE_ACCOUNT, NAMESPACE, {"apiVersion": "authentication.k8s.io/v1",
                                     "kind": "TokenRequest",
                                     "spec": {"expirationSeconds": TOKEN_SECONDS}})
    if out.status is None or not out.status.token:
        raise FakegpuError(f"TokenRequest for {NAMESPACE}/{SERVICE_ACCOUNT}: no token")
    token = directory / f"{CONTROLLER}.token"
    fsutil.atomic_write(token, str(out.status.token).strip(), mode=0o600)
    return write_kubeconfig(directory / f"{CONTROLLER}.kubeconfig", server=server, ca=ca,
                            token_file=token, cluster=cluster,
                            user=f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}")


def start_controller(kubeconfig: Path, gpu_driver: str, image: str, log_dir: Path
                     ) -> ProcessRecord:
    return spawn(CONTROLLER, [
        sys.executable, "-m", "fakegpu", "computedomain", "controller",
        "--domain", domain(gpu_driver),
        "--namespace", NAMESPACE,
        "--daemon-image", image,
        "--kubeconfig", str(kubeconfig),
    ], log_dir / f"{CONTROLLER}.log")
