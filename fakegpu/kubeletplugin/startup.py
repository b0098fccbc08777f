"""What a kubelet plugin checks before it serves, and asks before it removes its slices."""

from __future__ import annotations

import os
from pathlib import Path

from fakegpu.errors import InvalidInput, printable

from .sockets import SocketPaths, socket_alive


def usable_dir(flag: str, path: Path) -> None:
    """Make ``path`` (absolute: the kubelet and the runtime resolve it from elsewhere) or say in
    one line why it cannot be, before the servers, the checkpoint or a CDI spec fail on it."""
    if not path.is_absolute():
        raise InvalidInput(f"{flag}: {printable(str(path))} is a relative path, expected an "
                           "absolute one")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InvalidInput(f"{flag}: cannot create directory {printable(str(path))}: "
                           f"{err.strerror or err}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise InvalidInput(f"{flag}: directory {printable(str(path))} is not writable")


def other_instances_alive(kubelet_root: Path, driver: str, own: SocketPaths) -> bool:
    registry = kubelet_root / "plugins_registry"
    candidates = {*registry.glob(f"{driver}-reg.sock"), *registry.glob(f"{driver}-*-reg.sock")}
    return any(p != own.registration and socket_alive(p) for p in candidates)
