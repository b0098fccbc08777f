"""What the embedded provider installs: exactly the Helm chart's shared objects, and plugin
credentials of the same kind the chart's pods have.

The objects come from :mod:`fakegpu.deploy.manifests` (the chart's ``files/``), rendered with the
values the kind provider installs the chart with, so an RBAC or admission-policy gap of the
plugin fails on both providers alike. The chart's plugin pods run as its service account with a
token bound to their pod, hence to their node; the embedded provider's plugins are host
processes, so each gets a token of the same service account bound to its Node object. The
apiserver then knows the plugin's node (user extra ``authentication.kubernetes.io/node-name``)
just as on kind: the admission policy and the ``associated-node:`` verbs work unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fakegpu import fsutil
from fakegpu.cluster.kubeconfig import write_kubeconfig
from fakegpu.deploy.manifests import Install, render

# The token lives as long as the Node object (deleting the node revokes it) or this long. A
# cluster is torn down long before; kubelets and plugins do not refresh a plugin's token here.
TOKEN_SECONDS = 365 * 24 * 3600


def objects(install: Install) -> list[dict[str, Any]]:
    """The chart's shared objects, after the namespace that Helm creates for the chart."""
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": install.namespace}}
    return [namespace, *render(install)]


def write_plugin_credentials(token: str, install: Install, *, kubeconfig: Path,
                             token_file: Path, server: str, ca: Path, cluster: str) -> Path:
    """Write a plugin's token (from TokenRequest, bound to its Node) and its kubeconfig."""
    # Exactly the token: the Python client sends a tokenFile's bytes as they are (a newline
    # makes an invalid header), unlike Go's.
    fsutil.atomic_write(token_file, token.strip(), mode=0o600)
    user = f"system:serviceaccount:{install.namespace}:{install.service_account}"
    return write_kubeconfig(kubeconfig, server=server, ca=ca, token_file=token_file,
                            cluster=cluster, user=user)
