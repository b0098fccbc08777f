"""Another vendor's kubelet plugin on a fakegpu cluster (``cluster up --plugin-bin``).

The plugin runs instead of fakegpu's (or beside it, ``--plugin-beside``) on every node, with
the same identity fakegpu's plugin has (the chart's service account, a token bound to the node)
and, through ``pluginhost``, the NVIDIA host built from the node's NVML state. Its command line
is the user's ``--plugin-arg`` list, after the preset's, with per-node placeholders filled in:

``{node}`` node name, ``{kubeconfig}`` the plugin's kubeconfig, ``{kubelet_root}``,
``{registrar_dir}`` (the kubelet's plugins_registry), ``{plugins_dir}`` (the kubelet's
plugins/), ``{cdi_root}`` (the node's CDI dir, read by its containerd), ``{driver_root}`` (the
NVIDIA driver root), ``{state_dir}`` (a directory of the plugin's own), ``{image}`` (the
cluster's workload image), ``{namespace}`` (the chart's namespace).
"""

from __future__ import annotations

import os
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakegpu import drivers
from fakegpu.errors import InvalidInput

PLACEHOLDERS = ("node", "kubeconfig", "kubelet_root", "registrar_dir", "plugins_dir",
                "cdi_root", "driver_root", "state_dir", "image", "namespace")

# What NVIDIA's gpu-kubelet-plugin (v0.4.0 era) needs on a fakegpu node: the driver root from
# pluginhost, as host and container root alike (its CDI specs then name host paths, which
# containerd on this host resolves); the no-op nvidia-cdi-hook there; the required image name.
PRESETS: dict[str, tuple[str, ...]] = {
    "nvidia": (
        "--node-name={node}", "--namespace={namespace}", "--cdi-root={cdi_root}",
        "--nvidia-driver-root={driver_root}", "--container-driver-root={driver_root}",
        "--nvidia-cdi-hook-path={driver_root}/usr/bin/nvidia-cdi-hook",
        "--image-name={image}", "--kubeconfig={kubeconfig}",
        "--kubelet-registrar-directory-path={registrar_dir}",
        "--kubelet-plugins-directory-path={plugins_dir}",
    ),
    # kubernetes-sigs/dra-example-driver's kubelet plugin (driver gpu.example.com).
    "dra-example": (
        "--node-name={node}", "--cdi-root={cdi_root}", "--kubeconfig={kubeconfig}",
        "--kubelet-registrar-directory-path={registrar_dir}",
        "--kubelet-plugins-directory-path={plugins_dir}",
    ),
}
PRESET_DRIVERS = {"nvidia": drivers.NVIDIA, "dra-example": "gpu.example.com"}


@dataclass(frozen=True)
class ExternalPlugin:
    binary: Path
    args: tuple[str, ...] = ()
    preset: str | None = None
    driver: str | None = None  # the DRA driver name it publishes; None: the cluster's
    beside: bool = False  # also run fakegpu's own plugin
    env: Mapping[str, str] = field(default_factory=dict)
    # Shown at /templates in its mount namespace (NVIDIA's reads its MPS daemon's Deployment
    # from there, a path in its container image); None: no /templates.
    templates: Path | None = None

    def argv(self, values: Mapping[str, str]) -> list[str]:
        """The plugin's command line for one node (``values``: every PLACEHOLDERS name)."""
        args = [*PRESETS.get(self.preset or "", ()), *self.args]
        return [str(self.binary), *(expand(a, values) for a in args)]

    def driver_name(self, cluster_driver: str) -> str:
        return self.driver or PRESET_DRIVERS.get(self.preset or "", cluster_driver)

    def to_json(self) -> dict[str, Any]:
        return {"binary": str(self.binary), "args": list(self.args), "preset": self.preset,
                "driver": self.driver, "beside": self.beside, "env": dict(self.env),
                "templates": str(self.templates) if self.templates else None}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ExternalPlugin:
        return cls(binary=Path(doc["binary"]), args=tuple(doc.get("args", ())),
                   preset=doc.get("preset"), driver=doc.get("driver"),
                   beside=bool(doc.get("beside")), env=dict(doc.get("env") or {}),
                   templates=Path(doc["templates"]) if doc.get("templates") else None)


def expand(arg: str, values: Mapping[str, str]) -> str:
    """``arg`` with its ``{placeholder}``s filled in; an unknown one is bad input."""
    fields = [f for _, f, _, _ in string.Formatter().parse(arg) if f is not None]
    unknown = [f for f in fields if f not in PLACEHOLDERS]
    if unknown:
        raise InvalidInput(f"--plugin-arg {arg!r}: unknown placeholder {{{unknown[0]}}} "
                           f"(known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)})")
    return arg.format_map(values)


def parse(binary: Path, args: Sequence[str], *, preset: str | None, driver: str | None,
          beside: bool, env: Sequence[str], templates: Path | None = None) -> ExternalPlugin:
    """The ``cluster up`` options as an ExternalPlugin; bad input names the option."""
    if not binary.is_file() or not os.access(binary, os.X_OK):
        raise InvalidInput(f"--plugin-bin {binary}: not an executable file")
    if templates is not None and not templates.is_dir():
        raise InvalidInput(f"--plugin-templates {templates}: not a directory (expected the "
                           "plugin's templates, e.g. templates/ of its checkout)")
    if preset is not None and preset not in PRESETS:
        raise InvalidInput(f"--plugin-preset {preset!r}: expected one of {', '.join(PRESETS)}")
    pairs: dict[str, str] = {}
    for item in env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidInput(f"--plugin-env {item!r}: expected NAME=VALUE")
        pairs[key] = value
    plugin = ExternalPlugin(binary=binary.resolve(), args=tuple(args), preset=preset,
                            driver=driver, beside=beside, env=pairs,
                            templates=templates.resolve() if templates else None)
    plugin.argv(dict.fromkeys(PLACEHOLDERS, "x"))  # unknown placeholders fail now, not per node
    return plugin


def cluster_objects(plugin: ExternalPlugin, cluster_driver: str, *, name: str, namespace: str,
                    service_account: str, resource_api: str) -> list[dict[str, Any]]:
    """What the cluster needs for a plugin whose driver name is not the cluster's: the right
    to write status.devices of its own claims (from 1.36 checked per driver name on
    ``resourceclaims/driver``; the chart's role names the cluster's driver only) and a
    DeviceClass named after the driver selecting all its devices, as a vendor's chart has."""
    driver = plugin.driver_name(cluster_driver)
    objects = mps_rbac(name, namespace, service_account) if plugin.preset == "nvidia" else []
    if driver == cluster_driver:
        return objects
    role = f"{name}-{driver}"
    return [*objects,
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": role},
         "rules": [{"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/driver"],
                    "verbs": ["associated-node:update", "associated-node:patch"],
                    "resourceNames": [driver]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": role},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": role},
         "subjects": [{"kind": "ServiceAccount", "name": service_account,
                       "namespace": namespace}]},
        {"apiVersion": resource_api, "kind": "DeviceClass", "metadata": {"name": driver},
         "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{driver}'"}}]}},
    ]


def mps_rbac(name: str, namespace: str, service_account: str) -> list[dict[str, Any]]:
    """What NVIDIA's chart grants its kubelet plugin for MPS: it runs each claim's MPS control
    daemon as a Deployment in its namespace and waits for its pod to be ready."""
    role = f"{name}-nvidia-mps"
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": role, "namespace": namespace},
         "rules": [{"apiGroups": ["apps"], "resources": ["deployments"],
                    "verbs": ["get", "list", "watch", "create", "delete"]},
                   {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": role, "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
         "subjects": [{"kind": "ServiceAccount", "name": service_account,
                       "namespace": namespace}]},
    ]
