"""The library itself: soname, exports (every name nvml.h declares, nothing else), layout."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

from fakegpu.nvml import build, gen_stubs, state


def _dynamic_symbols(lib: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                         text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def test_soname(libdir: Path) -> None:
    out = subprocess.run(["readelf", "-d", str(libdir / "libnvidia-ml.so.1")],
                         capture_output=True, text=True, check=True).stdout
    assert "Library soname: [libnvidia-ml.so.1]" in out


def test_exports_every_declared_function(libdir: Path) -> None:
    declared = {d.name for d in gen_stubs.declarations(build.find_header())}
    assert len(declared) > 400  # the parser found the header's API, not a handful
    exported = _dynamic_symbols(libdir / "libnvidia-ml.so.1")
    assert sorted(declared - exported) == []


def test_exports_nothing_else(libdir: Path) -> None:
    exported = _dynamic_symbols(libdir / "libnvidia-ml.so.1")
    strays = [s for s in exported if not s.startswith(("nvml", "fakegpu_"))]
    assert strays == []


def test_state_layout_matches_c(libdir: Path) -> None:
    lib = ctypes.CDLL(str(libdir / "libnvidia-ml.so.1"))
    lib.fakegpu_state_layout.restype = ctypes.c_char_p
    text = lib.fakegpu_state_layout().decode()
    c_layout = {k: int(v) for k, v in (item.split("=") for item in text.strip(";").split(";"))}
    py_layout = state.layout()
    assert len(c_layout) > 30
    assert {k: (v, py_layout.get(k)) for k, v in c_layout.items() if py_layout.get(k) != v} == {}


def test_build_into_fresh_dir(tmp_path: Path) -> None:
    lib = build.build_library(tmp_path / "out")
    assert lib.name == "libnvidia-ml.so.1" and lib.stat().st_size > 10_000
    assert "nvmlInit_v2" in _dynamic_symbols(lib)
