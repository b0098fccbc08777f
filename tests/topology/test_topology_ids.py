"""Identifiers are pinned: the same topology gives these exact ids in every version.

The values below were computed once (issue 14: identifiers changed once, from Faker's
version-dependent output to a documented hash). A change here is a breaking change for every
user who stored a UUID: say so in README.md's changelog, never just update the numbers.
"""

from __future__ import annotations

import hashlib
import uuid

from fakegpu.topology.load import load_topology
from fakegpu.topology.packaged import FIXTURES


def test_gb200_mini_ids_are_pinned() -> None:
    topology = load_topology(FIXTURES / "gb200-mini.yaml")  # seed 16
    first, second = topology.nodes[0], topology.nodes[1]
    assert [(g.uuid, g.serial) for g in first.gpus[:3]] == [
        ("GPU-f179ded1-6634-4dd3-9c78-38ff2ad053ad", "1180363850002"),
        ("GPU-3d189700-82b6-4d5a-9a49-a0c9b03a1981", "1180363850002"),  # same superchip
        ("GPU-ed665aa3-cdc1-4a0d-bf58-ae33dd0d2b05", "1756071128025"),
    ]
    assert second.gpus[0].uuid == "GPU-11ea2dd2-29b4-4a03-8200-bb13d5f415ab"
    assert second.gpus[0].serial == "1509337360215"
    assert first.gpus[0].fabric is not None
    assert first.gpus[0].fabric.cluster_uuid == "ba99c0ac-1be6-4e08-8a58-664b8d75941a"


def test_dgx_h100_ids_are_pinned() -> None:
    node = load_topology(FIXTURES / "dgx-h100.yaml").nodes[0]  # seed 1
    assert node.gpus[0].uuid == "GPU-5ba5c10c-5a62-4748-bdb4-b63c56d79875"
    assert node.gpus[7].uuid == "GPU-7f717f81-2200-4156-9491-7238cbe750aa"
    assert node.gpus[7].serial == "1520236632287"
    assert node.nvswitches[3].uuid == "SWX-f3d974d0-d4cc-4f83-98a4-58cc7d19f1f8"


def _documented(*parts: object) -> bytes:
    """The derivation as docs/topology.md states it, written out independently."""
    h = hashlib.blake2b(digest_size=32, person=b"fakegpu-ids-v1")
    for part in parts:
        data = str(part).encode()
        h.update(len(data).to_bytes(8, "little") + data)
    return h.digest()


def test_ids_follow_the_documented_derivation() -> None:
    topology = load_topology(FIXTURES / "mixed.yaml")
    for node in topology.nodes:
        for gpu in node.gpus:
            raw = bytearray(_documented(topology.seed, "gpu", node.name, gpu.index)[:16])
            raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
            raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
            assert gpu.uuid == f"GPU-{uuid.UUID(bytes=bytes(raw))}"
            parsed = uuid.UUID(gpu.uuid.removeprefix("GPU-"))
            assert parsed.version == 4 and parsed.variant == uuid.RFC_4122

