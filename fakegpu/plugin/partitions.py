"""Dynamic MIG as partitionable devices (KEP 4815, DRAPartitionableDevices). Pure.

A GPU marked for dynamic MIG is published whole *and* as every placement of every GPU-instance
profile, none of which exists yet; the plugin creates the GPU instance when a claim for one is
prepared. What keeps the scheduler from handing out two placements the hardware cannot hold at
once is one CounterSet per GPU, shaped as NVIDIA's driver shapes it
(``cmd/gpu-kubelet-plugin/partitions.go``): ``gpu-<minor>-counter-set`` with a counter per
capacity (the largest any profile has: ``multiprocessors``, ``copy-engines``, ``decoders``,
``encoders``, ``jpeg-engines``, ``ofa-engines``, ``memory``) plus ``memory-slice-<i>`` = 1 for
each memory slice. A placement consumes its profile's capacities and the memory slices it
spans; the full GPU consumes everything. fakegpu adds ``compute-slices`` (the GPU's compute
slices; a placement consumes its profile's count), the hardware's other limit, so the counters
say by themselves what NVML enforces. Two placements whose memory slices overlap therefore
never fit together, and the full GPU never fits beside any partition.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

# The capacities NVIDIA's driver publishes for a MIG device, in its order, with the counter
# name it derives from each (camelCase -> DNS label).
CAPACITIES = ("multiprocessors", "copyEngines", "decoders", "encoders", "jpegEngines",
              "ofaEngines", "memory")
COMPUTE_SLICES = "compute-slices"  # fakegpu's addition (see the module docstring)


def counter_name(capacity: str) -> str:
    """NVIDIA's ``camelToDNSName``: ``copyEngines`` -> ``copy-engines``."""
    return re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", capacity).lower()


def memory_slice_counter(index: int) -> str:
    return f"memory-slice-{index}"


def counter_set_name(minor: int) -> str:
    return f"gpu-{minor}-counter-set"


@dataclass(frozen=True)
class Profile:
    """One GPU-instance profile as NVML describes it (nvmlGpuInstanceProfileInfo_v2_t)."""

    name: str  # "1g.10gb" (the `profile` attribute)
    index: int  # NVML_GPU_INSTANCE_PROFILE_* (what GetGpuInstanceProfileInfo takes)
    profile_id: int  # info.id: what create and the device name take (19 for 1g.10gb)
    instance_count: int  # instanceCount: how many fit on an empty GPU
    compute_slices: int  # sliceCount
    memory_mib: int  # memorySizeMB
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    placements: tuple[tuple[int, int], ...]  # (start, size) in memory slices

    def capacities(self) -> dict[str, int]:
        return {"multiprocessors": self.multiprocessors, "copyEngines": self.copy_engines,
                "decoders": self.decoders, "encoders": self.encoders,
                "jpegEngines": self.jpeg_engines, "ofaEngines": self.ofa_engines,
                "memory": self.memory_mib << 20}


@dataclass(frozen=True)
class Placement:
    """One possible GPU instance: a profile at a memory-slice placement."""

    profile: Profile
    start: int
    size: int

    def memory_slices(self) -> range:
        return range(self.start, self.start + self.size)


@dataclass(frozen=True)
class GpuPartitions:
    """What one dynamic-MIG GPU can be split into."""

    minor: int
    memory_slices: int  # 8
    profiles: tuple[Profile, ...]

    def placements(self) -> list[Placement]:
        return [Placement(p, start, size) for p in self.profiles for start, size in p.placements]

    def max_capacities(self) -> dict[str, int]:
        """Per capacity, the largest any profile has (NVIDIA's ``maxCapacities``)."""
        out = dict.fromkeys(CAPACITIES, 0)
        for profile in self.profiles:
            for name, value in profile.capacities().items():
                out[name] = max(out[name], value)
        return out

    def compute_slices(self) -> int:
        return max((p.compute_slices for p in self.profiles), default=0)

    def counters(self) -> dict[str, int]:
        """The CounterSet's counters: what the whole GPU has."""
        out = {counter_name(k): v for k, v in self.max_capacities().items()}
        out[COMPUTE_SLICES] = self.compute_slices()
        out.update({memory_slice_counter(i): 1 for i in range(self.memory_slices)})
        return out

    def full_consumption(self) -> dict[str, int]:
        """What allocating the whole GPU consumes: all of it."""
        return self.counters()

    def consumption(self, placement: Placement) -> dict[str, int]:
        out = {counter_name(k): v for k, v in placement.profile.capacities().items()}
        out[COMPUTE_SLICES] = placement.profile.compute_slices
        out.update({memory_slice_counter(i): 1 for i in placement.memory_slices()})
        return out


def fits(available: Mapping[str, int], consumptions: Iterable[Mapping[str, int]]) -> bool:
    """Whether the consumptions together fit the counters, as the scheduler decides it: every
    counter's sum at most its value, and no consumption of a counter the set lacks."""
    used: dict[str, int] = {}
    for consumption in consumptions:
        for name, value in consumption.items():
            if name not in available:
                return False
            used[name] = used.get(name, 0) + value
    return all(used[name] <= available[name] for name in used)


def counters_json(counters: Mapping[str, int]) -> dict[str, dict[str, str]]:
    """Counters as resource.k8s.io writes them: ``{name: {"value": "<quantity>"}}``, in the
    canonical binary form the apiserver stores (``9984Mi``, as NVIDIA's BinarySI quantities),
    so what was sent compares equal to what is stored and the pool does not flap."""
    from .slices import quantity  # (slices imports this module)

    return {name: {"value": quantity(value)} for name, value in sorted(counters.items())}


def overlapping(a: Placement, b: Placement) -> bool:
    return bool(set(a.memory_slices()) & set(b.memory_slices()))


def hardware_allows(gpu: GpuPartitions, chosen: Sequence[Placement]) -> bool:
    """What NVML (real and fake) allows for a set of GPU instances: no memory slice used twice,
    at most the GPU's compute slices, at most each profile's instance count."""
    seen: set[int] = set()
    per_profile: dict[int, int] = {}
    for placement in chosen:
        slices = set(placement.memory_slices())
        if slices & seen:
            return False
        seen |= slices
        pid = placement.profile.profile_id
        per_profile[pid] = per_profile.get(pid, 0) + 1
        if per_profile[pid] > placement.profile.instance_count:
            return False
    return sum(p.profile.compute_slices for p in chosen) <= gpu.compute_slices()
