"""What each node's kubelet says about the driver, through the Kubernetes API only.

Registration: the kubelet's plugin manager exports ``plugin_manager_total_plugins{socket_path,
state}``; a plugin in ``state="actual_state_of_world"`` has completed registration (the
kubelet called its GetInfo and accepted it), one only in ``desired_state_of_world`` was found
but not registered. The metric names the registration socket, not the driver, so the driver's
socket is the one whose file name starts with the driver's name (``<driver>-reg.sock``: the
name the kubelet plugin libraries give it). The kubelet's /metrics is read through the API
server's node proxy (``/api/v1/nodes/NODE/proxy/metrics``), so no node access is needed.

Unprepare: KEP-5970's draft names ``FailedUnprepareDynamicResources`` events, but no kubelet up
to v1.38.0-beta.0 records that reason (it is in neither release's source: a failed unprepare is
only logged, and the pod stays terminating until a retry succeeds). So a failed unprepare is
also read where the kubelet does count it: ``dra_grpc_operations_duration_seconds_count`` of the
driver's NodeUnprepareResources calls with a ``grpc_status_code`` other than OK, and
``dra_operations_duration_seconds_count{operation_name="UnprepareResources",is_error="true"}``
(any driver: it also counts a per-claim error inside an OK reply). A counter that grows while
the check's pods are deleted is a failed unprepare, even one a retry then fixed. Kubelets before
1.36 set that label inverted (``strconv.FormatBool(err == nil)`` in pkg/kubelet/cm/dra/
manager.go of v1.34.4 and v1.35.4; ``isError := err != nil`` from v1.36.3): there every
successful unprepare counts as ``is_error="true"``, so on such a node the error count is the
``"false"`` one. The node's kubelet minor is read from its ``status.nodeInfo.kubeletVersion``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import PurePosixPath
from typing import Any

PLUGINS_METRIC = "plugin_manager_total_plugins"
REGISTERED_STATE = "actual_state_of_world"
FAILED_UNPREPARE = "FailedUnprepareDynamicResources"

GRPC_COUNT = "dra_grpc_operations_duration_seconds_count"
OPERATIONS_COUNT = "dra_operations_duration_seconds_count"
_UNPREPARE_METHOD = "/NodeUnprepareResources"

_SAMPLE = re.compile(rf"^{PLUGINS_METRIC}\{{([^}}]*)\}}\s+(\S+)", re.M)
_ANY_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}\s+(\S+)", re.M)
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


# The first kubelet minor whose DRA operations metric labels a failure is_error="true".
IS_ERROR_FIXED_MINOR = 36


def unprepare_errors(driver: str, metrics: str, minor: int | None = None) -> dict[str, float]:
    """The kubelet's counters of failed unprepares (see the module's docstring), by a name
    that says which; a counter never seen is absent (zero). ``minor``: the kubelet's (None:
    a current one), for the inverted ``is_error`` label of kubelets before 1.36."""
    error_label = "false" if minor is not None and minor < IS_ERROR_FIXED_MINOR else "true"
    counts: dict[str, float] = {}
    for sample in _ANY_SAMPLE.finditer(metrics):
        name, labels = sample.group(1), dict(_LABEL.findall(sample.group(2)))
        try:
            value = float(sample.group(3))
        except ValueError:
            continue
        if (name == GRPC_COUNT and labels.get("driver_name") == driver
                and labels.get("method_name", "").endswith(_UNPREPARE_METHOD)
                and labels.get("grpc_status_code") != "OK"):
            code = labels.get("grpc_status_code")
            key = f"NodeUnprepareResources calls to {driver} ending {code}"
        elif (name == OPERATIONS_COUNT and labels.get("operation_name") == "UnprepareResources"
              and labels.get("is_error") == error_label):
            key = "UnprepareResources operations ending in error (any driver)"
        else:
            continue
        counts[key] = counts.get(key, 0.0) + value
    return counts


def grown(node: str, before: dict[str, float], after: dict[str, float]) -> list[str]:
    """One line per counter of ``unprepare_errors`` that grew on ``node``."""
    return [f"node {node}: {key}: {before.get(key, 0.0):g} -> {value:g}"
            for key, value in sorted(after.items()) if value > before.get(key, 0.0)]
