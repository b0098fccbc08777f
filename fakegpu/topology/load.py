"""Entry points: a topology file or text -> validated Topology, else TopologyError."""

from __future__ import annotations

from pathlib import Path

from .build import build
from .errors import Problem, TopologyError
from .model import Topology
from .yamlsafe import MAX_BYTES, YamlRejected, read_yaml


def load_topology(path: str | Path) -> Topology:
    """Read and validate a topology file; every failure is a TopologyError."""
    source = str(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)  # never read a huge file whole
    except IsADirectoryError:
        raise TopologyError(source, [Problem("", "is a directory, expected a YAML file")]) \
            from None
    except OSError as err:
        raise TopologyError(source, [Problem("", f"cannot read: {err.strerror or err}")]) \
            from None
    return parse_bytes(data, source)


def parse_topology(text: str, source: str = "<memory>") -> Topology:
    """Validate topology YAML given as text."""
    return parse_bytes(text.encode("utf-8", errors="surrogatepass"), source)


def parse_bytes(data: bytes, source: str) -> Topology:
    try:
        raw = read_yaml(data)
    except YamlRejected as err:
        raise TopologyError(source, [err.problem]) from None
    return build(raw, source)
