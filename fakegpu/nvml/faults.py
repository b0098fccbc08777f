"""Fault injection at run time: the change goes through the library's own lock and journal
(its private ``fakegpu_inject_fault`` / ``fakegpu_clear_fault`` helpers), so every process
using the node's state file sees it at once and waiters get the event."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

from fakegpu.errors import FakegpuError, InvalidInput, printable
from fakegpu.topology.model import MAX_XID, FaultKind

from . import env, state

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


def _validate(state_path: str | Path, gpu: int, kind: FaultKind | None, value: int | None,
              clear: bool) -> None:
    """Refuse a request the library would wrap or misread, before anything is written.

    ctypes passes the GPU index as a C unsigned int and the value as a long long, so an
    unchecked 4294967296 would become GPU 0; a value a fault does not take would be ignored.
    """
    for what, number in (("GPU index", gpu), ("value", value)):
        if number is not None and (not isinstance(number, int) or isinstance(number, bool)):
            raise InvalidInput(f"{what} {number!r} is not an integer")
    if kind is None or kind not in NEEDS_VALUE or (clear and kind is FaultKind.XID):
        if value is not None:
            what = f"fault {kind.value}" if kind is not None else "clearing every fault"
            raise InvalidInput(f"{what} takes no value (got {value})")
    elif value is None and not clear:
        what = "the XID" if kind is FaultKind.XID else "the link"
        raise InvalidInput(f"fault {kind.value} needs a value ({what})")
    if kind is FaultKind.XID and value is not None and not 1 <= value <= MAX_XID:
        raise InvalidInput(f"XID {value} is out of range, expected 1..{MAX_XID}")
    _check(check_state(state_path), f"state file {printable(str(state_path))}")
    gpus, links = _shape(state_path)
    if not 0 <= gpu < len(links):
        raise InvalidInput(f"GPU index {gpu} is out of range: the node has GPUs "
                           f"0..{gpus - 1}")
    if kind is FaultKind.NVLINK_DOWN and value is not None and not 0 <= value < links[gpu]:
        have = f"links 0..{links[gpu] - 1}" if links[gpu] else "no NVLinks"
        raise InvalidInput(f"link {value} is out of range: GPU {gpu} has {have}")


def _shape(state_path: str | Path) -> tuple[int, list[int]]:
    """(GPU count, NVLink count per GPU) from a state file the library has accepted."""
    with open(state_path, "rb") as handle:
        header = state.Header.from_buffer_copy(handle.read(ctypes.sizeof(state.Header)))
        links = []
        for i in range(header.gpu_count):
            handle.seek(header.header_size + i * header.gpu_size)
            static = state.GpuStatic.from_buffer_copy(
                handle.read(ctypes.sizeof(state.GpuStatic)))
            links.append(static.link_count)
    return header.gpu_count, links


def inject(state_path: str | Path, gpu: int, kind: FaultKind | str,
           value: int | None = None) -> None:
    """Inject a fault into GPU ``gpu`` (NVML index) of the node whose state file is given."""
    k = _kind(kind)
    _validate(state_path, gpu, k, value, clear=False)
    rc = _lib().fakegpu_inject_fault(str(state_path).encode(), gpu, _KIND_CODES[k],
                                     -1 if value is None else value)
    _check(rc, f"inject {k.value} into GPU {gpu}")


def clear(state_path: str | Path, gpu: int, kind: FaultKind | str | None = None,
          value: int | None = None) -> None:
    """Clear one kind of fault (all links for nvlink-down without a value), or all of them."""
    k = None if kind is None else _kind(kind)
    _validate(state_path, gpu, k, value, clear=True)
    rc = _lib().fakegpu_clear_fault(str(state_path).encode(), gpu,
                                    0 if k is None else _KIND_CODES[k],
                                    -1 if value is None else value)
    _check(rc, f"clear faults of GPU {gpu}")


def check_state(state_path: str | Path) -> int:
    """The NVML code nvmlInit would answer for this state file (0: fine)."""
    return int(_lib().fakegpu_check_state(str(state_path).encode()))
