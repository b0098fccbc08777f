"""Where a plugin instance's two unix sockets live, and whether one is served.

Kept apart from the gRPC server (stdlib only) because the kind plugin pod's readiness probe
imports it every two seconds: importing grpc there cost a third of a core on a 2-core host.
"""

from __future__ import annotations

import hashlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path

MAX_SOCKET_PATH = 107  # sun_path is 108 bytes including the NUL


@dataclass(frozen=True)
class SocketPaths:
    registration: Path
    dra: Path


def socket_paths(kubelet_root: Path, driver: str, instance_id: str = "") -> SocketPaths:
    """Where the kubelet looks: one pair per instance, so two instances can serve at once.

    An instance id too long for a unix socket path is replaced by a hash of itself: stable,
    so a restarted instance finds its own sockets again.
    """
    def paths(suffix: str) -> SocketPaths:
        return SocketPaths(
            Path(kubelet_root, "plugins_registry", f"{driver}{suffix}-reg.sock"),
            Path(kubelet_root, "plugins", driver, f"dra{suffix}.sock"))

    if not instance_id:
        chosen = paths("")
    else:
        chosen = paths(f"-{instance_id}")
        longest = max(len(os.fsencode(p)) for p in (chosen.registration, chosen.dra))
        if longest > MAX_SOCKET_PATH:
            digest = hashlib.sha256(instance_id.encode()).hexdigest()
            keep = max(8, len(instance_id) - (longest - MAX_SOCKET_PATH))
            chosen = paths(f"-{digest[:min(keep, len(digest))]}")
    for path in (chosen.registration, chosen.dra):
        if len(os.fsencode(path)) > MAX_SOCKET_PATH:
            raise ValueError(f"socket path {path} is longer than {MAX_SOCKET_PATH} bytes; "
                             "use a shorter --kubelet-root or driver name")
    return chosen


def socket_alive(path: Path) -> bool:
    """True when something accepts connections on the unix socket (a live plugin instance)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        try:
            sock.connect(str(path))
        except OSError:
            return False
        return True
