"""Deterministic identifiers: the same (seed, names) give the same ids on every machine.

Faker is re-seeded from a string before each draw; ``random.Random.seed`` hashes str
seeds with SHA-512, so results do not depend on PYTHONHASHSEED or the platform.
"""

from __future__ import annotations

import functools

from faker import Faker


@functools.cache
def _faker() -> Faker:
    return Faker("en_US")  # building a Faker is slow: one instance, re-seeded per draw


def _seeded(*parts: object) -> Faker:
    fake = _faker()
    fake.seed_instance("/".join(str(p) for p in parts))
    return fake


def _uuid(*parts: object) -> str:
    return str(_seeded(*parts).uuid4()).lower()


def gpu_uuid(seed: int, node: str, index: int) -> str:
    return "GPU-" + _uuid(seed, "gpu", node, index)


def board_serial(seed: int, node: str, board: int) -> str:
    """13 digits like real boards ("1654922012345"); shared by GPUs of one board."""
    return "1" + _seeded(seed, "serial", node, board).numerify("############")


def switch_uuid(seed: int, node: str, index: int) -> str:
    return "SWX-" + _uuid(seed, "nvswitch", node, index)


def cluster_uuid(seed: int, fabric: str) -> str:
    return _uuid(seed, "fabric", fabric)
