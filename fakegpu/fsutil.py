"""The one atomic file write of fakegpu (and the one bounded read of a user's input file).

Every file a reader may look at while it is being replaced (NVML state, checkpoints, CDI specs,
cluster state, images) goes through :func:`atomic_write`: a reader sees the old file or the
whole new one, and after a crash the rename is durable (file and directory are fsynced).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

# Temp files are named ``.<name>.<random>.tmp`` so a crashed writer's leftovers can be found
# (and removed) by :func:`remove_stale_temps`.
TEMP_SUFFIX = ".tmp"


def atomic_write(path: str | Path, data: bytes | str, *, mode: int | None = None) -> Path:
    """Replace ``path`` with ``data``: temp file in the same directory, fsync, rename, fsync dir."""
    return move_into_place(write_temp(path, data, mode=mode), path)


def move_into_place(tmp: str | Path, path: str | Path) -> Path:
    """The second half of :func:`atomic_write`, also for a file another program wrote (an
    archive ``tar`` made beside ``path``): fsync ``tmp``, rename it to ``path``, fsync the
    directory. ``tmp`` is removed when the rename fails."""
    tmp, path = Path(tmp), Path(path)
    try:
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def write_temp(path: str | Path, data: bytes | str, *, mode: int | None = None,
               sync: bool = True) -> Path:
    """The first half of :func:`atomic_write`: ``data`` in a synced temp file beside ``path``.

    For writers that rename many files and sync their directory once (the DRA plugin's
    batches): the caller does ``os.replace(temp, path)`` and then :func:`fsync_dir`, or
    unlinks the temp. ``sync=False`` leaves the fsync to the caller (after the rename, one
    journal commit instead of two), for files whose readers detect and rebuild a torn copy.
    """
    path = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            if sync:
                os.fsync(handle.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def fsync_dir(directory: str | Path) -> None:
    """Make a rename or unlink in ``directory`` durable."""
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def remove_stale_temps(directory: str | Path, name: str) -> list[Path]:
    """Remove temp files that a killed :func:`atomic_write` of ``directory/name`` left behind.

    Only call it while holding whatever lock serialises writers of that file.
    """
    removed = []
    for tmp in Path(directory).glob(f".{name}.*{TEMP_SUFFIX}"):
        tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed


def read_input(path: str | Path, limit: int, what: str) -> bytes:
    """The bytes of the user's file ``path`` (a ``what``, for messages), at most ``limit``.

    Anything else is one-line InvalidInput naming the path: a FIFO (opened without blocking,
    it would hang a plain read), a device such as /dev/zero (no end to read to), a directory,
    a file over ``limit`` bytes, an unreadable one."""
    from fakegpu.errors import InvalidInput, printable

    where = printable(str(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise InvalidInput(f"{where}: cannot read the {what}: {err.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InvalidInput(f"{where}: not a regular file, expected a {what}")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    except OSError as err:
        raise InvalidInput(f"{where}: cannot read the {what}: {err.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise InvalidInput(f"{where}: larger than {limit} bytes, expected a {what}")
    return data
