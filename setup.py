"""Build hooks; all metadata lives in pyproject.toml.

What is built, never committed: the fake ``libnvidia-ml.so.1`` (C, against NVIDIA's official
nvml.h from the nvidia-nvml-dev build requirement), the static ``nvidia-smi``, ``nvbandwidth``
and ``podresources`` on its sources, and the kubelet gRPC stubs (grpcio-tools from our own
.proto files). A regular build puts them in build_lib; an editable install puts them beside the
sources, so both carry them.

The wheel is tagged ``py3-none-manylinux_X_Y_<arch>``: nothing in it links against Python (the
library is loaded with dlopen, the programs are static), so one wheel serves every CPython 3.11+;
X.Y is the newest glibc symbol version the library needs, read from the built file.
"""

from __future__ import annotations

import importlib
import importlib.util
import platform
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
from setuptools.command.build_py import build_py as _build_py

ROOT = Path(__file__).resolve().parent
LIBRARY = Path("fakegpu") / "nvml" / "lib" / "libnvidia-ml.so.1"
# The oldest glibc PEP 600 tags name on x86_64 and aarch64 (manylinux2014).
GLIBC_FLOOR = (2, 17)


def _load(relpath: str) -> ModuleType:
    """Import a stdlib-only build module by path: the package's dependencies are absent."""
    path = ROOT / relpath
    spec = importlib.util.spec_from_file_location(path.stem + "_build", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _static_programs(out: Path) -> None:
    """nvidia-smi, nvbandwidth and podresources, built as the package builds them on first use
    in a checkout.
    nvbandwidth compiles in the catalog's link speeds, so it imports the package (PyYAML is a
    build requirement for that)."""
    sys.path.insert(0, str(ROOT))
    try:
        nvidiasmi = importlib.import_module("fakegpu.nvidiasmi")
        program = importlib.import_module("fakegpu.bandwidth.program")
        podresources = importlib.import_module("fakegpu.podresources")
        nvidiasmi.build(out / "nvidiasmi" / "bin")
        program.build(out / "bandwidth" / "bin")
        podresources.build(out / "podresources" / "bin")
    finally:
        sys.path.remove(str(ROOT))


class build_py(_build_py):  # noqa: N801 - setuptools command naming
    def run(self) -> None:
        super().run()
        out = ROOT / "fakegpu" if self.editable_mode else Path(self.build_lib) / "fakegpu"
        _load("fakegpu/nvml/build.py").build_library(out / "nvml" / "lib")
        _load("fakegpu/kubeletplugin/proto/build.py").generate(out / "kubeletplugin" / "proto")
        _static_programs(out)


def glibc_needed(library: Path) -> tuple[int, int]:
    """The newest GLIBC_x.y symbol version ``library`` binds to (at least GLIBC_FLOOR)."""
    dynsyms = subprocess.run(["objdump", "-T", str(library)], capture_output=True, text=True,
                             check=True).stdout
    found = [(int(a), int(b)) for a, b in re.findall(r"GLIBC_(\d+)\.(\d+)", dynsyms)]
    return max([GLIBC_FLOOR, *found])


class BinaryDistribution(Distribution):
    """A native library inside: installed as platlib, the wheel not pure (its tag: below)."""

    def has_ext_modules(self) -> bool:
        return True


class bdist_wheel(_bdist_wheel):  # noqa: N801 - setuptools command naming
    def get_tag(self) -> tuple[str, str, str]:
        built = Path(self.get_finalized_command("build_py").build_lib) / LIBRARY
        if not built.exists():
            # An editable install tags its stub wheel before build_py has run; that wheel is
            # never distributed, so the default tag serves.
            return super().get_tag()
        major, minor = glibc_needed(built)
        return "py3", "none", f"manylinux_{major}_{minor}_{platform.machine()}"


setup(cmdclass={"build_py": build_py, "bdist_wheel": bdist_wheel}, distclass=BinaryDistribution)
