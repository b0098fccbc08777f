"""The wire contract: packages, services and field numbers as the kubelet defines them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.kubeletplugin.proto import build, dra_v1_pb2, dra_v1beta1_pb2, pluginregistration_pb2


def _fields(message: object) -> dict[str, int]:
    return {f.name: f.number for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]


def test_registration_contract() -> None:
    service = pluginregistration_pb2.DESCRIPTOR.services_by_name["Registration"]
    assert service.full_name == "pluginregistration.Registration"
    assert {m.name for m in service.methods} == {"GetInfo", "NotifyRegistrationStatus"}
    assert _fields(pluginregistration_pb2.PluginInfo) == {
        "type": 1, "name": 2, "endpoint": 3, "supported_versions": 4}
    assert _fields(pluginregistration_pb2.RegistrationStatus) == {
        "plugin_registered": 1, "error": 2}


@pytest.mark.parametrize(("pb", "version"), [(dra_v1_pb2, "v1"), (dra_v1beta1_pb2, "v1beta1")])
def test_dra_contract(pb: object, version: str) -> None:
    desc = pb.DESCRIPTOR  # type: ignore[attr-defined]
    assert desc.package == f"k8s.io.kubelet.pkg.apis.dra.{version}"
    assert desc.services_by_name["DRAPlugin"].full_name == \
        f"k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin"
    assert _fields(pb.Claim) == {"namespace": 1, "uid": 2, "name": 3}  # type: ignore[attr-defined]
    device = {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4}
    if version == "v1":
        device["share_id"] = 5
    assert _fields(pb.Device) == device  # type: ignore[attr-defined]
    assert _fields(pb.NodePrepareResourceResponse) == {"devices": 1, "error": 2}  # type: ignore[attr-defined]
    assert _fields(pb.NodeUnprepareResourceResponse) == {"error": 1}  # type: ignore[attr-defined]


def test_generate_into_a_fresh_package_dir(tmp_path: Path) -> None:
    """What setup.py does: the stubs land in out_dir and import as fakegpu.kubeletplugin.proto.*."""
    out = tmp_path / "fakegpu" / "plugin" / "proto"
    written = build.generate(out)
    assert sorted(p.name for p in written) == sorted(build.generated_names())
    assert not build.is_stale(out)
    grpc_module = (out / "dra_v1_pb2_grpc.py").read_text()
    assert "from fakegpu.kubeletplugin.proto import dra_v1_pb2" in grpc_module
    for pkg in (tmp_path / "fakegpu", tmp_path / "fakegpu" / "plugin", out):
        (pkg / "__init__.py").touch()
    probe = ("import fakegpu.kubeletplugin.proto.dra_v1_pb2_grpc as g, fakegpu; "
             f"assert fakegpu.__file__.startswith({str(tmp_path)!r}); print(g.DRAPluginStub)")
    subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, check=True)
