"""The runtime floors in pyproject.toml are the ones the built stubs demand, and what only a
build needs is not a runtime dependency."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

from fakegpu.kubeletplugin import proto

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
BUILD_ONLY = {"grpcio-tools", "nvidia-nvml-dev"}


def _requirements(lines: list[str]) -> dict[str, Requirement]:
    reqs = [Requirement(line) for line in lines]
    return {r.name: r for r in reqs}


def _stub_versions() -> tuple[set[Version], set[Version]]:
    """(protobuf versions the *_pb2 stubs validate, grpcio versions the *_pb2_grpc stubs need)"""
    here = Path(proto.__file__).parent
    protobuf = {Version(".".join(m)) for f in here.glob("*_pb2.py") for m in re.findall(
        r"ValidateProtobufRuntimeVersion\(\s*\S+,\s*(\d+),\s*(\d+),\s*(\d+),", f.read_text())}
    grpc = {Version(m) for f in here.glob("*_pb2_grpc.py")
            for m in re.findall(r"GRPC_GENERATED_VERSION = '([^']+)'", f.read_text())}
    return protobuf, grpc


def test_the_stubs_floors_are_the_runtime_floors() -> None:
    protobuf, grpc = _stub_versions()
    assert len(protobuf) == 1 and len(grpc) == 1, (protobuf, grpc)  # one generator for all
    (gen_protobuf,), (gen_grpc,) = protobuf, grpc
    runtime = _requirements(PYPROJECT["project"]["dependencies"])
    # The stubs refuse another protobuf major and an older version of the same major.
    spec = runtime["protobuf"].specifier
    assert spec.contains(gen_protobuf)
    assert not spec.contains(Version(f"{gen_protobuf.major}.{gen_protobuf.minor - 1}"))
    assert not spec.contains(Version(f"{gen_protobuf.major + 1}.0"))
    assert not spec.contains(Version(f"{gen_protobuf.major - 1}.99"))
    assert runtime["grpcio"].specifier.contains(gen_grpc)
    assert str(runtime["grpcio"].specifier) == f">={gen_grpc}"


def test_the_build_pins_the_generator_the_floors_come_from() -> None:
    _protobuf, (gen_grpc,) = _stub_versions()
    build = _requirements(PYPROJECT["build-system"]["requires"])
    assert str(build["grpcio-tools"].specifier) == f"=={gen_grpc}"


def test_build_only_tools_are_no_runtime_dependencies() -> None:
    runtime = _requirements(PYPROJECT["project"]["dependencies"])
    build = _requirements(PYPROJECT["build-system"]["requires"])
    checkout = _requirements(PYPROJECT["project"]["optional-dependencies"]["build"])
    assert BUILD_ONLY.isdisjoint(runtime)
    assert set(build) >= BUILD_ONLY and set(checkout) >= BUILD_ONLY
    # The checkout's extra and the build install the same versions.
    assert all(build[n].specifier == checkout[n].specifier for n in BUILD_ONLY)
