"""What a kubelet plugin checks before it serves, and asks before it removes its slices."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

from fakegpu.errors import InvalidInput, printable

from . import names
from .sockets import SocketPaths, socket_alive, socket_paths

log = logging.getLogger(__name__)


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


def withdraw_slices(kubelet_root: Path, driver: str, own: SocketPaths,
                    cleanup: Callable[[], object], keep: str = "") -> None:
    """At exit: delete the node's slices (``cleanup``) unless another instance of the driver
    still serves here, or ``keep`` says why they stay (a replacement is on its way)."""
    if other_instances_alive(kubelet_root, driver, own):
        log.info("another instance serves driver=%s: leaving ResourceSlices in place", driver)
    elif keep:
        log.info("%s: leaving ResourceSlices of driver=%s in place", keep, driver)
    else:
        cleanup()


def prepare(node: str, driver: str, instance_id: str, kubelet_root: Path, cdi_root: Path,
            state_dir: Path | None) -> tuple[SocketPaths, Path]:
    """Check the names and make the directories a plugin instance needs, each failure one
    line naming its flag; (its sockets, its state directory)."""
    if not node:
        raise InvalidInput("--node is required (or set NODE_NAME)")
    # Each of these becomes part of a path (sockets, state dir) or a name the apiserver keeps:
    # one rule for all of them, checked before anything touches the disk.
    for flag, value in (("--node", node), ("--driver", driver), ("--instance-id", instance_id)):
        # (no instance id is fine: the default socket names)
        if (value or flag != "--instance-id") and (why := names.check(flag, value)):
            raise InvalidInput(why)
    try:
        paths = socket_paths(kubelet_root, driver, instance_id)
    except ValueError as err:
        raise InvalidInput(str(err)) from err
    state = state_dir or kubelet_root / "plugins" / driver
    # Of the kubelet's root only the plugin's own directories in it must be writable: in the
    # plugin's pod the root itself is read-only, only these are mounted from the node.
    for flag, path in (("--kubelet-root", paths.registration.parent),
                       ("--kubelet-root", paths.dra.parent), ("--cdi-root", cdi_root),
                       ("--state-dir", state)):
        usable_dir(flag, path)
    return paths, state


def on_signals(stop: threading.Event, signals: Sequence[signal.Signals] = (
        signal.SIGTERM, signal.SIGINT), also: Callable[[int], None] | None = None) -> None:
    """Set ``stop`` on any of ``signals`` (``also`` sees which first); only from the main
    thread (tests run plugins in threads, where signals cannot be caught)."""
    def handler(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s: shutting down", signal.Signals(signum).name)
        if also is not None:
            also(signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for sig in signals:
            signal.signal(sig, handler)
