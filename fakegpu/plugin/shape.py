"""How published devices look beyond what NVML says: fakegpu's own shape or NVIDIA's driver's
(its current release, or an older one that published more), and NVIDIA's consumable-shares
request policy. Pure.

NVIDIA's facts, read from its source (NVIDIA/k8s-dra-driver-gpu, now
kubernetes-sigs/dra-driver-nvidia-gpu, ``cmd/gpu-kubelet-plugin``):

- up to v25.3 a GPU carried ``index`` and ``minor`` and a MIG device ``index`` and
  ``parentIndex``; commit 36fc80ab (2025-09-25, "Remove GPU index for CDI spec generation /
  attribute advertisement") dropped them, so v25.8.0 and every release since publish none;
- ``--consumable-shares`` (main, feature gate ``ConsumableShares``, 0.5 alpha):
  ``disabled`` (the default), ``memory``, ``unlimited`` or a positive integer N; anything but
  ``disabled`` publishes every GPU and static MIG device with ``allowMultipleAllocations``
  and a request policy on ``memory`` (``consumable_shares.go``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CURRENT = "current"
V25_3 = "v25.3"  # the last NVIDIA release with the index attributes
RELEASES = (CURRENT, V25_3)

SHARES_DISABLED = "disabled"
SHARES_MEMORY = "memory"
SHARES_UNLIMITED = "unlimited"
SHARES_WORDS = (SHARES_DISABLED, SHARES_MEMORY, SHARES_UNLIMITED)
MIB = 1 << 20  # NVIDIA's request step


def parse_shares(text: str) -> str:
    """``--consumable-shares``: one of NVIDIA's words or a positive integer; ValueError else."""
    value = text.strip()
    if value in SHARES_WORDS or (value.isdigit() and int(value) > 0):
        return value
    raise ValueError(f"--consumable-shares: {text!r} is not one of {', '.join(SHARES_WORDS)} "
                     f"or a positive integer")


@dataclass(frozen=True)
class Shape:
    """``nvidia``: NVIDIA's driver's shape (its driver name was chosen); ``release`` which of
    its releases (``RELEASES``); ``consumable_shares`` its request policy; ``numa_list``:
    ``resource.kubernetes.io/numaNode`` in its list form (``--numa-node-list``, KEP-5491)."""

    nvidia: bool = False
    release: str = CURRENT
    consumable_shares: str = SHARES_DISABLED
    numa_list: bool = False

    def __post_init__(self) -> None:
        if self.release not in RELEASES:
            raise ValueError(f"--nvidia-compat-release: {self.release!r} is not one of "
                             f"{', '.join(RELEASES)}")
        parse_shares(self.consumable_shares)

    @property
    def index_attributes(self) -> bool:
        """``index``, ``minor``, MIG ``parentIndex``: fakegpu's own shape keeps them (its
        suites and CUDA_VISIBLE_DEVICES-style selectors use them); NVIDIA's only up to v25.3."""
        return not self.nvidia or self.release == V25_3

    @property
    def shares(self) -> bool:
        return self.nvidia and self.consumable_shares != SHARES_DISABLED


FAKEGPU = Shape()  # fakegpu's own shape: every default


def apply_shares(body: dict[str, Any], policy: str, memory_bytes: int) -> None:
    """NVIDIA's ``applyConsumableShares`` on one device entry (v1 shape, mutated in place):
    several claims at once, ``memory_bytes`` rounded down to whole MiB and requested in MiB
    steps; ``memory`` takes all of it unless a claim asks for less, ``unlimited`` and N none;
    N adds ``shares`` = N, one per claim by default."""
    from .slices import quantity  # (slices imports this module)

    body["allowMultipleAllocations"] = True
    capacity = body.setdefault("capacity", {})
    if "memory" not in capacity:
        return
    top = quantity(memory_bytes // MIB * MIB)
    memory: dict[str, Any] = {"value": top}
    capacity["memory"] = memory
    if policy == SHARES_MEMORY:
        memory["requestPolicy"] = {"default": top,
                                   "validRange": {"min": "1Mi", "max": top, "step": "1Mi"}}
        return
    memory["requestPolicy"] = {"default": "0", "validRange": {"min": "0", "max": top,
                                                               "step": "1Mi"}}
    if policy != SHARES_UNLIMITED:
        capacity["shares"] = {"value": policy, "requestPolicy": {
            "default": "1", "validRange": {"min": "1", "max": policy, "step": "1"}}}
