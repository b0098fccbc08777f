"""The kubelet-facing gRPC servers of every fakegpu kubelet plugin: registration, the DRA
service in v1 and v1beta1, and any further services on the same socket (the GPU plugin's
DRAResourceHealth).

Thin adapters: protobuf <-> ``claims.ClaimDriver`` calls. Handlers are thread-safe because the
drivers are (file lock + checkpoint reload per call). A malformed request is INVALID_ARGUMENT;
a claim that cannot be prepared is that claim's error string, never a failed call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any, Protocol

import grpc

from . import names
from .claims import ClaimDriver, ClaimRef
from .proto import dra_v1_pb2, dra_v1beta1_pb2, pluginregistration_pb2
from .sockets import SocketPaths

log = logging.getLogger(__name__)

# Short service names, preferred first: the kubelet takes the first it supports.
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
_DRA_SERVICES = {"v1": ("k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin", dra_v1_pb2),
                 "v1beta1": ("k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin", dra_v1beta1_pb2)}


class RegistrationService:
    def __init__(self, driver_name: str, endpoint: Path,
                 extra_versions: Sequence[str] = ()) -> None:
        self.driver_name = driver_name
        self.endpoint = endpoint
        # Optional services served on the same socket (DRAResourceHealth), advertised after
        # the DRA versions: the kubelet picks its DRA service from the known names only.
        self.supported_versions = [*SUPPORTED_VERSIONS, *extra_versions]
        self.registered: bool | None = None  # what the kubelet last told us

    def get_info(self, request: Any, context: grpc.ServicerContext) -> Any:
        return pluginregistration_pb2.PluginInfo(
            type="DRAPlugin", name=self.driver_name, endpoint=str(self.endpoint),
            supported_versions=list(self.supported_versions))

    def notify(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.registered = bool(request.plugin_registered)
        if request.plugin_registered:
            log.info("kubelet registered the plugin driver=%s", self.driver_name)
        else:
            log.error("kubelet refused the plugin driver=%s error=%s",
                      self.driver_name, request.error)
        return pluginregistration_pb2.RegistrationStatusResponse()

    def handler(self) -> grpc.GenericRpcHandler[Any, Any]:
        return grpc.method_handlers_generic_handler("pluginregistration.Registration", {
            "GetInfo": grpc.unary_unary_rpc_method_handler(
                self.get_info,
                request_deserializer=pluginregistration_pb2.InfoRequest.FromString,
                response_serializer=pluginregistration_pb2.PluginInfo.SerializeToString),
            "NotifyRegistrationStatus": grpc.unary_unary_rpc_method_handler(
                self.notify,
                request_deserializer=pluginregistration_pb2.RegistrationStatus.FromString,
                response_serializer=pluginregistration_pb2.RegistrationStatusResponse
                .SerializeToString),
        })


def _refs(request: Any, context: grpc.ServicerContext) -> list[ClaimRef]:
    """The request's claims, or INVALID_ARGUMENT when it cannot be answered claim by claim.

    The UID keys the answer and names the claim's files, so a missing or unsafe one (``/``,
    NUL, ``..``: see ``names``) fails the whole call. A bad namespace or name is that claim's
    own error (``Driver.prepare``).
    """
    refs = [ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid) for c in request.claims]
    for i, ref in enumerate(refs):
        missing = [f for f in ("namespace", "name", "uid") if not getattr(ref, f)]
        if missing:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"every claim needs namespace, name and uid; claim {i} has no "
                          f"{' and no '.join(missing)}")
    for ref in refs:
        if why := names.check("claim UID", ref.uid):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, why)
    if len({r.uid for r in refs}) != len(refs):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a claim UID appears twice")
    return refs


def dra_handler(driver: ClaimDriver, version: str) -> grpc.GenericRpcHandler[Any, Any]:
    """The DRAPlugin service of one API version; both versions share the driver."""
    service, pb = _DRA_SERVICES[version]

    def prepare(request: Any, context: grpc.ServicerContext) -> Any:
        results = driver.prepare(_refs(request, context))
        response = pb.NodePrepareResourcesResponse()
        for uid, result in results.items():
            entry = response.claims[uid]
            if result.error or result.claim is None:
                entry.error = result.error or "not prepared"
                continue
            for dev in result.claim.devices:
                out = entry.devices.add(request_names=list(dev.request_names),
                                        pool_name=dev.pool_name, device_name=dev.device_name,
                                        cdi_device_ids=list(dev.cdi_device_ids))
                if dev.share_id and version == "v1":  # share_id exists only in v1
                    out.share_id = dev.share_id
        return response

    def unprepare(request: Any, context: grpc.ServicerContext) -> Any:
        response = pb.NodeUnprepareResourcesResponse()
        for uid, error in driver.unprepare(_refs(request, context)).items():
            response.claims[uid].error = error
        return response

    def unary(fn: Callable[[Any, grpc.ServicerContext], Any], req: Any,
              resp: Any) -> grpc.RpcMethodHandler[Any, Any]:
        return grpc.unary_unary_rpc_method_handler(
            fn, request_deserializer=req.FromString, response_serializer=resp.SerializeToString)

    return grpc.method_handlers_generic_handler(service, {
        "NodePrepareResources": unary(prepare, pb.NodePrepareResourcesRequest,
                                      pb.NodePrepareResourcesResponse),
        "NodeUnprepareResources": unary(unprepare, pb.NodeUnprepareResourcesRequest,
                                        pb.NodeUnprepareResourcesResponse),
    })


def _listen(handlers: list[grpc.GenericRpcHandler[Any, Any]], path: Path,
            workers: int) -> grpc.Server:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # our own name: a leftover from a crash of this instance
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers,
                                                    thread_name_prefix=path.stem))
    server.add_generic_rpc_handlers(tuple(handlers))
    if server.add_insecure_port(f"unix://{path}") == 0:
        raise OSError(f"cannot listen on {path}")
    server.start()
    return server


class ExtraService(Protocol):
    """A further service on the DRA socket, advertised by its ``versions``."""

    @property
    def versions(self) -> Sequence[str]: ...

    def handlers(self) -> list[grpc.GenericRpcHandler[Any, Any]]: ...
    def stop(self) -> None: ...


class PluginServers:
    """Both servers of one instance. Start DRA first: registration announces its endpoint."""

    def __init__(self, driver: ClaimDriver, paths: SocketPaths, workers: int = 8,
                 extra: ExtraService | None = None) -> None:
        self.paths = paths
        self.registration = RegistrationService(
            driver.driver_name, paths.dra, extra.versions if extra else ())
        self._extra = extra
        self._dra = _listen([dra_handler(driver, "v1"), dra_handler(driver, "v1beta1"),
                             *(extra.handlers() if extra else ())], paths.dra, workers)
        try:
            self._reg = _listen([self.registration.handler()], paths.registration, 2)
        except BaseException:
            self._dra.stop(0)
            raise

    def stop(self, grace_s: float) -> None:
        """Stop accepting, let in-flight calls finish (up to grace_s), then unregister and
        remove our sockets.

        The registration goes last: the kubelet closes its connection to an instance the
        moment it sees that instance's registration socket go, which cut a prepare in flight
        (Unavailable, "use of closed network connection") during a rolling upgrade under
        load. Meanwhile new calls go to the newest registered instance (the kubelet prefers
        it), or fail and are retried when there is none."""
        if self._extra is not None:
            self._extra.stop()  # streams (health) never finish by themselves
        self._dra.stop(grace_s).wait()
        self._reg.stop(0).wait()
        self.paths.registration.unlink(missing_ok=True)
        self.paths.dra.unlink(missing_ok=True)
