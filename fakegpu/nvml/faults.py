"""Fault injection at run time: the change goes through the library's own lock and journal
(its private ``fakegpu_inject_fault`` / ``fakegpu_clear_fault`` helpers), so every process
using the node's state file sees it at once and waiters get the event."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

from fakegpu.errors import FakegpuError, InvalidInput
from fakegpu.topology.model import FaultKind

from . import env

_KIND_CODES = {
    FaultKind.XID: 1, FaultKind.ECC_DBE: 2, FaultKind.GPU_LOST: 3,
    FaultKind.NVLINK_DOWN: 4, FaultKind.FABRIC_DEGRADED: 5,
}
NEEDS_VALUE = {FaultKind.XID, FaultKind.NVLINK_DOWN}
_NVML_NAMES = {2: "invalid argument (GPU index, XID or link out of range)",
               3: "not supported by this GPU", 9: "state file missing",
               18: "state file from another layout version", 999: "state file corrupt"}


class FaultError(FakegpuError):
    """The library refused the change."""


@functools.cache
def _lib() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(env.library_path()))
    for fn in (lib.fakegpu_inject_fault, lib.fakegpu_clear_fault):
        fn.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.c_int, ctypes.c_longlong]
        fn.restype = ctypes.c_int
    lib.fakegpu_check_state.argtypes = [ctypes.c_char_p]
    lib.fakegpu_check_state.restype = ctypes.c_int
    return lib


def _kind(kind: FaultKind | str) -> FaultKind:
    try:
        return FaultKind(kind)
    except ValueError:
        names = ", ".join(k.value for k in FaultKind)
        raise InvalidInput(f"unknown fault {kind!r} (one of {names})") from None


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise FaultError(f"{what}: {_NVML_NAMES.get(rc, f'NVML error {rc}')}")


def inject(state_path: str | Path, gpu: int, kind: FaultKind | str,
           value: int | None = None) -> None:
    """Inject a fault into GPU ``gpu`` (NVML index) of the node whose state file is given."""
    k = _kind(kind)
    if k in NEEDS_VALUE and value is None:
        what = "the XID" if k is FaultKind.XID else "the link"
        raise InvalidInput(f"fault {k.value} needs a value ({what})")
    if gpu < 0:
        raise InvalidInput(f"GPU index {gpu} is negative")
    rc = _lib().fakegpu_inject_fault(str(state_path).encode(), gpu, _KIND_CODES[k],
                                     -1 if value is None else value)
    _check(rc, f"inject {k.value} into GPU {gpu}")


def clear(state_path: str | Path, gpu: int, kind: FaultKind | str | None = None,
          value: int | None = None) -> None:
    """Clear one kind of fault (all links for nvlink-down without a value), or all of them."""
    code = 0 if kind is None else _KIND_CODES[_kind(kind)]
    if gpu < 0:
        raise InvalidInput(f"GPU index {gpu} is negative")
    rc = _lib().fakegpu_clear_fault(str(state_path).encode(), gpu, code,
                                    -1 if value is None else value)
    _check(rc, f"clear faults of GPU {gpu}")


def check_state(state_path: str | Path) -> int:
    """The NVML code nvmlInit would answer for this state file (0: fine)."""
    return int(_lib().fakegpu_check_state(str(state_path).encode()))
