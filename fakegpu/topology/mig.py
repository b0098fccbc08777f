"""MIG placement rules, shared by the loader and (at runtime) the fake NVML.

A GPU instance occupies memory slices [start, start+size) and ``slice_count`` compute
slices. Hardware refuses an instance whose memory slices overlap another's, that would
exceed the compute slices, exceed the profile's own instance count (e.g. only one +me),
exceed the GPU's maximum, or that does not start at one of the profile's placements.
"""

from __future__ import annotations

from collections.abc import Sequence

from .model import MigCapability, MigGpuInstanceProfile


def memory_span(profile: MigGpuInstanceProfile, start: int) -> range:
    size = next((p.size for p in profile.placements if p.start == start), profile.memory_slices)
    return range(start, start + size)


def refusal(cap: MigCapability, placed: Sequence[tuple[MigGpuInstanceProfile, int]],
            profile: MigGpuInstanceProfile, start: int) -> str | None:
    """Why ``profile`` at ``start`` cannot join ``placed`` (None = it can)."""
    legal = [p.start for p in profile.placements]
    if start not in legal:
        return f"placement {start} is not legal for {profile.name}, expected one of {legal}"
    if len(placed) >= cap.max_gpu_instances:
        return f"the GPU already has the maximum of {cap.max_gpu_instances} GPU instances"
    same = sum(1 for p, _ in placed if p.name == profile.name)
    if same >= profile.instance_count:
        return (f"at most {profile.instance_count} instance(s) of {profile.name} fit on one "
                "GPU")
    used_compute = sum(p.slice_count for p, _ in placed)
    if used_compute + profile.slice_count > cap.compute_slices:
        return (f"needs {profile.slice_count} compute slice(s) but only "
                f"{cap.compute_slices - used_compute} of {cap.compute_slices} are free")
    mine = set(memory_span(profile, start))
    for other, other_start in placed:
        if mine & set(memory_span(other, other_start)):
            return (f"memory slices {min(mine)}-{max(mine)} overlap {other.name} at "
                    f"placement {other_start}")
    return None


def first_free(cap: MigCapability, placed: Sequence[tuple[MigGpuInstanceProfile, int]],
               profile: MigGpuInstanceProfile) -> int | None:
    """The lowest legal start where ``profile`` fits now, as NVML's CreateGpuInstance picks."""
    for placement in profile.placements:
        if refusal(cap, placed, profile, placement.start) is None:
            return placement.start
    return None


