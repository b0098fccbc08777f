"""The node-side network interface a prepared NIC becomes, made with iproute2's ``ip``.

A veth pair stands for the port and its cable: the container end (with the NIC's MAC) is what
the runtime moves into the pod's network namespace and renames to the NIC's interface name
(CDI ``netDevices``, OCI ``linux.netDevices``); the other end stays on the node as the link's
far side, up while the NIC has a link (a ``nic-link-down`` fault takes it down: the pod's
interface then has no carrier). A veth, not a ``dummy`` link: kernels without the dummy
driver (this project's CI VM) have veth, and the kernel destroys both ends when the pod's
namespace goes, so nothing is left behind by a pod; unprepare deletes the pair when the pod
never took it.

Host names are unique per node and NIC (embedded nodes share the host's network namespace):
``fn`` + 11 hex digits of a hash of the node's state directory and the device, ``w`` added
for the wire end; 14 characters at most (the kernel allows 15).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import dataclass

TIMEOUT_S = 10.0


class NetdevError(Exception):
    """A link could not be made or removed; the message names it and ip's answer."""


@dataclass(frozen=True)
class HostLink:
    port: str  # handed to the container
    wire: str  # stays on the node


def host_link(node_key: str, device: str) -> HostLink:
    digest = hashlib.sha256(f"{node_key}/{device}".encode()).hexdigest()[:11]
    return HostLink(f"fn{digest}", f"fn{digest}w")


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    ip = shutil.which("ip")
    if ip is None:
        raise NetdevError("iproute2's ip is not on PATH: the NIC plugin needs it to make "
                          "the node-side interfaces")
    return subprocess.run([ip, *args], capture_output=True, text=True, timeout=TIMEOUT_S,
                          check=False)


def exists(name: str) -> bool:
    return _ip("link", "show", "dev", name).returncode == 0


def create(link: HostLink, mac: str, ips: tuple[str, ...] = (), mtu: int = 0,
           up: bool = True) -> None:
    """Make the pair afresh (a killed prepare's leftover goes first), the port with the NIC's
    MTU (0: the kernel's default) and addresses: the runtime keeps an interface's attributes
    and permanent addresses when it moves it into the pod (OCI runtime spec,
    ``linux.netDevices``), as a host NIC keeps its own. The node's end is up unless the NIC
    has no link (``up`` False: the pod's end then starts without carrier)."""
    remove(link)
    size = ("mtu", str(mtu)) if mtu > 0 else ()
    for args in (("link", "add", link.port, *size, "address", mac, "type", "veth", "peer",
                  "name", link.wire, *size),
                 *(("address", "add", ip, "dev", link.port) for ip in ips),
                 ("link", "set", "dev", link.wire, "up" if up else "down")):
        res = _ip(*args)
        if res.returncode != 0:
            remove(link)
            raise NetdevError(f"ip {' '.join(args)}: {res.stderr.strip() or res.returncode}")


def set_wire(link: HostLink, up: bool) -> bool:
    """Bring the node's end of the pair up or down: a pod's end loses its carrier while its
    peer is down (``NO-CARRIER``, operstate down), as a port whose cable is pulled does.
    False when the pair is gone (its pod's namespace took both ends)."""
    res = _ip("link", "set", "dev", link.wire, "up" if up else "down")
    if res.returncode != 0:
        if not exists(link.wire):
            return False
        raise NetdevError(f"ip link set dev {link.wire} {'up' if up else 'down'}: "
                          f"{res.stderr.strip()}")
    return True


def remove(link: HostLink) -> None:
    """Delete the pair if any end of it is still on the node (either end takes both)."""
    for name in (link.wire, link.port):
        if exists(name):
            res = _ip("link", "del", "dev", name)
            if res.returncode != 0 and exists(name):
                raise NetdevError(f"ip link del dev {name}: {res.stderr.strip()}")
            return
