"""What each node's kubelet says about the driver, through the Kubernetes API only.

Registration: the kubelet's plugin manager exports ``plugin_manager_total_plugins{socket_path,
state}``; a plugin in ``state="actual_state_of_world"`` has completed registration (the
kubelet called its GetInfo and accepted it), one only in ``desired_state_of_world`` was found
but not registered. The metric names the registration socket, not the driver, so the driver's
socket is the one whose file name starts with the driver's name (``<driver>-reg.sock``: the
name the kubelet plugin libraries give it). The kubelet's /metrics is read through the API
server's node proxy (``/api/v1/nodes/NODE/proxy/metrics``), so no node access is needed.

Unprepare: the kubelet records a ``FailedUnprepareDynamicResources`` event on the pod each
time the driver's NodeUnprepareResources fails.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import PurePosixPath
from typing import Any

from fakegpu.kube import api as kubeapi

PLUGINS_METRIC = "plugin_manager_total_plugins"
REGISTERED_STATE = "actual_state_of_world"
FAILED_UNPREPARE = "FailedUnprepareDynamicResources"

_SAMPLE = re.compile(rf"^{PLUGINS_METRIC}\{{([^}}]*)\}}\s+(\S+)", re.M)
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def registered_sockets(metrics: str) -> list[str]:
    """Socket paths the kubelet's plugin manager has registered, from its /metrics text."""
    found: list[str] = []
    for sample in _SAMPLE.finditer(metrics):
        labels = dict(_LABEL.findall(sample.group(1)))
        try:
            count = float(sample.group(2))
        except ValueError:
            continue
        if labels.get("state") == REGISTERED_STATE and count >= 1 and "socket_path" in labels:
            found.append(labels["socket_path"])
    return sorted(found)


def driver_socket(driver: str, sockets: Iterable[str]) -> str | None:
    """The socket of ``driver`` among ``sockets``: its file name starts with the driver's name
    followed by ``-`` or ``_`` (``gpu.example.com-reg.sock``). Not ``.``: driver names are DNS
    names, so ``gpu.example`` must not claim ``gpu.example.com``'s socket."""
    name = re.compile(rf"{re.escape(driver)}[-_]")
    return next((s for s in sockets if name.match(PurePosixPath(s).name)), None)


def registration_problem(driver: str, node: str, metrics: str) -> str | None:
    """None when the kubelet of ``node`` has registered ``driver``; else why not, one line."""
    sockets = registered_sockets(metrics)
    if driver_socket(driver, sockets) is not None:
        return None
    if PLUGINS_METRIC not in metrics:
        return (f"node {node}: the kubelet's /metrics has no {PLUGINS_METRIC}: no plugin is "
                f"registered with it, {driver} included")
    return (f"node {node}: the kubelet has not registered driver {driver}: no registration "
            f"socket named {driver}-... in its {REGISTERED_STATE} (registered: "
            f"{', '.join(sockets) or 'none'})")


def read_metrics(api: Any, node: str) -> str:
    """The Prometheus text of ``node``'s kubelet /metrics, through the API server's proxy."""
    path = f"/api/v1/nodes/{node}/proxy/metrics"
    return kubeapi.get(api, path, timeout=30).decode(errors="replace")


def failed_unprepares(events: Iterable[Any]) -> list[str]:
    """One line per FailedUnprepareDynamicResources event (kubernetes client CoreV1Event)."""
    lines = []
    for ev in events:
        if ev.reason != FAILED_UNPREPARE:
            continue
        obj = ev.involved_object
        source = getattr(ev, "source", None)
        host = getattr(source, "host", None) or "?"
        lines.append(f"{obj.kind} {obj.name} on node {host}: {ev.message} "
                     f"(x{ev.count or 1})")
    return lines
