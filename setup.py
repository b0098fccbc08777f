"""Build hooks; all metadata lives in pyproject.toml.

Two things are built, never committed: the fake ``libnvidia-ml.so.1`` (C, against NVIDIA's
official nvml.h from the nvidia-nvml-dev build requirement) and the kubelet gRPC stubs
(grpcio-tools from our own .proto files). A regular build puts them in build_lib; an editable
install puts them beside the sources, so both carry them.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py as _build_py

ROOT = Path(__file__).resolve().parent


def _load(relpath: str) -> ModuleType:
    """Import a build module by path: the package itself is not importable during the build."""
    path = ROOT / relpath
    spec = importlib.util.spec_from_file_location(path.stem + "_build", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class build_py(_build_py):  # noqa: N801 - setuptools command naming
    def run(self) -> None:
        super().run()
        out = ROOT / "fakegpu" if self.editable_mode else Path(self.build_lib) / "fakegpu"
        _load("fakegpu/nvml/build.py").build_library(out / "nvml" / "lib")
        _load("fakegpu/plugin/proto/build.py").generate(out / "plugin" / "proto")


class BinaryDistribution(Distribution):
    """The wheel carries a native library, so it is platform specific."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": build_py}, distclass=BinaryDistribution)
