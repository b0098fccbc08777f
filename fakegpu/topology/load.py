"""Entry points: a topology file or text -> validated Topology, else TopologyError."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
from pathlib import Path

from .build import build
from .errors import Problem, TopologyError
from .model import Topology
from .yamlsafe import MAX_BYTES, YamlRejected, read_yaml


def load_topology(path: str | Path) -> Topology:
    """Read and validate a topology file; every failure is a TopologyError."""
    source = str(path)
    try:
        # Devices and FIFOs are refused before opening (an open can block or have effects);
        # O_NONBLOCK and the second check cover one swapped in between.
        kind = _kind(os.stat(path).st_mode)
        if kind is not None:
            raise TopologyError(source, [Problem("", f"is {kind}, expected a YAML file")])
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise TopologyError(source, [Problem("", f"cannot read: {err.strerror or err}")]) \
            from None
    kind = _kind(os.fstat(fd).st_mode)
    if kind is not None:
        os.close(fd)
        raise TopologyError(source, [Problem("", f"is {kind}, expected a YAML file")])
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(MAX_BYTES + 1)  # never read a huge file whole
        except OSError as err:
            raise TopologyError(source, [Problem("", f"cannot read: {err.strerror or err}")]) \
                from None
    return dataclasses.replace(parse_bytes(data, source), path=str(Path(path).resolve()))


def _kind(mode: int) -> str | None:
    """What a non-regular file is (None for a regular file): devices, FIFOs and sockets
    block or never end."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def parse_topology(text: str, source: str = "<memory>") -> Topology:
    """Validate topology YAML given as text."""
    return parse_bytes(text.encode("utf-8", errors="surrogatepass"), source)


def parse_bytes(data: bytes, source: str) -> Topology:
    try:
        raw = read_yaml(data)
    except YamlRejected as err:
        raise TopologyError(source, [err.problem]) from None
    return dataclasses.replace(build(raw, source), digest=hashlib.sha256(data).hexdigest())
