"""Deterministic identifiers: the same (seed, names) give the same ids on every machine,
in every Python and library version.

Every id is a BLAKE2b digest of its parts (docs/topology.md, "Identifiers", states the
derivation so another tool can recompute it): each part as UTF-8 text, prefixed by its byte
length as 8 little-endian bytes, so ("a", "bc") and ("ab", "c") differ. A UUID takes the first
16 bytes of the digest with the version set to 4 and the RFC 4122 variant, as the UUIDs real
NVIDIA GPUs report look; a serial takes its digits from the first 8 bytes.
"""

from __future__ import annotations

import hashlib
import uuid

_PERSON = b"fakegpu-ids-v1"  # BLAKE2b personalisation: another scheme gives other ids


def digest(*parts: object) -> bytes:
    """The 32-byte BLAKE2b digest of ``parts`` (str() of each, length-prefixed)."""
    h = hashlib.blake2b(digest_size=32, person=_PERSON)
    for part in parts:
        data = str(part).encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.digest()


def _uuid(*parts: object) -> str:
    return str(uuid.UUID(bytes=digest(*parts)[:16], version=4))


def gpu_uuid(seed: int, node: str, index: int) -> str:
    return "GPU-" + _uuid(seed, "gpu", node, index)


def board_serial(seed: int, node: str, board: int) -> str:
    """13 digits like real boards ("1654922012345"); shared by GPUs of one board."""
    number = int.from_bytes(digest(seed, "serial", node, board)[:8], "little")
    return "1" + f"{number % 10**12:012d}"


def switch_uuid(seed: int, node: str, index: int) -> str:
    return "SWX-" + _uuid(seed, "nvswitch", node, index)


def cluster_uuid(seed: int, fabric: str) -> str:
    return _uuid(seed, "fabric", fabric)
