"""Build the fake ``libnvidia-ml.so.1`` from csrc/ against NVIDIA's official nvml.h.

Stdlib only: setup.py loads this file by path inside setuptools' isolated build environment
(where the nvidia-nvml-dev build requirement provides the header), and fakegpu.nvml.env calls
it at run time when the library is missing.

Steps: compile the hand-written sources, list the NVML names they define (nm), generate a
NOT_SUPPORTED stub for every other function the header declares, link with a version script
that exports only NVML names and ``fakegpu_*`` helpers. The result replaces the old file
atomically.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

LIBNAME = "libnvidia-ml.so.1"
HERE = Path(__file__).resolve().parent
CSRC = HERE / "csrc"
CFLAGS = [
    "-std=gnu11", "-O2", "-g0", "-fPIC", "-fvisibility=hidden", "-pthread",
    "-Wall", "-Wextra", "-Werror", "-DNVML_NO_UNVERSIONED_FUNC_DEFS",
]


class BuildError(RuntimeError):
    """The library could not be built; the message says what is missing or what failed."""


def find_header() -> Path:
    """nvml.h from $FAKEGPU_NVML_HEADER or the installed ``nvidia`` namespace package."""
    override = os.environ.get("FAKEGPU_NVML_HEADER")
    if override:
        path = Path(override)
        if not path.is_file():
            raise BuildError(f"FAKEGPU_NVML_HEADER={override} is not a file")
        return path
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec else []
    for root in roots:
        for candidate in sorted(Path(root).glob("*/include/nvml.h")):
            return candidate
    raise BuildError(
        "nvml.h not found: install the build requirement nvidia-nvml-dev "
        "(pip install nvidia-nvml-dev==13.5.37) or set FAKEGPU_NVML_HEADER"
    )


def _run(cmd: list[str]) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def _gen_stubs_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fakegpu_gen_stubs", HERE / "gen_stubs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def sources() -> list[Path]:
    return sorted(CSRC.glob("*.c"))


def build_library(out_dir: Path) -> Path:
    """Compile the library into ``out_dir/libnvidia-ml.so.1`` and return its path."""
    cc = os.environ.get("CC", "gcc")
    if shutil.which(cc) is None:
        raise BuildError(f"C compiler {cc!r} not found (install gcc)")
    header = find_header()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    gen = _gen_stubs_module()
    with tempfile.TemporaryDirectory(prefix="fakegpu-nvml-build-") as tmp:
        work = Path(tmp)
        flags = [*CFLAGS, f"-I{header.parent}", f"-I{CSRC}"]

        def compile_one(src: Path) -> Path:
            obj = work / (src.stem + ".o")
            _run([cc, *flags, "-c", str(src), "-o", str(obj)])
            return obj

        with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
            objects = list(pool.map(compile_one, sources()))
        defined = set()
        for line in _run(["nm", "-g", "--defined-only", *map(str, objects)]).splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[2].startswith("nvml"):
                defined.add(parts[2])
        stubs = work / "stubs.c"
        stubs.write_text(gen.render(gen.declarations(header), defined), encoding="utf-8")
        objects.append(compile_one(stubs))
        tmp_lib = work / LIBNAME
        _run([
            cc, "-shared", "-pthread", f"-Wl,-soname,{LIBNAME}",
            f"-Wl,--version-script={CSRC / 'exports.map'}", "-Wl,-z,defs",
            "-o", str(tmp_lib), *map(str, objects),
        ])
        final = out_dir / LIBNAME
        staged = out_dir / f".{LIBNAME}.{os.getpid()}.tmp"
        shutil.copyfile(tmp_lib, staged)
        os.chmod(staged, 0o755)
        os.replace(staged, final)
    return final


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "lib"
    print(build_library(target))
