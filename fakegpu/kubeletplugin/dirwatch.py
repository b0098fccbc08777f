"""Wake a plugin when files change in directories it reads (Linux inotify, through ctypes).

A plugin rediscovers its devices every few seconds anyway; this only makes a change (a
``nic-link-down`` fault writing a NIC's ``carrier`` in the node's sysfs view) reach it at once
rather than at the next rediscovery. Writers replace files by rename (``fsutil.atomic_write``),
so a moved-in or closed-after-write file is a change. Where inotify is unavailable, or a
directory cannot be watched, nothing wakes early and the rediscovery still finds the change.
"""

from __future__ import annotations

import ctypes
import logging
import os
import select
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

log = logging.getLogger(__name__)

# <sys/inotify.h>
IN_CLOSE_WRITE, IN_MOVED_TO, IN_CREATE = 0x8, 0x80, 0x100
IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
CHANGED = IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE


class DirWatch:
    """Calls ``changed()`` from its own thread after files change in ``dirs``."""

    def __init__(self, dirs: Iterable[Path], changed: Callable[[], None]) -> None:
        self._dirs = list(dirs)
        self._changed = changed
        self._fd = -1
        self._wake_r, self._wake_w = -1, -1
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Watch; False (and nothing started) when no directory could be watched."""
        if not self._dirs:
            return False
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        except (OSError, AttributeError) as err:
            log.info("no inotify (%s): changes wait for the next rediscovery", err)
            return False
        if fd < 0:
            log.info("inotify_init1 failed (%s)", os.strerror(ctypes.get_errno()))
            return False
        watched = sum(libc.inotify_add_watch(fd, os.fsencode(d), CHANGED) >= 0
                      for d in self._dirs)
        if not watched:
            os.close(fd)
            return False
        self._fd = fd
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC)
        self._thread = threading.Thread(target=self._loop, name="dirwatch", daemon=True)
        self._thread.start()
        return True

    def _loop(self) -> None:
        while True:
            ready, _, _ = select.select([self._fd, self._wake_r], [], [])
            if self._wake_r in ready:
                return
            try:
                while os.read(self._fd, 65536):  # drain: one wake for a burst of events
                    pass
            except BlockingIOError:
                pass
            try:
                self._changed()
            except Exception:  # a wake is an optimization: never let it end the watch
                log.exception("dirwatch callback failed")

    def stop(self) -> None:
        if self._thread is None:
            return
        os.write(self._wake_w, b"x")
        self._thread.join(5.0)
        for fd in (self._fd, self._wake_r, self._wake_w):
            os.close(fd)
        self._thread = None
