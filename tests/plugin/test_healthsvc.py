"""The DRAResourceHealth service over a real unix socket, the test playing the kubelet:
both versions, full reports, a report at once on a change, the timeout field, registration
advertising it, and stop ending the streams."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from fakegpu.kubeletplugin import health as healthsvc
from fakegpu.kubeletplugin.health import DeviceStatus, HealthStreams
from fakegpu.kubeletplugin.proto import (
    dra_health_v1_pb2,
    dra_health_v1_pb2_grpc,
    dra_health_v1alpha1_pb2,
    dra_health_v1alpha1_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
)
from fakegpu.kubeletplugin.server import PluginServers
from fakegpu.kubeletplugin.sockets import socket_paths
from fakegpu.plugin.discovery import Inventory
from fakegpu.plugin.driver import Devices, Driver, DriverConfig
from fakegpu.plugin.healthsvc import device_statuses

from .helpers import DRIVER, NODE, ClaimStore, gpu, inventory

STUBS = {"v1": (dra_health_v1_pb2, dra_health_v1_pb2_grpc),
         "v1alpha1": (dra_health_v1alpha1_pb2, dra_health_v1alpha1_pb2_grpc)}


def test_contract() -> None:
    for version, (pb, _grpc) in STUBS.items():
        assert pb.DESCRIPTOR.package == version
        assert pb.DESCRIPTOR.services_by_name["DRAResourceHealth"].full_name == \
            f"{version}.DRAResourceHealth"
        fields = {f.name: f.number for f in pb.DeviceHealth.DESCRIPTOR.fields}
        assert fields == {"device": 1, "health": 2, "last_updated_time": 3,
                          "health_check_timeout_seconds": 4, "message": 5}
        assert {f.name: f.number for f in pb.DeviceIdentifier.DESCRIPTOR.fields} == {
            "pool_name": 1, "device_name": 2}
        assert dict(pb.HealthStatus.items()) == {"UNKNOWN": 0, "HEALTHY": 1, "UNHEALTHY": 2}


def test_statuses_follow_the_slices_taints() -> None:
    inv = inventory(3)
    lost = Inventory(inv.driver_version, inv.cuda_driver_version,
                     (*inv.devices[:2], dataclasses.replace(gpu(2), lost=True)))
    taints = {"gpu-0": [{"key": f"{DRIVER}/xid", "value": "79", "effect": "NoSchedule"}],
              "gpu-1": [{"key": f"{DRIVER}/xid", "value": "13", "effect": "None"}]}
    assert device_statuses(DRIVER, lost, taints) == [
        DeviceStatus("gpu-0", "UNHEALTHY", f"{DRIVER}/xid=79"),
        DeviceStatus("gpu-1", "HEALTHY", f"{DRIVER}/xid=13"),  # informational only
        DeviceStatus("gpu-2", "UNHEALTHY", f"{DRIVER}/gpu-lost")]
    # NVIDIA's driver: a lost GPU makes every device of the node unhealthy.
    assert {s.health for s in device_statuses(DRIVER, lost, {}, node_wide_lost=True)} == \
        {"UNHEALTHY"}


class Source:
    def __init__(self) -> None:
        self.bad: set[str] = set()

    def __call__(self) -> list[DeviceStatus]:
        return [DeviceStatus(f"gpu-{i}", "UNHEALTHY" if f"gpu-{i}" in self.bad else "HEALTHY")
                for i in range(2)]


@pytest.fixture
def served(short_tmp: Path) -> Iterator[tuple[PluginServers, HealthStreams, Source]]:
    source = Source()
    streams = HealthStreams(NODE, source, interval_s=600, timeout_s=45)
    cfg = DriverConfig(driver=DRIVER, node=NODE, state_dir=short_tmp / "state",
                       cdi_root=short_tmp / "cdi", instance="", write_status=True)
    servers = PluginServers(Driver(cfg, ClaimStore(), Devices(inventory)),
                            socket_paths(short_tmp, DRIVER), extra=streams)
    yield servers, streams, source
    servers.stop(1)


def _health(report: Any) -> dict[str, str]:
    return {d.device.device_name: type(report).DESCRIPTOR.file.enum_types_by_name[
        "HealthStatus"].values_by_number[d.health].name for d in report.devices}


@pytest.mark.parametrize("version", ["v1", "v1alpha1"])
def test_a_change_is_reported_at_once_and_every_report_is_full(
        served: tuple[PluginServers, HealthStreams, Source], version: str) -> None:
    servers, streams, source = served
    pb, stubs = STUBS[version]
    channel = grpc.insecure_channel(f"unix://{servers.paths.dra}")
    stream = stubs.DRAResourceHealthStub(channel).NodeWatchResources(
        pb.NodeWatchResourcesRequest(), timeout=60)
    first = next(stream)
    assert _health(first) == {"gpu-0": "HEALTHY", "gpu-1": "HEALTHY"}
    assert {(d.device.pool_name, d.health_check_timeout_seconds) for d in first.devices} == \
        {(NODE, 45)}
    source.bad.add("gpu-1")
    streams.wake()  # the interval is 600 s: only the wake-up can explain the next report
    second = next(stream)
    assert _health(second) == {"gpu-0": "HEALTHY", "gpu-1": "UNHEALTHY"}
    by_name = {d.device.device_name: d for d in second.devices}
    assert by_name["gpu-1"].last_updated_time >= by_name["gpu-0"].last_updated_time > 0
    source.bad.clear()
    streams.wake()
    assert _health(next(stream)) == {"gpu-0": "HEALTHY", "gpu-1": "HEALTHY"}
    stream.cancel()
    channel.close()


def test_registration_advertises_health_and_stop_ends_the_stream(
        served: tuple[PluginServers, HealthStreams, Source]) -> None:
    servers, _streams, _source = served
    with grpc.insecure_channel(f"unix://{servers.paths.registration}") as channel:
        info = pluginregistration_pb2_grpc.RegistrationStub(channel).GetInfo(
            pluginregistration_pb2.InfoRequest(), timeout=10)
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin",
                                             *healthsvc.SUPPORTED_VERSIONS]
    channel = grpc.insecure_channel(f"unix://{servers.paths.dra}")
    stream = dra_health_v1_pb2_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
        dra_health_v1_pb2.NodeWatchResourcesRequest(), timeout=60)
    next(stream)
    ended = threading.Event()

    def drain() -> None:
        for _ in stream:
            pass
        ended.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    servers.stop(5)
    reader.join(30)
    assert ended.is_set()
    channel.close()
