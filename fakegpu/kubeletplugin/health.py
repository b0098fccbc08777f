"""The kubelet's DRAResourceHealth service (KEP-4680), for every kubelet plugin: device health
into pod status.

The kubelet opens one ``NodeWatchResources`` stream per plugin (feature gate
ResourceHealthStatus: alpha to 1.35, beta from 1.36) and shows what it hears in
``status.containerStatuses[].allocatedResourcesStatus`` of every pod using a device. Each
message is a full report: a device left out, or not reported again within its
``health_check_timeout_seconds`` (30 s by default), reads ``Unknown``. So every stream sends
the node's devices at once, again whenever health may have changed (``wake``: the plugin's own
signal, an NVML event or a link file), and at least every ``interval_s``. A plugin gives only
its devices' statuses (a callable); a 1.34 kubelet opens the v1alpha1 stream whether or not it
is advertised, and logs every 5 s a plugin that does not serve it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc

from fakegpu.kubeletplugin.proto import dra_health_v1_pb2, dra_health_v1alpha1_pb2

log = logging.getLogger(__name__)

# Short service names for the registration's supported_versions, preferred first: a 1.37
# kubelet opens the health stream only when one is advertised; older ones try v1alpha1.
SUPPORTED_VERSIONS = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
_SERVICES = {"v1": dra_health_v1_pb2, "v1alpha1": dra_health_v1alpha1_pb2}
TIMEOUT_S = 30  # what the kubelet assumes when none is sent
HEALTHY, UNHEALTHY = "HEALTHY", "UNHEALTHY"


@dataclass(frozen=True)
class DeviceStatus:
    device: str
    health: str  # HEALTHY | UNHEALTHY
    message: str = ""


class HealthStreams:
    """Serves NodeWatchResources in v1 and v1alpha1 from one source of device statuses (on
    the DRA socket: ``server.ExtraService``)."""

    versions: tuple[str, ...] = SUPPORTED_VERSIONS

    def __init__(self, pool: str, statuses: Callable[[], list[DeviceStatus]],
                 interval_s: float = 10.0, timeout_s: int = TIMEOUT_S) -> None:
        self._pool, self._statuses = pool, statuses
        self._interval, self._timeout = interval_s, timeout_s
        self._changed = threading.Condition()
        self._turn = 0  # bumped by wake(): a stream waiting on an older turn sends again
        self._stopped = False
        self._since: dict[str, tuple[str, int]] = {}  # device -> (health, unix time of change)
        self._since_lock = threading.Lock()

    def wake(self) -> None:
        """Health may have changed: every stream sends a report now."""
        with self._changed:
            self._turn += 1
            self._changed.notify_all()

    def stop(self) -> None:
        """End every stream (the kubelet reconnects to another instance)."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()

    def _report(self, pb: Any) -> Any:
        now = int(time.time())
        statuses = self._statuses()
        response = pb.NodeWatchResourcesResponse()
        with self._since_lock:
            for s in statuses:
                old = self._since.get(s.device)
                if old is None or old[0] != s.health:
                    self._since[s.device] = (s.health, now)
                response.devices.add(
                    device=pb.DeviceIdentifier(pool_name=self._pool, device_name=s.device),
                    health=pb.HealthStatus.Value(s.health),
                    last_updated_time=self._since[s.device][1],
                    health_check_timeout_seconds=self._timeout, message=s.message)
        return response

    def _watch(self, pb: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        log.info("kubelet watches device health (%s)", pb.DESCRIPTOR.package)
        sent: Any = None
        while context.is_active():
            with self._changed:
                if self._stopped:
                    return
                turn = self._turn
            try:
                report = self._report(pb)
            except Exception:  # never end the stream over one bad reading: report next turn
                log.exception("cannot compute device health")
                report = sent
            if report is not None:
                sent = report
                yield report
            with self._changed:
                deadline = time.monotonic() + self._interval
                while self._turn == turn and not self._stopped and context.is_active():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._changed.wait(min(left, 1.0))  # 1 s: notice a cancelled stream

    def handler(self, version: str) -> grpc.GenericRpcHandler[Any, Any]:
        pb = _SERVICES[version]
        return grpc.method_handlers_generic_handler(f"{version}.DRAResourceHealth", {
            "NodeWatchResources": grpc.unary_stream_rpc_method_handler(
                lambda request, context: self._watch(pb, context),
                request_deserializer=pb.NodeWatchResourcesRequest.FromString,
                response_serializer=pb.NodeWatchResourcesResponse.SerializeToString),
        })

    def handlers(self) -> list[grpc.GenericRpcHandler[Any, Any]]:
        return [self.handler(v) for v in _SERVICES]
